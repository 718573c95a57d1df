"""A site installs the portal on its own login node (issue 35): the fresh
machine of tests/site (systemd as PID 1, joined to the demo cluster by hand),
the site's own prerequisites set up by hand (Node.js and
configurable-http-proxy, nginx on 443 with a certificate of its own, the
shared environments and homes), then the ``dsportal`` wheel installed with
pip into a new venv, ``portal setup`` and ``systemctl enable --now``.

The journey, in order (each test relies on the ones before it):
the login page through nginx; alice's session (1 GPU, pytorch) runs a cell;
the hub killed with SIGKILL answers again under systemd within 10 s and the
session still runs cells; the session stops and its job ends; the site's
files, packages and services are as before; ``portal uninstall`` and
``make purge``'s file step (with state_dir = "/var/lib/jupyterhub") each
remove only the portal's paths.

What it measured is printed at the end (``pytest -s`` shows it): the
wheel's size, setup's lines, the time to a ready session, the seconds from
SIGKILL to an answer, and ``systemd-analyze security`` of both units.
"""

import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import requests

from portal import settings as site_settings
from tests.site.install import (
    CHP_ON_HOST,
    DIST,
    NGINX_TLS,
    Resolved,
    build_wheel,
    ensure_dependencies,
    install_chp,
    install_nginx_site,
    journal,
    make_ca,
    pin_xsrf,
    pip_install,
    run_cell,
    wait_answering,
)
from tests.site.join import CA_IN_MACHINE, REPO, join_demo, stop_ldap_relay_if_unused
from tests.site.machine import PACKAGES, STATE, Machine, MachineError, why_not_here
from tests.site.snapshot import differences, snapshot
from tests.support import kernelcells
from tests.support.hubclient import HubClient

pytestmark = pytest.mark.slow

# Not login2 (.30, README's by hand) nor login-test (.31, test_login_node.py).
NAME, HOST = "login-site", 32
USER = "alice"
# The portal's public name (nginx's), with a dot as a site's has: Python's
# cookie jar files a dotless host's cookies under HOST.local, apart from the
# hub's cookies for .HOST.
PUBLIC = f"{NAME}.example"
# What a site installs before the portal: Node.js from Debian, for
# configurable-http-proxy (tests/site/install.py).
SITE_PACKAGES = (*PACKAGES, "nodejs")
VENV = "/opt/dsportal"
# The portal's ports in the machine, none of the demo's (8000, 8001, 8081,
# 10101) nor the tests' (18000+) or the helpers' (19000-19400).
PORT = 8100
JOB_NAME = "portal-site"
ETC_PORTAL = "/etc/portal"
SITE_TOML = f"{ETC_PORTAL}/portal.toml"
SECURITY = re.compile(r"Overall exposure level for (\S+): ([0-9.]+) (\w+)")

FIGURES = {}


# ---------------------------------------------------------------- pure


def site_settings_toml(address, ldap_host, ldap_port, state_dir="/var/lib/portal/hub"):
    """The site's /etc/portal/portal.toml: only what differs from the
    package's defaults, as a site's administrator writes it."""
    return f"""# login-site's settings (tests/site/test_site_install.py)
[cluster]
embedded = false

[hub]
# configurable-http-proxy on loopback; the site's nginx terminates TLS on 443
bind_url = "http://127.0.0.1:{PORT}"
public_url = "https://{PUBLIC}/"
domain = "{PUBLIC}"
api_ip = "{address}"
api_port = {PORT + 81}
connect_ip = "{address}"
proxy_api_port = {PORT + 1}
state_dir = "{state_dir}"
db_url = "sqlite:///{state_dir}/jupyterhub.sqlite"

[portal]
service_port = {PORT + 2}

[tls]
ca_cert = "{ETC_PORTAL}/tls/site-ca.crt"
cert = "{NGINX_TLS}/{PUBLIC}.crt"
key = "{NGINX_TLS}/{PUBLIC}.key"

[ldap]
server_address = "{ldap_host}"
server_port = {ldap_port}
ca_cert = "{CA_IN_MACHINE}"

[slurm]
job_name = "{JOB_NAME}"
poll_interval = 2.0
cluster_interval = 2.0

[metrics]
prometheus_listen = ""

[containers]
build = []

[[profiles]]
name = "pytorch"
display_name = "PyTorch"
environment = "pytorch"
max_gpus = 4
"""


# ---------------------------------------------------------------- the machine's side


def listing(node, *folders):
    """Every path under ``folders`` inside, with its type (find -xdev)."""
    out = node.run(["find", *folders, "-xdev", "-printf", "%y %p\\n"], timeout=120).stdout
    return set(out.splitlines())


# Paths under /etc and /var/lib that the running system changes by itself
# (systemd's timers and its random seed, sssd's caches, dpkg's, nginx's),
# and the backups useradd and userdel keep of the account files.
VOLATILE = re.compile(
    r"^. /var/lib/(systemd|sss|dpkg|private|dhcp|nginx|sudo|logrotate|apt|ucf|pam)(/|$)"
    r"|^. /etc/(ld\.so\.cache|\.pwd\.lock|mtab|(passwd|group|shadow|gshadow)-)$"
)


def steady(paths):
    return {p for p in paths if not VOLATILE.search(p)}


@pytest.fixture(scope="module")
def site(cluster, accounts):
    """The machine at .32, joined to the demo cluster, with what a site
    installs by hand before the portal; the "before" snapshot taken; the
    portal not yet installed. Removed at the end, its jobs cancelled."""
    reason = why_not_here()
    if reason:
        pytest.skip(f"no site machine here: {reason}")
    if not CHP_ON_HOST.is_dir():
        pytest.skip(f"no configurable-http-proxy at {CHP_ON_HOST} to give the machine")
    wheel = build_wheel()
    FIGURES["wheel"] = f"{wheel.name}, {wheel.stat().st_size / 1024:.0f} KiB"
    try:
        deps = ensure_dependencies()
    except MachineError as e:
        pytest.skip(f"the hub's dependencies cannot be downloaded: {e}")
    network = site_settings.load()["cluster"]["network"]
    address = f"{network}.{HOST}"
    envs = site_settings.load()["envs"]["prefix"]
    machine = Machine(NAME, address, ro_binds=(envs, str(DIST), str(deps), str(REPO)),
                      packages=SITE_PACKAGES)  # fmt: skip
    machine.remove()  # one an interrupted run left
    try:
        machine.boot()
    except MachineError as e:
        machine.remove()
        pytest.skip(f"systemd-nspawn cannot boot a machine here: {e}")
    try:
        join_demo(machine, probe_user=USER)
        with tempfile.TemporaryDirectory() as tmp:
            ca = make_ca(tmp, PUBLIC)
            install_prerequisites(machine, ca, address)
            ca_bundle = STATE / NAME / "site-ca.crt"
            shutil.copy(ca / "ca.crt", ca_bundle)
        yield Site(machine, address, wheel, deps, ca_bundle)
    finally:
        subprocess.run(["scancel", f"--name={JOB_NAME}"], check=False)
        machine.remove()
        stop_ldap_relay_if_unused()


def install_prerequisites(node, ca, address):
    """What the site sets up by hand: configurable-http-proxy in
    /usr/local, its web certificate and nginx on 443 in front of the
    portal's proxy, and the portal's settings."""
    install_chp(node)
    install_nginx_site(node, PUBLIC, PORT, ca, who="tests/site/test_site_install.py")
    node.run(["mkdir", "-p", f"{ETC_PORTAL}/tls"])
    node.write(f"{ETC_PORTAL}/tls/site-ca.crt", (ca / "ca.crt").read_text())
    ldap = site_settings.load()["ldap"]
    node.write(SITE_TOML, site_settings_toml(address, socket.gethostname(),
                                             ldap["server_port"]))  # fmt: skip


class Site:
    def __init__(self, node, address, wheel, deps, ca_bundle):
        self.node, self.address, self.wheel, self.deps = node, address, wheel, deps
        self.ca_bundle = str(ca_bundle)
        self.base = f"https://{PUBLIC}:443"  # users' sessions on NAME.HOST:443 (HubClient)
        self.before = snapshot(node)
        self.before_paths = listing(node, "/etc", "/var/lib", "/usr/local")

    def portal(self, *args, check=True, timeout=300, env=()):
        """``portal ARGS`` as root inside, from the venv; its result."""
        return self.node.run(["env", *env, f"{VENV}/bin/portal", *args], check=check,
                             timeout=timeout)  # fmt: skip

    def get(self, path, **kwargs):
        return requests.get(self.base + path, verify=self.ca_bundle, timeout=10, **kwargs)

    def client(self):
        client = HubClient(self.base)
        client.session.verify = self.ca_bundle
        return client


@pytest.fixture(scope="module")
def browser(site):
    """PUBLIC and its users' hosts resolving to the machine, and the site's CA trusted, for the
    module's clients (kernelcells' requests and websocket too)."""
    with Resolved(PUBLIC, site.address), pytest.MonkeyPatch.context() as mp:
        mp.setenv("REQUESTS_CA_BUNDLE", site.ca_bundle)
        mp.setattr(kernelcells, "CA_CERT", site.ca_bundle)
        yield site


def our_jobs():
    out = subprocess.run(["squeue", "--noheader", f"--name={JOB_NAME}", "--format=%i %u %T"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [line.split() for line in out.splitlines() if line.strip()]


# ---------------------------------------------------------------- the journey


def test_the_wheel_installs_with_pip_into_a_new_venv(browser):
    node = browser.node
    FIGURES["pip install"] = f"{pip_install(node, VENV, browser.deps):.0f} s"
    shown = node.run([f"{VENV}/bin/pip", "show", "dsportal"]).stdout
    assert "Version: 0.1.0" in shown
    # no checkout: the hub's configuration and the templates come from the venv
    where = node.run([f"{VENV}/bin/python", "-c",
                      "import spawners, portal; print(spawners.__file__, portal.__file__)"],
                     ).stdout  # fmt: skip
    assert where.split() and all(p.startswith(f"{VENV}/lib/") for p in where.split()), where


def test_portal_setup_under_systemd_serves_the_login_page_through_nginx(browser):
    node = browser.node
    done = browser.portal("setup", "--no-check", env=(f"PORTAL_CONFIG={SITE_TOML}",))
    lines = [line for line in done.stderr.splitlines() if line.startswith("[portal]")]
    FIGURES["portal setup"] = lines
    assert any("wrote /etc/systemd/system/portal-hub.service" in line for line in lines), lines
    assert any("/etc/sudoers.d/portal" in line for line in lines), lines
    # idempotent: a second run changes nothing
    again = browser.portal("setup", "--no-check", env=(f"PORTAL_CONFIG={SITE_TOML}",))
    assert [x for x in again.stderr.splitlines() if x.startswith("[portal]")] == []
    for unit in ("portal-proxy.service", "portal-hub.service"):
        verify = node.run(["systemd-analyze", "verify", unit], check=False)
        assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    began = time.monotonic()
    node.run(["systemctl", "enable", "--now", "portal-proxy", "portal-hub"])
    try:
        wait_answering(browser, timeout=90)
    except AssertionError:
        print(journal(node, "portal-proxy"), journal(node, "portal-hub"), sep="\n")
        raise
    FIGURES["setup to login page"] = f"{time.monotonic() - began:.1f} s"
    page = browser.get("/hub/login")
    assert 'name="username"' in page.text and 'name="password"' in page.text
    for unit in ("portal-proxy", "portal-hub"):
        state = node.run(["systemctl", "show", "-p", "User,ActiveState", unit]).stdout.split()
        assert "ActiveState=active" in state, state
    # each as its unprivileged account
    users = node.run(["ps", "-o", "user=", "-C", "node,jupyterhub"]).stdout.split()
    assert users and "root" not in users, users
    FIGURES["security"] = {
        unit: node.run(["systemd-analyze", "security", "--no-pager", unit], check=False).stdout
        for unit in ("portal-proxy.service", "portal-hub.service")
    }


def test_alice_starts_a_session_and_runs_a_cell(browser, accounts):
    client = browser.client()
    r = client.login(USER, accounts[USER]["password"])
    assert r.status_code == 302, f"login answered {r.status_code}: {r.text[:300]}"
    # the home page, as a browser lands on it: its _xsrf cookie is the logged-in user's
    home = client.session.get(client.url("/hub/home"), timeout=30)
    assert home.status_code == 200, home.status_code
    pin_xsrf(client, PUBLIC)
    began = time.monotonic()
    r = client.api("POST", f"/users/{USER}/server", json={"profile": "pytorch", "gpus": 1})
    cookies = [(c.name, c.domain, c.path) for c in client.session.cookies]
    assert r.status_code in (201, 202), (r.text, cookies)
    try:
        client.wait_ready(USER, timeout=180)
    except AssertionError:
        print(journal(browser.node, "portal-hub", 120))
        raise
    FIGURES["spawn to ready, through nginx"] = f"{time.monotonic() - began:.1f} s"
    assert [job[1:] for job in our_jobs()] == [[USER, "RUNNING"]]
    lab = client.session.get(client.url(f"/user/{USER}/lab"), timeout=30)
    assert lab.status_code == 200 and "JupyterLab" in lab.text, (
        [(h.status_code, h.url) for h in lab.history],
        lab.status_code,
        lab.text[:300],
        journal(browser.node, "portal-proxy", 20),
    )
    scopes = [f"access:servers!user={USER}"]
    r = client.api("POST", f"/users/{USER}/tokens",
                   json={"scopes": scopes, "note": "site test", "expires_in": 900})  # fmt: skip
    assert r.status_code == 201, r.text
    browser.token, browser.alice = r.json()["token"], client
    cell = "import socket; print(6 * 7, socket.gethostname())"
    status, printed = run_cell(client.url(f"/user/{USER}/"), browser.token, cell)
    assert status == "ok", printed
    answer, host = printed.split()
    assert answer == "42" and host != NAME  # on a compute node


def test_the_hub_killed_runs_again_within_10_s_and_the_session_still_works(browser):
    node = browser.node
    pid = node.run(["systemctl", "show", "-p", "MainPID", "--value", "portal-hub"]).stdout.strip()
    assert pid.isdigit() and pid != "0"
    began = time.monotonic()
    node.run(["systemctl", "kill", "-s", "KILL", "portal-hub"])
    # the hub's API, through nginx and the proxy
    deadline = began + 30
    while time.monotonic() < deadline:
        try:
            if browser.get("/hub/api/").status_code == 200:
                new = node.run(["systemctl", "show", "-p", "MainPID", "--value",
                                "portal-hub"]).stdout.strip()  # fmt: skip
                if new not in ("0", pid):
                    break
        except requests.RequestException:
            pass
        time.sleep(0.2)
    took = time.monotonic() - began
    FIGURES["SIGKILL to the hub answering"] = f"{took:.1f} s"
    restarts = node.run(["systemctl", "show", "-p", "NRestarts", "--value", "portal-hub"]).stdout
    assert restarts.strip() == "1"
    assert took < 10, f"the hub answered {took:.1f} s after SIGKILL\n{journal(node, 'portal-hub')}"
    # the session kept running, and the hub found it again
    client = browser.alice
    assert client.wait_ready(USER, timeout=60)
    status, printed = run_cell(client.url(f"/user/{USER}/"), browser.token, "print(7 * 6)")
    assert (status, printed) == ("ok", "42")
    assert [job[1:] for job in our_jobs()] == [[USER, "RUNNING"]]


def test_the_session_stops_and_its_job_ends(browser):
    client = browser.alice
    r = client.api("DELETE", f"/users/{USER}/server")
    assert r.status_code in (202, 204), r.text
    client.wait_stopped(USER, timeout=60)
    deadline = time.monotonic() + 30
    while our_jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert our_jobs() == []


def test_the_sites_packages_files_and_services_are_as_before(browser):
    after = snapshot(browser.node)
    assert differences(browser.before, after) == []
    assert {"portal-hub.service", "portal-proxy.service"} <= set(after["running"])


def test_portal_uninstall_removes_only_the_portals_paths(browser):
    node = browser.node
    done = browser.portal("uninstall", "--purge", env=(f"PORTAL_CONFIG={SITE_TOML}",))
    FIGURES["portal uninstall"] = [x for x in done.stderr.splitlines() if x.startswith("[portal]")]
    active = node.run(["systemctl", "is-active", "portal-hub"], check=False).stdout.strip()
    assert active != "active"
    assert differences(browser.before, snapshot(node)) == []
    now = listing(node, "/etc", "/var/lib", "/usr/local")
    assert steady(now - browser.before_paths) == set()
    assert steady(browser.before_paths - now) == set()


def test_make_purge_with_state_dir_var_lib_jupyterhub_keeps_var_lib(browser):
    node = browser.node
    ldap = site_settings.load()["ldap"]
    other = f"{ETC_PORTAL}/portal-jupyterhub.toml"
    node.write(other, site_settings_toml(browser.address, socket.gethostname(),
                                         ldap["server_port"], "/var/lib/jupyterhub"))  # fmt: skip
    env = (f"PORTAL_CONFIG={other}",)
    browser.portal("setup", "--no-units", "--no-check", env=env)
    assert node.run(["test", "-d", "/var/lib/jupyterhub"], check=False).returncode == 0
    before = listing(node, "/var/lib", "/etc", "/usr/local")
    purge = node.run(["env", *env, f"PYTHONPATH={REPO}", "python3", "-P", "-m", "deploy.purge",
                      "files"], timeout=120)  # fmt: skip
    FIGURES["make purge (files)"] = (purge.stdout + purge.stderr).strip().splitlines()
    after = listing(node, "/var/lib", "/etc", "/usr/local")
    gone = {p.split(" ", 1)[1] for p in before - after}
    own = ("/var/lib/jupyterhub", "/var/lib/portal", "/etc/sudoers.d/portal",
           "/etc/portal/setup.json", "/etc/portal/extend.d", "/usr/local/libexec")  # fmt: skip
    assert all(p.startswith(own) for p in gone), sorted(p for p in gone if not p.startswith(own))
    assert "/var/lib/jupyterhub" in gone
    # /var/lib keeps everything else, and the site's files are as before
    assert node.run(["test", "-d", "/var/lib"], check=False).returncode == 0
    assert steady(browser.before_paths - after) == set()
    node.run(["rm", "-f", other])
    assert differences(browser.before, snapshot(node)) == []


def test_zz_figures(browser):
    """What the journey measured (shown with pytest -s)."""
    print("\n---- the site journey's figures ----", file=sys.stderr)
    for key, value in FIGURES.items():
        if key == "security":
            for unit, text in value.items():
                score = SECURITY.search(text)
                print(f"systemd-analyze security {unit}: {score.group(2) if score else text[-200:]}"
                      f" {score.group(3) if score else ''}", file=sys.stderr)  # fmt: skip
        elif isinstance(value, list):
            print(f"{key}:", *value, sep="\n  ", file=sys.stderr)
        else:
            print(f"{key}: {value}", file=sys.stderr)
