"""The portal on a cluster it did not build (issue 36): site1
(tests/site/foreign.py), booted once for the module, the portal installed
on its login node as issue 35 installs it, and torn down at the end.

In order: the site works without the portal (Slurm's commands from
/opt/slurm/bin, three partitions; mlee and J.Smith resolve on every
machine with uids above a billion; no anonymous search; PrivateData hides
one user's job from another); then the journey through nginx on 443, the
certificate checked against the site's CA: mlee and J.Smith log in, spawn
on each GPU partition (a cell runs on that partition's node), J.Smith's
request to a full partition shows its expected start while queued, a
session is extended, stops and its job ends, and each runs a notebook job;
a session stays running while the hub polls it under PrivateData; the
hub's account can neither cancel nor change a job that is not the portal's;
and ``portal check`` prints only ``ok`` lines.

The ``site`` fixture is the booted, installed site (``site.login.run``,
``site.nodes``, ``site.portal_check()``, ``site.jobs()``, ``site.client()``)
for more tests of this module. What the journey measured (spawn to ready
through nginx, the site's own times) is printed at the end (``pytest -s``).
"""

import json
import re
import sys
import time

import pytest
import requests

from tests.site import foreign
from tests.site.foreign import JOB_NAME, PUBLIC, ForeignSite
from tests.site.install import (
    Resolved,
    build_wheel,
    ensure_dependencies,
    journal,
    pin_xsrf,
    run_cell,
)
from tests.site.machine import MachineError
from tests.support import kernelcells
from tests.support.hubclient import HubClient, Portal

pytestmark = pytest.mark.slow

FIGURES = {}
NOTEBOOK_JOBS = f"{JOB_NAME}-notebook"


class InstalledSite(ForeignSite):
    """site1 with the portal installed, as the tests use it."""

    def client(self):
        client = HubClient(self.base)
        client.session.verify = self.ca_file
        return client

    def login_as(self, name):
        """A HubClient logged in as ``name`` through nginx, its API calls
        carrying the hub's _xsrf."""
        client = self.client()
        r = client.login(name, self.users[name].password)
        assert r.status_code == 302, f"login of {name} answered {r.status_code}: {r.text[:300]}"
        home = client.session.get(client.url("/hub/home"), timeout=30)
        assert home.status_code == 200, home.status_code
        pin_xsrf(client, PUBLIC)
        return client


@pytest.fixture(scope="module")
def site():
    """site1 booted, the portal installed on its login node and serving
    https://jupyter.site1.test/ (resolved to the login node in this
    process, the site's CA trusted by the module's clients); everything
    removed at the end: machines, bridge, host folders."""
    reason = foreign.why_not_here()
    if reason:
        pytest.skip(f"no foreign site here: {reason}")
    try:
        deps = ensure_dependencies()
    except MachineError as e:
        pytest.skip(f"the hub's dependencies cannot be downloaded: {e}")
    wheel = build_wheel()
    FIGURES["wheel"] = f"{wheel.name}, {wheel.stat().st_size / 1024:.0f} KiB"
    installed = InstalledSite(extra_ro_binds=(str(deps),))
    began = time.monotonic()
    try:
        installed.boot()
    except MachineError as e:
        installed.down()
        pytest.skip(f"systemd-nspawn cannot boot site1 here: {e}")
    try:
        installed.configure()  # from here on, what goes wrong is an error
        installed.install_portal(deps)
        FIGURES.update(installed.figures)
        FIGURES["site up and the portal installed"] = f"{time.monotonic() - began:.0f} s"
        with Resolved(PUBLIC, installed.login.address), pytest.MonkeyPatch.context() as mp:
            mp.setenv("REQUESTS_CA_BUNDLE", installed.ca_file)
            mp.setattr(kernelcells, "CA_CERT", installed.ca_file)
            yield installed
    finally:
        installed.down()


# ---------------------------------------------------------------- helpers


def wait_for(what, predicate, timeout=60, every=0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(every)


def server_path(name, server=""):
    """The hub API's path of ``name``'s default server, or of the named ``server``."""
    return f"/users/{name}/servers/{server}" if server else f"/users/{name}/server"


def read_progress(client, name, until, server="", timeout=60):
    """The spawn's progress messages until one matches ``until``."""
    messages = []
    path = server_path(name, server) + "/progress"
    with client.api("GET", path, stream=True, timeout=timeout) as r:
        deadline = time.monotonic() + timeout
        for line in r.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                messages.append(json.loads(line[5:])["message"])
                if re.search(until, messages[-1]):
                    return messages
            if time.monotonic() > deadline:
                break
    raise AssertionError(f"no progress message matching {until!r}: {messages}")


def spawn(site, client, name, profile, gpus=1, server="", wait=True):
    """Start ``name``'s session (``server``: a named one) with ``profile``;
    when ``wait``, until ready: the seconds it took, through nginx."""
    began = time.monotonic()
    options = {"profile": profile, "gpus": gpus, "hours": 2}
    r = client.api("POST", server_path(name, server), json=options)
    assert r.status_code in (201, 202), r.text
    if not wait:
        return None
    try:
        client.wait_ready(name, timeout=180, server_name=server)
    except AssertionError:
        print(journal(site.login, "portal-hub", 80))
        raise
    return time.monotonic() - began


def stop(client, name, server=""):
    r = client.api("DELETE", server_path(name, server))
    assert r.status_code in (202, 204), r.text
    client.wait_stopped_server(name, server, timeout=90)


def token_for(client, name):
    r = client.api("POST", f"/users/{name}/tokens",
                   json={"scopes": [f"access:servers!user={name}"], "note": "site1",
                         "expires_in": 900})  # fmt: skip
    assert r.status_code == 201, r.text
    return r.json()["token"]


def cell_host(client, name, token, server=""):
    """The host name a cell of the session prints."""
    url = client.url(f"/user/{name}/{server + '/' if server else ''}")
    status, printed = run_cell(url, token, "import socket; print(socket.gethostname())")
    assert status == "ok", printed
    return printed.strip()


def job_of(site, user, partition=None):
    """The session job of ``user`` (on ``partition``), as root sees it."""
    jobs = [j for j in site.jobs() if j[1] == user and (partition is None or j[3] == partition)]
    return jobs[0] if jobs else None


def jobs_ended(site, user, name=JOB_NAME):
    return not [j for j in site.jobs(name) if j[1] == user]


# ---------------------------------------------------------------- the site without the portal


def test_sinfo_from_opt_slurm_bin_shows_the_three_partitions(site):
    out = site.slurm("sinfo", "-h", "-o", "%R %G %D").stdout
    partitions = {line.split()[0]: line.split()[1] for line in out.splitlines()}
    assert set(partitions) == {"a100", "v100", "cpu"}, out
    assert partitions["a100"] == "gpu:a100:2" and partitions["v100"] == "gpu:v100:2", out
    for machine in site.machines:  # only there
        assert machine.run(["sh", "-c", "command -v sinfo"], check=False).returncode != 0
        assert machine.run(["test", "-x", f"{foreign.SLURM_BIN}/squeue"]).returncode == 0
    accounts = site.slurm("sacctmgr", "-n", "-P", "show", "account", "format=Account").stdout
    assert {"lab-vision", "lab-nlp"} <= set(accounts.split()) and "portal" not in accounts.split()
    private = site.slurm("scontrol", "show", "config").stdout
    assert re.search(r"^PrivateData\s*=\s*jobs,usage", private, re.M), private


def test_the_users_resolve_on_every_machine_above_a_billion(site):
    for machine in site.machines:
        for name in ("mlee", "J.Smith"):
            entry = machine.run(["getent", "-s", "sss", "passwd", name]).stdout.split(":")
            assert entry[0] == name and int(entry[2]) > 1_000_000_000, (machine.name, entry)
            groups = machine.run(["id", "-Gn", name]).stdout.split()
            assert "ml-users" in groups, (machine.name, groups)
        # from the directory, not from a file of the machine
        passwd = machine.read("/etc/passwd")
        assert "mlee" not in passwd and "J.Smith" not in passwd


def test_the_directory_refuses_an_anonymous_search_and_serves_ldaps_only(site):
    anonymous = site.login.run(["ldapsearch", "-x", "-LLL", "-b", foreign.BASE_DN, "uid=mlee"],
                               check=False)  # fmt: skip
    assert anonymous.returncode == 48, anonymous  # inappropriate authentication
    assert "anonymous bind disallowed" in anonymous.stderr
    bound = site.login.run(["ldapsearch", "-x", "-LLL", "-D", f"uid=sssd,{foreign.SYSACCOUNTS_DN}",
                            "-y", "/dev/stdin", "-b", foreign.USERS_DN, "uid=J.Smith", "memberOf"],
                           input=foreign.SERVICE_ACCOUNTS["sssd"])  # fmt: skip
    assert f"memberOf: cn=ml-users,{foreign.GROUPS_DN}" in bound.stdout
    plain = site.login.run(["ldapsearch", "-x", "-H", f"ldap://{foreign.LDAP_HOST}", "-b", "",
                            "-s", "base"], check=False)  # fmt: skip
    assert plain.returncode == 255 and "Can't contact LDAP server" in plain.stderr


def test_under_private_data_a_user_cannot_see_another_s_job(site):
    submitted = site.slurm("sbatch", "--parsable", "-p", "cpu", "-t", "5", "-J", "site1-private",
                           "-o", "/dev/null", "--chdir=/tmp", "--wrap", "sleep 120",
                           user="mlee").stdout.strip()  # fmt: skip
    try:
        own = site.slurm("squeue", "-h", "-o", "%i", user="mlee").stdout.split()
        other = site.slurm("squeue", "-h", "-o", "%i", user="J.Smith").stdout.split()
        assert submitted in own and submitted not in other, (own, other)
        shown = site.slurm("scontrol", "show", "job", submitted, user="J.Smith", check=False)
        assert shown.returncode != 0 or "JobId" not in shown.stdout
    finally:
        site.slurm("scancel", submitted)


# ---------------------------------------------------------------- the journey


def test_the_portal_answers_through_nginx_with_the_site_s_certificate(site):
    page = site.get("/hub/login")
    assert page.status_code == 200 and 'name="username"' in page.text
    # checked: a client that does not trust site1's CA is refused
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(site.base + "/hub/login", verify=requests.certs.where(), timeout=10)
    units = site.login.run(["systemctl", "is-active", "portal-hub", "portal-proxy", "nginx",
                            "postgresql"]).stdout.split()  # fmt: skip
    assert units == ["active"] * 4


def test_mlee_spawns_on_a100_runs_a_cell_there_and_extends(site):
    mlee = site.login_as("mlee")
    took = spawn(site, mlee, "mlee", "vision-a100", gpus=2)
    FIGURES["spawn to ready, mlee on a100 (2 GPUs)"] = f"{took:.1f} s"
    job = job_of(site, "mlee", "a100")
    assert job and job[2] == "RUNNING" and job[4] == "a100-n1", site.jobs()
    tres = site.slurm("scontrol", "show", "job", job[0]).stdout
    assert "gres/gpu:a100=2" in tres or "gpu:a100:2" in tres, tres
    site.mlee, site.mlee_token = mlee, token_for(mlee, "mlee")
    assert cell_host(mlee, "mlee", site.mlee_token) == "a100-n1"
    r = Portal(mlee).send("POST", "api/sessions/mlee/extend", json={"hours": 1})
    assert r.status_code == 200 and r.json()["time_limit"] == "03:00:00", r.text
    assert "TimeLimit=03:00:00" in site.slurm("scontrol", "show", "job", job[0]).stdout


def offered(client):
    """The spawn page's profiles, as its script reads them."""
    page = client.session.get(client.url("/hub/spawn"), timeout=30).text
    return {p["name"]: p for p in json.loads(re.search(r'id="portal-profiles">(.*?)</script>',
                                                       page, re.S).group(1))}  # fmt: skip


def test_j_smith_queued_on_the_full_a100_is_shown_the_expected_start(site):
    smith = site.login_as("J.Smith")
    # the spawn page: no a100 GPU free, and when one GPU would start (sbatch --test-only)
    a100 = wait_for("the spawn page's expected start on a100",
                    lambda: offered(smith)["vision-a100"]["expected"].get("1"), 30, 1)  # fmt: skip
    FIGURES["spawn page, a100 full: expected start of 1 GPU"] = a100
    spawn(site, smith, "J.Smith", "vision-a100", wait=False)
    messages = read_progress(smith, "J.Smith", r"expected start")
    job = job_of(site, "J.Smith", "a100")
    assert job and job[2] == "PENDING", (site.jobs(), messages)
    stop(smith, "J.Smith")
    wait_for("J.Smith's queued job cancelled", lambda: jobs_ended(site, "J.Smith"), 30)
    site.smith = smith


def test_j_smith_spawns_on_v100_and_mlee_beside_on_v100(site):
    smith, mlee = site.smith, site.mlee
    took = spawn(site, smith, "J.Smith", "nlp-v100")
    FIGURES["spawn to ready, J.Smith on v100"] = f"{took:.1f} s"
    site.smith_token = token_for(smith, "J.Smith")
    assert cell_host(smith, "J.Smith", site.smith_token) == "v100-n1"
    took = spawn(site, mlee, "mlee", "nlp-v100", server="second")
    FIGURES["spawn to ready, mlee on v100 (a second session)"] = f"{took:.1f} s"
    assert cell_host(mlee, "mlee", site.mlee_token, server="second") == "v100-n1"
    users = {(j[1], j[3]) for j in site.jobs() if j[2] == "RUNNING"}
    assert users == {("mlee", "a100"), ("mlee", "v100"), ("J.Smith", "v100")}, site.jobs()


def test_mlee_stops_both_sessions_and_their_jobs_end(site):
    mlee = site.mlee
    stop(mlee, "mlee", "second")
    stop(mlee, "mlee")
    wait_for("mlee's jobs ended", lambda: jobs_ended(site, "mlee"), 30)


def test_j_smith_moves_to_a100_extends_and_stops(site):
    smith = site.smith
    stop(smith, "J.Smith")
    wait_for("J.Smith's v100 job ended", lambda: jobs_ended(site, "J.Smith"), 30)
    took = spawn(site, smith, "J.Smith", "vision-a100")
    FIGURES["spawn to ready, J.Smith on a100"] = f"{took:.1f} s"
    assert cell_host(smith, "J.Smith", site.smith_token) == "a100-n1"
    r = Portal(smith).send("POST", "api/sessions/J.Smith/extend", json={"hours": 1})
    assert r.status_code == 200 and r.json()["time_limit"] == "03:00:00", r.text
    stop(smith, "J.Smith")
    wait_for("J.Smith's a100 job ended", lambda: jobs_ended(site, "J.Smith"), 30)


SLEEPER = {
    "nbformat": 4, "nbformat_minor": 5,
    "metadata": {"kernelspec": {"name": "pytorch", "language": "python",
                                "display_name": "PyTorch"}},
    "cells": [
        {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "execution_count": None,
         "outputs": [], "source": "seconds = 1"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "import socket, time\ntime.sleep(seconds)\n"
                   "print('ran on', socket.gethostname())"},
    ],
}  # fmt: skip


@pytest.mark.parametrize("name,profile", [("mlee", "nlp-v100"), ("J.Smith", "vision-a100")])
def test_a_notebook_job_runs_to_its_end(site, name, profile):
    user = site.users[name]
    site.login.write(f"{user.home}/sleeper.ipynb", json.dumps(SLEEPER), mode="0644",
                     owner=f"{user.uid}:{user.uid}")  # fmt: skip
    portal = Portal(site.login_as(name))
    r = portal.send("POST", "api/jobs", json={"notebook": "sleeper.ipynb", "profile": profile,
                                              "gpus": 1, "hours": 1,
                                              "parameters": {"seconds": 2}})  # fmt: skip
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    def ended():
        job = portal.get(f"api/jobs/{job_id}").json()
        return job if job["ended"] else None

    job = wait_for(f"{name}'s notebook job {job_id} ended", ended, timeout=180, every=2)
    assert job["state"] == "COMPLETED", job
    executed = site.login.read(f"{user.home}/{job['output']}")
    node = foreign.PROFILES[profile] + "-n1"
    assert f"ran on {node}" in executed, executed[-500:]


def test_a_session_under_private_data_stays_running_while_the_hub_polls_it(site):
    """Under PrivateData=jobs the hub's own squeue sees no user's job: a
    session the hub cannot see would be declared ended. Past five poll
    intervals ([slurm] poll_interval = 2 s) it still answers; stopped, its
    job ends."""
    mlee = site.login_as("mlee")
    took = spawn(site, mlee, "mlee", "nlp-v100")
    FIGURES["spawn to ready, mlee on v100 (PrivateData session)"] = f"{took:.1f} s"
    job = job_of(site, "mlee", "v100")
    assert job and job[2] == "RUNNING", site.jobs()
    hidden = site.slurm("squeue", "-h", "-j", job[0], "-o", "%i", user=foreign.HUB_USER,
                        check=False).stdout.split()  # fmt: skip
    assert hidden == [], "the hub's account sees a user's job by itself: PrivateData is off"
    time.sleep(12)
    model = mlee.user_model("mlee")
    assert model["servers"].get("", {}).get("ready"), model
    assert mlee.lab_answers("mlee")
    assert job_of(site, "mlee", "v100")[0] == job[0]
    stop(mlee, "mlee")
    wait_for("mlee's job ended", lambda: jobs_ended(site, "mlee"), 30)


def test_the_hub_s_account_cannot_cancel_or_change_a_job_that_is_not_the_portal_s(site):
    """mlee's own job, of a name that is not the portal's: every way the hub's
    account has on site1 fails or leaves it running, its limit as it was."""
    hub, bin_dir = foreign.HUB_USER, foreign.SLURM_BIN
    job = site.slurm("sbatch", "--parsable", "-p", "cpu", "-t", "5", "-J", "mlee-own", "-o",
                     "/dev/null", "--chdir=/tmp", "--wrap", "sleep 300",
                     user="mlee").stdout.strip()  # fmt: skip
    try:
        wait_for("mlee's own job running",
                 lambda: site.slurm("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
                 == "RUNNING", 30)  # fmt: skip
        update = [f"{bin_dir}/scontrol", "update", f"JobId={job}", "TimeLimit=60"]
        for argv in ([f"{bin_dir}/scancel", job], update):  # by itself: Slurm refuses
            assert site.login.run(argv, user=hub, check=False).returncode != 0, argv
        sudo_mlee = ["sudo", "-n", "-u", "mlee", "--"]
        for argv in ([f"{bin_dir}/scancel", job], update,
                     [f"{bin_dir}/scancel", "--name=mlee-own", job]):  # fmt: skip
            done = site.login.run([*sudo_mlee, *argv], user=hub, check=False)
            assert done.returncode == 1 and "a password is required" in done.stderr, (argv, done)
        for name in (JOB_NAME, NOTEBOOK_JOBS):  # sudo lets it through; scancel's filter does not
            done = site.login.run([*sudo_mlee, f"{bin_dir}/scancel", f"--name={name}", job],
                                  user=hub, check=False)  # fmt: skip
            assert done.returncode == 0, (name, done)
        extend = site.login.run(["sudo", "-n", "--", "/usr/local/libexec/portal/portal-extend",
                                 job, "300", "1440"], user=hub, check=False)  # fmt: skip
        assert extend.returncode == 1 and "is not a portal session" in extend.stderr, extend
        time.sleep(2)
        state = site.slurm("squeue", "-h", "-j", job, "-o", "%T %l").stdout.split()
        assert state == ["RUNNING", "5:00"], state
    finally:
        site.slurm("scancel", job)


def test_portal_setup_ends_with_portal_check_before_the_hub_runs(site):
    """setup's own check, before the units started: the test jobs reached
    the hub's API port where portal check itself listened."""
    rc, lines = site.setup_check
    checks = [line for line in lines if line.startswith(("ok", "WARN", "FAIL"))]
    assert rc == 0 and lines[-1] == "portal check: every check passed", lines
    assert checks and all(line.startswith("ok") for line in checks), lines
    jobs = [line for line in checks if line.startswith("ok   test job on ")]
    assert len(jobs) == 2 and all("hub's API reached" in line for line in jobs), jobs


def test_portal_check_prints_only_ok_lines(site):
    rc, lines = site.portal_check()
    FIGURES["portal check"] = lines
    checks = [line for line in lines if not line.startswith("portal check:")]
    assert checks and all(line.startswith("ok") for line in checks), "\n".join(lines)
    assert lines[-1] == "portal check: every check passed" and rc == 0, lines


# ---------------------------------------------------------------- faults
# What a demo cluster cannot take without breaking the other tests, made
# live on site1 one at a time, each undone after (the others:
# tests/integration/test_check.py). Each gives FAIL lines naming it, with
# their fix, and exit 1.


def check_failures(site):
    rc, lines = site.portal_check()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert rc == 1 and lines[-1] == f"portal check: {len(failed)} failed", lines
    return failed


def test_fault_the_partition_s_gpus_gone(site):
    site.slurm("scontrol", "update", "NodeName=a100-n1", "Gres=gpu:a100:0")
    try:
        failed = check_failures(site)
    finally:  # slurmctld takes the node's GRES from slurm.conf again as it starts
        site.login.run(["systemctl", "restart", "slurmctld"])

        def back():
            shown = site.slurm("sinfo", "-h", "-N", "-n", "a100-n1", "-o", "%G %t", check=False)
            return {tuple(line.split()) for line in shown.stdout.splitlines()} == {
                ("gpu:a100:2", "idle")
            }

        wait_for("a100-n1 back, idle, with its GPUs", back, 90)
    assert failed == [
        "FAIL partition a100: no GPUs (profiles vision-a100 ask up to 2); fix: give its nodes "
        "Gres=gpu:... in slurm.conf and gres.conf, or move those profiles to a partition with GPUs"
    ], failed  # and no test job waits on it


def test_fault_private_data_hides_the_jobs_from_a_hub_without_the_helper(site):
    kept = f"{foreign.SITE_TOML}.kept"
    site.login.run(["cp", "-p", foreign.SITE_TOML, kept])
    try:  # the hub's own reads, as before the read helper
        site.login.run(["sed", "-i", r's/^\[slurm\]$/[slurm]\nprivate_data = "direct"/',
                        foreign.SITE_TOML])  # fmt: skip
        failed = check_failures(site)
    finally:
        site.login.run(["mv", kept, foreign.SITE_TOML])
    assert failed[0] == (
        'FAIL PrivateData: hides other users\' jobs, and [slurm] private_data = "direct": the '
        'hub would not see its sessions; fix: set [slurm] private_data = "auto" and run portal '
        "setup"
    ), failed
    for partition, line in zip(("a100", "v100"), failed[1:], strict=True):
        said = (f"FAIL test job on {partition}: the hub's account ({foreign.HUB_USER}) does not "
                f"see {foreign.CHECK_USER}'s job ")  # fmt: skip
        assert line.startswith(said), line
        assert "PrivateData=jobs,usage" in line and "portal-slurm-read" in line, line


def test_fault_the_environments_unmounted_on_a_node(site):
    node = site.nodes["a100-n1"]
    node.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "none", foreign.ENVS])  # over the bind
    try:
        failed = check_failures(site)
    finally:
        node.run(["umount", foreign.ENVS])
    assert len(failed) == 1, failed
    said = (f"FAIL test job on a100: on a100-n1: not found: jupyter (missing {foreign.ENVS}"
            "/envs/jupyter/bin/python), launcher ")  # fmt: skip
    assert failed[0].startswith(said), failed
    assert failed[0].endswith(f"fix: mount the environments ([envs] prefix {foreign.ENVS}) on "
                              "every node of a100"), failed  # fmt: skip
    assert node.run(["test", "-x", f"{foreign.ENVS}/envs/jupyter/bin/python"]).returncode == 0


def test_fault_the_hub_s_api_unreachable_from_a_node(site):
    """a100-n1's own firewall rejects what it sends to the hub's API port
    (and nothing else: slurmd still reaches slurmctld on the same host)."""
    node, address, port = site.nodes["a100-n1"], site.login.address, foreign.PORT + 81
    api = f"{foreign.LOGIN[0]}:{port}"  # [hub] connect_ip names the login node
    rules = (f"table inet portal_fault {{\n chain out {{\n  type filter hook output priority 0\n"
             f"  ip daddr {address} tcp dport {port} reject\n }}\n}}\n")  # fmt: skip
    node.run(["nft", "-f", "-"], input=rules)
    try:
        failed = check_failures(site)
    finally:
        node.run(["nft", "delete", "table", "inet", "portal_fault"])
    assert len(failed) == 1, failed
    assert failed[0].startswith(f"FAIL test job on a100: on a100-n1: the hub's API {api} "
                                "unreachable "), failed  # fmt: skip
    fix = ("fix: let the nodes reach the login node on [hub] api_port (firewall), and set "
           "[hub] connect_ip to an address they reach")  # fmt: skip
    assert failed[0].endswith(fix), failed


def test_zz_figures(site):
    """What the suite measured (shown with pytest -s)."""
    print("\n---- the foreign site's figures ----", file=sys.stderr)
    for key, value in FIGURES.items():
        if isinstance(value, list):
            print(f"{key}:", *value, sep="\n  ", file=sys.stderr)
        else:
            print(f"{key}: {value}", file=sys.stderr)
