"""Least privilege, as the attacker with a shell on a node and a portal
account sees it: what can alice read, reach or change of the hub, its proxy
and their secrets? Against the real test hub, Slurm, slapd and sudo."""

import glob
import json
import os
import pwd
import re
import subprocess
import tempfile
import time
from pathlib import Path

import certifi
import pytest
import requests

from portal import settings as site_settings
from portal.helper import extend as extendhelper
from portal.helper import imagecheck, notebook, slurmread
from portal.setup import install
from tests.support.hubsettings import CA_CERT
from tests.support.internaltls import CERTS, INTERNAL_TLS, proxy_api
from tests.support.jobs import squeue, wait_no_jobs
from tests.support.testhub import JOB_NAME, PORT, STATE

SITE = site_settings.load()
HUB_USER = SITE["hub"]["user"]
PROXY_USER = SITE["hub"]["proxy_user"]

# Run as alice: every environment and command line of every process she can
# read, until the stop file appears; one JSON line per distinct sight.
WATCHER = r"""
import json, os, sys, time
stop, seen = sys.argv[1], set()
deadline = time.monotonic() + 600
while not os.path.exists(stop) and time.monotonic() < deadline:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace").replace("\0", " ")
        except OSError:
            continue
        key = (cmdline, environ)
        if key not in seen:
            seen.add(key)
            print(json.dumps({"pid": pid, "cmdline": cmdline, "environ": environ}), flush=True)
    time.sleep(0.002)
"""


def hub_secrets():
    """What must never show in a process of a user: the hubs' proxy tokens
    and cookie secrets, the LDAP admin's and the accounting database's
    passwords, other users' passwords, the TLS key, the internal CAs' keys
    and the hub's and the proxy's internal keys."""
    found = {}
    for state in (STATE, Path(SITE["hub"]["state_dir"])):
        for name in ("proxy_token", "jupyterhub_cookie_secret"):
            path = state / name
            if path.exists():
                found[f"{path}"] = path.read_text().strip()
    cluster = SITE["cluster"]
    for path in (
        Path(cluster["ldap_dir"]) / "admin.password",
        Path("/etc/slurm/slurmdbd.password"),
    ):
        if path.exists():
            found[str(path)] = path.read_text().strip()
    for account in json.loads(Path(cluster["accounts_file"]).read_text()):
        if account["username"] != "alice":
            found[f"password of {account['username']}"] = account["password"]
    keys = {"TLS key": Path(SITE["tls"]["key"])}
    if INTERNAL_TLS:  # the internal CAs' keys, the hub's and the proxy's internal keys
        for name in ("hub-ca", "notebooks-ca", "proxy-client-ca", "hub-internal", "proxy-client"):
            keys[f"internal key {name}"] = CERTS / name / f"{name}.key"
    for name, path in keys.items():
        key_lines = path.read_text().splitlines()
        found[name] = key_lines[len(key_lines) // 2]
    assert all(len(value) >= 12 for value in found.values()), "a secret too short to search for"
    return found


def test_a_user_sees_no_hub_secret_in_her_processes_during_a_spawn_and_a_stop(login):
    secrets = hub_secrets()
    folder = tempfile.mkdtemp()
    os.chmod(folder, 0o755)
    stop = Path(folder) / "stop"
    watcher = subprocess.Popen(
        ["sudo", "-u", "alice", "--", "/usr/bin/python3", "-c", WATCHER, str(stop)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    try:
        time.sleep(1)
        alice = login("alice")
        r = alice.api("POST", "/users/alice/server", json={"profile": "pytorch", "gpus": 1})
        assert r.status_code in (201, 202), r.text
        alice.wait_ready("alice")
        listening = listening_sockets(pwd.getpwnam("alice").pw_uid)
        r = alice.api("DELETE", "/users/alice/server")
        assert r.status_code in (202, 204), r.text
        alice.wait_stopped("alice")
        wait_no_jobs("alice")
    finally:
        stop.touch()
        out, _ = watcher.communicate(timeout=60)
    sights = [json.loads(line) for line in out.splitlines()]

    # the watcher did read alice's session: its command and its environment
    server = [s for s in sights if "jupyterhub-singleuser" in s["cmdline"]]
    assert server, f"the watcher saw no session server among {len(sights)} sights"
    assert any("JUPYTERHUB_API_TOKEN=" in s["environ"] for s in server)
    leaks = sorted(
        {
            f"{name} in pid {s['pid']} ({s['cmdline'][:60]})"
            for s in sights
            for name, secret in secrets.items()
            if secret in s["environ"] or secret in s["cmdline"]
        }
    )
    assert not leaks, leaks
    named = [s["cmdline"][:60] for s in sights if "CONFIGPROXY_AUTH_TOKEN" in s["environ"]]
    assert not named, named
    # her session's server listened on the node's address, never on all interfaces
    assert listening, "no listening socket of alice's session was found"
    assert all(not address.startswith(("0.0.0.0:", "*:", "[::]:")) for address in listening), (
        listening
    )


def listening_sockets(uid):
    """The local addresses of the TCP sockets listening as ``uid``, on this
    host and in every compute node's network namespace."""
    nodes = [[]] + [["nsenter", f"--net={ns}"] for ns in glob.glob("/var/run/netns/n*")]
    found = []
    for enter in nodes:
        out = subprocess.run([*enter, "ss", "-Hltne"], capture_output=True, text=True).stdout
        found += [line.split()[3] for line in out.splitlines() if f"uid:{uid} " in line + " "]
    return found


@pytest.mark.parametrize("name", ["openldap", "munge", "eve"])
def test_a_portal_admin_cannot_add_an_account_outside_the_portal(login, name):
    """openldap and munge are system accounts; eve is an LDAP user in no
    portal group. carol, a portal admin, starts users' sessions but cannot
    add hub users (admin:users is a JupyterHub admin's), so she cannot start
    a session for one either; nothing is submitted. (A break-glass admin's
    request is refused by the spawner: tests/unit/test_spawner_options.py.)"""
    carol = login("carol")
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    r = carol.api("POST", f"/users/{name}")
    assert r.status_code == 403 and "requires any of [admin:users]" in r.json()["message"]
    r = carol.api("POST", "/users", json={"usernames": [name]})
    assert r.status_code == 403, r.text
    r = carol.api("POST", f"/users/{name}/server", json={"profile": "pytorch", "gpus": 1})
    assert r.status_code == 404, r.text
    assert carol.api("GET", f"/users/{name}").status_code == 404
    assert not squeue("-u", name, "-o", "%i")
    sacct = subprocess.run(
        ["sacct", "-n", "-X", "-u", name, "-S", since, "-o", "JobID"],
        capture_output=True,
        text=True,
    )
    assert sacct.stdout.strip() == "", sacct.stdout


def process_user(pid):
    return pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name


def test_the_hub_the_service_and_the_proxy_run_as_unprivileged_accounts(hub):
    run = Path("/run/portal") / STATE.name  # root's, not the state folder
    hub_pid = (run / "jupyterhub.pid").read_text().strip()
    proxy_pid = (run / "proxy.pid").read_text().strip()
    assert process_user(hub_pid) == HUB_USER
    assert process_user(proxy_pid) == PROXY_USER
    assert "configurable-http-proxy" in Path(f"/proc/{proxy_pid}/cmdline").read_text()
    children = Path(f"/proc/{hub_pid}/task/{hub_pid}/children").read_text().split()
    service = [p for p in children if b"portal.service" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert service, "the admin service is not a child of the hub"
    assert {process_user(p) for p in service} == {HUB_USER}
    culler = [
        p for p in children if b"jupyterhub_idle_culler" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    assert culler, "the idle culler is not a child of the hub"
    assert {process_user(p) for p in culler} == {HUB_USER}
    for name in (HUB_USER, PROXY_USER):
        entry = pwd.getpwnam(name)
        assert 0 < entry.pw_uid < 1000 and entry.pw_shell.endswith("nologin")
    # what the proxy's API answers without its token
    assert proxy_api(token="").status_code == 403


def as_portal(*argv):
    return subprocess.run(
        ["setpriv", f"--reuid={HUB_USER}", f"--regid={HUB_USER}", "--init-groups", *argv],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )


def sudo_rules(user):
    """The rules ``sudo -l -U USER`` lists, each on one line (sudo wraps a
    long one onto indented lines of its own)."""
    listing = subprocess.run(
        ["sudo", "-l", "-U", user], capture_output=True, text=True, check=True
    ).stdout
    rules = []
    for line in listing.split("may run the following commands", 1)[1].splitlines()[1:]:
        if line.startswith("    ("):
            rules.append(line.strip())
        elif line.startswith("        ") and rules:
            rules[-1] += " " + line.strip()
    return rules


def test_the_hubs_account_may_run_slurm_as_portal_users_and_the_helper_as_root(hub):
    rules = sudo_rules(HUB_USER)
    assert len(rules) == 3, rules
    runas, commands = re.match(r"\((.*)\)\s*NOPASSWD:\s*(.*)", rules[0]).groups()
    check = imagecheck.INSTALLED_AT
    reader = notebook.INSTALLED_AT
    # scancel of one job named as a registered hub's (its regular expression
    # has a comma of its own)
    scancel = install.cancel_args(install.registered_job_names()).replace("\\=", "=")
    assert commands.replace("\\=", "=") == (
        f"/usr/bin/sbatch, /usr/bin/scancel {scancel}, {check}, {reader}"
    )
    # the image check as nobody: the service's checks of the site's images
    assert rules[1] == f"(nobody) NOPASSWD: {check}"
    assert "ALL" not in runas and {r.strip() for r in runas.split(",")} >= {
        "%portal-users",
        "!root",
    }
    # as root: the extension helper, three whole numbers; the read helper,
    # a command line of squeue, scontrol, sacct or sshare (it checks each word)
    assert rules[2] == (
        f"(root) NOPASSWD: {extendhelper.INSTALLED_AT} {extendhelper.SUDOERS_ARGS}, "
        f"{slurmread.INSTALLED_AT} {slurmread.SUDOERS_ARGS}"
    )
    assert (
        as_portal("sudo", "-n", "-u", "alice", "--", "/usr/bin/sbatch", "--version").returncode == 0
    )
    helper = extendhelper.INSTALLED_AT
    refused = {
        "root": ["-u", "root", "--", "/usr/bin/sbatch", "--version"],
        "openldap": ["-u", "openldap", "--", "/usr/bin/sbatch", "--version"],
        "eve": ["-u", "eve", "--", "/usr/bin/sbatch", "--version"],
        "a shell": ["-u", "alice", "--", "/bin/sh", "-c", "id"],
        "squeue": ["-u", "alice", "--", "/usr/bin/scontrol", "--version"],
        "scontrol as root": ["--", "/usr/bin/scontrol", "--version"],
        "the helper as alice": ["-u", "alice", "--", helper, "1", "60", "60"],
        "the helper, other words": ["--", helper, "1", "60", "60;id"],
        "the helper, no words": ["--", helper],
        "scancel without the portal's name": ["-u", "alice", "--", "/usr/bin/scancel", "1"],
        "scancel of another name": ["-u", "alice", "--", "/usr/bin/scancel", "--name=x", "1"],
        "the read helper as alice": ["-u", "alice", "--", slurmread.INSTALLED_AT, "squeue", "-h"],
        "the read helper, scancel": ["--", slurmread.INSTALLED_AT, "scancel", "1"],
        "the read helper, no words": ["--", slurmread.INSTALLED_AT],
        "the helper's environment": ["PYTHONPATH=/tmp", "--", helper, "1", "60", "60"],
        "the image check as root": ["--", check, "--jupyter", "/x", "/y"],
        "the image check as openldap": ["-u", "openldap", "--", check, "--jupyter", "/x", "/y"],
        "the image check's environment": ["-u", "nobody", "PYTHONPATH=/tmp", "--", check],
        "the notebook reader as root": ["--", reader, "read", "x.ipynb"],
        "the notebook reader as nobody": ["-u", "nobody", "--", reader, "read", "x.ipynb"],
        "the notebook reader's environment": ["-u", "alice", "PYTHONPATH=/tmp", "--", reader],
    }
    let_through = [
        what for what, argv in refused.items() if as_portal("sudo", "-n", *argv).returncode == 0
    ]
    assert not let_through, let_through


def test_secrets_belong_to_their_service_account_alone(hub):
    expect = {
        STATE: (HUB_USER, 0o700),
        STATE / "proxy_token": (HUB_USER, 0o600),
        STATE / "jupyterhub_cookie_secret": (HUB_USER, 0o600),
        STATE / "jupyterhub.sqlite": (HUB_USER, 0o600),
        Path(SITE["cluster"]["accounts_file"]): ("root", 0o600),
        Path(SITE["tls"]["key"]): ("root", 0o600),
        Path(SITE["tls"]["key"]).parent / "proxy.key": (PROXY_USER, 0o400),
    }
    if INTERNAL_TLS:
        # the internal CAs' keys and the hub's (its state folder's); the proxy's copies
        proxy_tls = Path("/run/portal") / STATE.name / "proxy-tls"
        expect |= {
            CERTS / "hub-ca" / "hub-ca.key": (HUB_USER, 0o600),
            CERTS / "notebooks-ca" / "notebooks-ca.key": (HUB_USER, 0o600),
            CERTS / "hub-internal" / "hub-internal.key": (HUB_USER, 0o600),
            proxy_tls / "proxy-api.key": (PROXY_USER, 0o400),
            proxy_tls / "proxy-client.key": (PROXY_USER, 0o400),
        }
    # root writes nothing in the hub's folder (a link planted there by the
    # hub's account would make root write any file): all of it is the hub's
    assert {pwd.getpwuid(p.lstat().st_uid).pw_name for p in STATE.iterdir()} == {HUB_USER}
    for path, (owner, mode) in expect.items():
        st = path.stat()
        assert (pwd.getpwuid(st.st_uid).pw_name, oct(st.st_mode & 0o777)) == (owner, oct(mode)), (
            path
        )
        assert subprocess.run(["sudo", "-u", "alice", "test", "-r", str(path)]).returncode != 0, (
            path
        )


def test_the_portal_is_served_over_https_only(hub):
    r = requests.get(f"{hub}/hub/login", verify=CA_CERT, timeout=10)
    assert r.status_code == 200 and 'name="password"' in r.text
    assert r.headers["Strict-Transport-Security"].startswith("max-age=")
    assert "Secure" in r.headers["Set-Cookie"]
    # the certificate is checked, not waved through: a client without the CA refuses it
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{hub}/hub/login", verify=certifi.where(), timeout=10)
    # plain HTTP on the same port serves no login form
    try:
        plain = requests.get(f"http://127.0.0.1:{PORT}/hub/login", timeout=10)
        assert 'name="password"' not in plain.text
    except requests.exceptions.ConnectionError:
        pass


def test_login_cookies_are_secure(login):
    alice = login("alice")
    for cookie in alice.session.cookies:
        assert cookie.secure, cookie.name


def test_a_spawn_link_fills_the_form_and_starts_nothing(login):
    alice = login("alice")
    page = alice.session.get(alice.url("/hub/spawn?profile=tensorflow&gpus=2"), timeout=30)
    assert page.status_code == 200
    assert "press Start" in page.text
    assert re.search(r'<option value="tensorflow"\s+selected', page.text)
    last = json.loads(re.search(r'id="portal-last">(.*?)</script>', page.text).group(1))
    assert last["profile"] == "tensorflow" and str(last["gpus"]) == "2"
    # a link that names only a profile fills in its defaults, in the HTML itself
    # (the form works without its script): 1 GPU, the profile's default hours
    page = alice.session.get(alice.url("/hub/spawn?profile=pytorch"), timeout=30).text
    assert re.search(r'<option value="pytorch"\s+selected', page)
    assert re.search(r'<option value="1"\s+selected>1</option>', page)
    assert re.search(r'name="hours"[^>]*value="8"', page)
    assert "link-note" not in page
    # values that do not fit are not dropped silently: the form says what it set
    page = alice.session.get(
        alice.url("/hub/spawn?profile=distributed&nodes=9&gpus=x&hours=2"), timeout=30
    ).text
    notes = re.findall(r'class="alert alert-warning link-note">(.*?)</p>', page)
    assert notes == [
        "The link&#39;s gpus=&#39;x&#39; does not fit PyTorch distributed (1 to 4): 1 is set.",
        "The link&#39;s nodes=&#39;9&#39; does not fit PyTorch distributed (1 to 2): 1 is set.",
    ], notes
    page = alice.session.get(alice.url("/hub/spawn?profile=nosuch"), timeout=30).text
    assert "The link&#39;s profile &#39;nosuch&#39; is not available to you" in page
    time.sleep(1)
    assert not squeue("-n", JOB_NAME, "-u", "alice", "-o", "%i")


def test_a_refused_spawn_keeps_the_last_options_and_control_characters_are_refused(session):
    alice = session("alice", profile="tensorflow", gpus=2, hours=3)
    alice.api("DELETE", "/users/alice/server")
    alice.wait_stopped("alice")
    wait_no_jobs("alice")
    for body, message in (
        ({"profile": "pytorch", "gpus": 99}, "GPUs must be between"),
        ({"profile": "pytorch", "gpus": "٣"}, "GPUs must be a whole number"),
        ({"profile": "pytorch\n#SBATCH --gres=gpu:4"}, "control characters"),
        ({"profile": "pytorch", "hours": "2\x00"}, "control characters"),
    ):
        r = alice.api("POST", "/users/alice/server", json=body)
        assert r.status_code == 400 and message in r.json()["message"], r.text
    assert not squeue("-n", JOB_NAME, "-u", "alice", "-o", "%i")
    page = alice.session.get(alice.url("/hub/spawn"), timeout=30)
    last = json.loads(re.search(r'id="portal-last">(.*?)</script>', page.text).group(1))
    assert last == {"profile": "tensorflow", "gpus": 2, "hours": 3, "nodes": 1}
