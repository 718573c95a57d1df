"""Extending a running session's time limit, on the test hub and the real
Slurm: the admin service's API (``POST /services/portal/api/sessions/NAME/extend``)
for the owner, an admin and a script's token; refused past the profile's
max_hours, for other users, for what is no whole number and where no session
runs, each changing nothing; audited; and the session card's form on the hub.

The hub's account holds no Slurm admin level: it lengthens a job only
through the root helper portal-extend behind its one sudoers rule, which
re-checks the job; by itself it can change or cancel no one else's job."""

import os
import pwd
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portal import settings
from portal.helper import extend as extendhelper
from tests.support import REPO
from tests.support.hubclient import SERVICE
from tests.support.jobs import scontrol_job, squeue, user_jobs
from tests.support.testhub import JOB_NAME, PORT, deploy

HUB_USER = settings.load()["hub"]["user"]
HELPER = extendhelper.INSTALLED_AT


def job_of(user):
    rows = user_jobs(user)
    assert len(rows) == 1, f"expected one job of {user}, got {rows}"
    return rows[0][0]


def time_limit(job_id):
    return scontrol_job(job_id)["TimeLimit"]


def as_user(name, *argv):
    """``argv`` run as ``name`` (``sudo -u NAME``), with nothing of root's
    environment: (exit status, stdout, stderr)."""
    run = subprocess.run(
        ["sudo", "-u", name, "--", *argv],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd=REPO, timeout=60,
    )  # fmt: skip
    return run.returncode, run.stdout, run.stderr


def helper(name, *args):
    """The root helper, asked by ``name`` through sudo: (status, stdout, stderr)."""
    return as_user(name, "sudo", "-n", HELPER, *[str(a) for a in args])


def test_the_owner_extends_within_the_profile_others_change_nothing(session, portal):
    session("alice", profile="pytorch", gpus=1, hours=2)
    job_id = job_of("alice")
    assert time_limit(job_id) == "02:00:00"
    alice, bob, carol = portal("alice"), portal("bob"), portal("carol")

    r = alice.send("POST", "api/sessions/alice/extend", json={"hours": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["time_limit"] == "05:00:00" and body["previous_time_limit"] == "02:00:00"
    assert body["job_id"] == job_id and body["max_hours"] == 24 and body["hours_left"] == 19
    assert time_limit(job_id) == "05:00:00"

    # past the profile's max_hours (24): refused, saying how much is left
    r = alice.send("POST", "api/sessions/alice/extend", json={"hours": 20})
    assert r.status_code == 400, r.text
    assert r.json() == {
        "error": "20 more hours would make 25 h; profile PyTorch allows 24 h: at most 19 more",
        "field": "hours",
    }
    assert time_limit(job_id) == "05:00:00"

    # not a whole number of hours
    for hours in ("x", "1.5", 1.5, 0, -1, None, True):
        r = alice.send("POST", "api/sessions/alice/extend", json={"hours": hours})
        assert r.status_code == 400 and r.json()["field"] == "hours", (hours, r.text)
    r = alice.send("POST", "api/sessions/alice/extend", data=b"hours=1")
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    assert time_limit(job_id) == "05:00:00"

    # another user: 403 before anything is told, for a session or none
    for name in ("alice", "carol", "nosuchuser"):
        r = bob.send("POST", f"api/sessions/{name}/extend", json={"hours": 1})
        assert r.status_code == 403, (name, r.text)
    assert bob.get("api/sessions/alice").status_code == 403
    assert bob.get("api/sessions/extensions").status_code == 403
    assert time_limit(job_id) == "05:00:00"

    # without the XSRF header the login cookie alone changes nothing
    r = alice.send("POST", "api/sessions/alice/extend", xsrf=False, json={"hours": 1})
    assert r.status_code == 401 and "X-XSRFToken" in r.json()["error"], r.text
    assert time_limit(job_id) == "05:00:00"

    # no session: 404, for the owner and for an admin
    assert bob.send("POST", "api/sessions/bob/extend", json={"hours": 1}).status_code == 404
    r = carol.send("POST", "api/sessions/bob/extend", json={"hours": 1})
    assert r.status_code == 404 and r.json()["error"] == "bob has no running session"
    assert (
        carol.send("POST", "api/sessions/nosuchuser/extend", json={"hours": 1}).status_code == 404
    )

    # an admin may extend anyone's; the owner reads what is left
    r = carol.send("POST", "api/sessions/alice/extend", json={"hours": 1})
    assert r.status_code == 200 and r.json()["time_limit"] == "06:00:00", r.text
    assert time_limit(job_id) == "06:00:00"
    left = alice.get("api/sessions/alice").json()
    assert (left["time_limit"], left["hours_left"]) == ("06:00:00", 18)

    # the audit: who, whose job, from and to, newest first, on the API and the cluster page
    audit = carol.get("api/sessions/extensions", params={"user": "alice"}).json()
    mine = [e for e in audit if e["job_id"] == job_id]
    assert [(e["actor"], e["from_limit"], e["to_limit"]) for e in mine] == [
        ("carol", "05:00:00", "06:00:00"),
        ("alice", "02:00:00", "05:00:00"),
    ]
    page = carol.get("cluster").text
    row = re.search(
        rf'<tr class="extension" data-user="alice" data-job="{job_id}">.*?</tr>', page, re.S
    )
    assert row and "carol" in row.group(0) and "05:00:00 → 06:00:00" in row.group(0), page


def test_slurms_own_caps_hold_whatever_the_profile(restore_profiles, session, portal):
    """Slurm does not hold root's scontrol update (the helper's) to the
    QOS's MaxWall (1 day here): a profile that allows 48 h still gets no
    more than it, from the hub and from the helper alike. (restore_profiles
    first: it removes the profile after the session ends.)"""
    r = portal("carol").send(
        "POST",
        "api/profiles",
        json={"name": "long", "display_name": "Long", "environment": "pytorch", "max_hours": 48},
    )
    assert r.status_code == 201, r.text
    session("alice", profile="long", gpus=1, hours=23)
    job_id = job_of("alice")
    alice = portal("alice")
    r = alice.send("POST", "api/sessions/alice/extend", json={"hours": 2})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "25 h in all is more than Slurm's QOS portal allows (24 h)"
    assert time_limit(job_id) == "23:00:00"
    # the hub's account asking the helper itself, with the profile's 48 h
    assert helper(HUB_USER, job_id, 25 * 60, 48 * 60) == (
        1,
        "",
        "portal-extend: 1-01:00:00 is more than QOS portal allows (1-00:00:00)\n",
    )
    assert time_limit(job_id) == "23:00:00"
    r = alice.send("POST", "api/sessions/alice/extend", json={"hours": 1})
    assert r.status_code == 200 and time_limit(job_id) == "1-00:00:00", r.text


def test_a_script_extends_with_a_token(session, login):
    alice = session("alice", profile="vision", gpus=1, hours=2)
    job_id = job_of("alice")
    r = alice.api(
        "POST", "/users/alice/tokens", json={"scopes": ["access:services!service=portal"]}
    )
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"token {r.json()['token']}"}
    api = alice.url(SERVICE + "api/sessions/alice/extend")

    # vision allows 4 h: 3 more is past it, 2 more is all there is
    r = alice.session.post(api, json={"hours": 3}, headers=headers, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"].endswith("profile Vision team allows 4 h: at most 2 more")
    assert time_limit(job_id) == "02:00:00"
    r = alice.session.post(api, json={"hours": 2}, headers=headers, timeout=60)
    assert r.status_code == 200 and r.json()["time_limit"] == "04:00:00", r.text
    assert time_limit(job_id) == "04:00:00"
    r = alice.session.post(api, json={"hours": 1}, headers=headers, timeout=60)
    assert r.status_code == 400 and "cannot be extended" in r.json()["error"], r.text
    assert time_limit(job_id) == "04:00:00"

    # the card then offers no more
    home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    deadline = time.monotonic() + 20
    while 'id="extend-none"' not in home and time.monotonic() < deadline:
        time.sleep(1)  # the hub's poll sees the new limit
        home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    assert 'id="extend-none"' in home and 'id="extend-form"' not in home, home[-3000:]
    assert re.search(r'id="session-limit">4 h<', home)


def test_the_session_card_extends_from_the_home_page(session, login):
    alice = session("alice", profile="pytorch", gpus=1, hours=2)
    job_id = job_of("alice")
    home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    assert re.search(r'id="session-limit">2 h<', home)
    options = re.findall(r'<option value="(\d+)">', home)
    assert options == [str(n) for n in range(1, 23)], options  # 24 h in all
    form = re.search(
        r'<form method="post" action="([^"]+)"[^>]*id="extend-form">(.*?)</form>', home, re.S
    )
    assert form and form.group(1) == "/hub/portal/sessions/alice/extend", home[-3000:]
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', form.group(2)).group(1)
    url = alice.url(form.group(1))

    r = alice.session.post(url, data={"_xsrf": xsrf, "hours": "1"}, allow_redirects=False)
    assert r.status_code == 303 and r.headers["Location"].endswith("/hub/home"), r.text
    assert time_limit(job_id) == "03:00:00"
    # at once: the new limit, the time left from it, and what happened (once)
    home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    assert re.search(r'id="session-limit">3 h<', home), home[-3000:]
    assert re.search(r'id="session-left">2 h 5\d min<', home), home[-3000:]
    assert "Extended by 1 hour: the time limit is now 3 h." in home
    home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    assert 'id="session-notice"' not in home

    # refused: the message, nothing changed
    r = alice.session.post(url, data={"_xsrf": xsrf, "hours": "30"}, timeout=30)
    assert r.status_code == 200 and "Not extended: 30 more hours would make 33 h" in r.text
    assert time_limit(job_id) == "03:00:00"
    # without the page's XSRF token, or from another user: nothing
    r = alice.session.post(url, data={"hours": "1"}, allow_redirects=False, timeout=30)
    assert r.status_code == 403
    bob = login("bob")
    bob_home = bob.session.get(bob.url("/hub/home"), timeout=30).text
    bob_xsrf = re.search(r'xsrf_token: "([^"]+)"', bob_home).group(1)
    data = {"hours": "1", "_xsrf": bob_xsrf}
    r = bob.session.post(url, data=data, allow_redirects=False, timeout=30)
    assert r.status_code == 403
    assert time_limit(job_id) == "03:00:00"


def test_the_hubs_account_holds_no_slurm_admin_level_and_a_sync_takes_one_back(cluster):
    """An earlier version made the hub's account a Slurm Operator (any job's
    update, hold or cancel): sync-users (as every start) sets it back to
    None, once, and slurmctld holds the account with its uid at that level."""

    def level():
        return subprocess.run(
            ["sacctmgr", "-n", "-P", "list", "user", HUB_USER, "format=adminlevel"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

    subprocess.run(
        ["sacctmgr", "-i", "modify", "user", HUB_USER, "set", "adminlevel=Operator"],
        capture_output=True, check=True,
    )  # fmt: skip
    assert level() == "Operator"
    r = deploy("slurm.sh", "sync-users", check=False)
    assert r.returncode == 0, r.stderr
    assert f"{HUB_USER} (the hub's account): Slurm AdminLevel None (was Operator)" in r.stderr
    assert level() == "None"
    r = deploy("slurm.sh", "sync-users", check=False)  # set only when it differs
    assert r.returncode == 0 and "AdminLevel" not in r.stderr, r.stderr
    assert level() == "None"
    # slurmctld's own record (what it authorizes by): the real uid, no level
    uid = pwd.getpwnam(HUB_USER).pw_uid
    deadline = time.monotonic() + 20
    while True:
        record = subprocess.run(
            ["scontrol", "show", "assoc_mgr", f"users={HUB_USER}", "flags=users"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        if f"UserName={HUB_USER}({uid}) " in record and re.search(r"AdminLevel=None\b", record):
            break
        assert time.monotonic() < deadline, record
        time.sleep(0.5)
    # and the hub's association with the account portal, for its sbatch --test-only
    assoc = subprocess.run(
        ["sacctmgr", "-n", "-P", "list", "assoc", f"user={HUB_USER}", "format=account"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert "portal" in assoc, assoc


def test_the_helper_is_root_s_the_hub_registered_and_its_account_may_run_it(hub):
    """What deploy/hub.sh start installs, and the check the hub and the
    admin service make at their start, run as the hub's account."""
    st = os.stat(HELPER)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755)
    assert Path(HELPER).read_bytes() == (REPO / "portal" / "helper" / "extend.py").read_bytes()
    for folder in (Path(HELPER).parent, Path(extendhelper.REGISTRY)):
        st = os.stat(folder)
        assert st.st_uid == 0 and not st.st_mode & 0o022, folder
    registration = Path(extendhelper.REGISTRY) / f"{JOB_NAME}.json"
    st = os.stat(registration)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o644)
    hub = extendhelper.read_registration(registration.read_text(), JOB_NAME)
    assert "portal-users" in hub.groups and (hub.uid_min, hub.uid_max) == (10000, 60000)
    check = (
        "import asyncio, sys; from portal.extend import ExtensionCheck; "
        "print(asyncio.run(ExtensionCheck.shared(20, sys.argv[1]).verdict()))"
    )
    status, out, err = as_user(HUB_USER, sys.executable, "-c", check, JOB_NAME)
    assert (status, out.strip()) == (0, "None"), err
    # as a user, the same check says what is missing: sudo lets her no such thing
    status, out, err = as_user("alice", sys.executable, "-c", check, JOB_NAME)
    assert status == 0 and out.startswith("sudo does not let the hub's account alice run"), err


def test_the_helper_refuses_in_one_line_and_sudo_lets_only_the_hub_run_it(session):
    session("alice", profile="pytorch", gpus=1, hours=2)
    job_id = job_of("alice")
    assert time_limit(job_id) == "02:00:00"

    # no such job: the helper's one line, exit 1
    assert helper(HUB_USER, 999999, 60, 60) == (
        1,
        "",
        "portal-extend: job 999999 is not in Slurm's queue\n",
    )
    # what sudo's rule does not take never reaches the helper
    for args in ((999999, 60), ("1;id", 60, 60), (job_id, "5h", 1440), (job_id, 300, 1440, 1)):
        status, out, err = helper(HUB_USER, *args)
        assert (status, out) == (1, "") and "a password is required" in err, (args, err)
    # sudo's regular expression sees "1 2 3" in two arguments: the helper does not
    assert helper(HUB_USER, f"{job_id} 300", 1440) == (
        2,
        "",
        "portal-extend: usage: portal-extend JOB MINUTES PROFILE_MAX\n",
    )
    # shorter, or past the profile the hub names: refused, nothing changed
    status, out, err = helper(HUB_USER, job_id, 60, 1440)
    assert (status, out) == (1, "") and err == (
        f"portal-extend: 01:00:00 is not longer than job {job_id}'s limit 02:00:00: "
        "this helper only lengthens\n"
    )
    assert helper(HUB_USER, job_id, 300, 240) == (
        1,
        "",
        "portal-extend: 05:00:00 is more than the session's profile allows (04:00:00)\n",
    )
    assert time_limit(job_id) == "02:00:00"
    # alice herself has no rule for it: sudo refuses her, whatever she asks
    status, out, err = helper("alice", job_id, 300, 1440)
    assert (status, out) == (1, "") and "a password is required" in err, err
    assert time_limit(job_id) == "02:00:00"
    # the hub's account, within everything: the new limit, as Slurm has it
    assert helper(HUB_USER, job_id, 180, 1440) == (0, "03:00:00\n", "")
    assert time_limit(job_id) == "03:00:00"


def test_the_hubs_account_can_change_no_other_users_job_by_itself(session):
    """Without an admin level, Slurm refuses the hub's account what it asks
    of another user's job directly: a longer limit, a cancel."""
    session("alice", profile="pytorch", gpus=1, hours=2)
    job_id = job_of("alice")
    for argv in (
        ["scontrol", "update", f"JobId={job_id}", "TimeLimit=05:00:00"],
        ["scancel", job_id],
    ):
        status, _, err = as_user(HUB_USER, *argv)
        # Slurm's words for a job that is not the caller's: scancel says
        # "Access/permission denied", scontrol update "Invalid user id"
        refused = ("Access/permission denied", "Invalid user id")
        assert status != 0 and any(word in err for word in refused), (argv, err)
    assert time_limit(job_id) == "02:00:00"
    assert squeue("-j", job_id, "-o", "%T") == [["RUNNING"]]


def test_a_job_outside_the_portal_is_left_alone_even_under_a_session_s_name(hub):
    """root's job, named like the test hub's sessions (a registered name):
    the helper refuses it, and the hub's account can cancel it neither by
    itself nor through sudo."""
    job_id = subprocess.run(
        ["sbatch", "--parsable", "-J", JOB_NAME, "-p", settings.load()["slurm"]["partition"],
         "--gres=gpu:1", "-t", "60", "-o", "/dev/null", "--wrap", "sleep 600"],
        capture_output=True, text=True, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while squeue("-j", job_id, "-o", "%T") != [["RUNNING"]]:
            assert time.monotonic() < deadline, squeue("-j", job_id, "-o", "%T %r")
            time.sleep(0.5)
        status, out, err = helper(HUB_USER, job_id, 120, 1440)
        assert (status, out) == (1, "") and err == (
            f"portal-extend: job {job_id} is root's: only a portal user's session is extended\n"
        )
        status, _, err = as_user(HUB_USER, "scancel", job_id)
        assert status != 0 and "Access/permission denied" in err, err
        status, _, err = as_user(HUB_USER, "sudo", "-n", "-u", "root", "/usr/bin/scancel", job_id)
        assert status == 1 and "a password is required" in err, err
        assert time_limit(job_id) == "01:00:00"
        assert squeue("-j", job_id, "-o", "%T") == [["RUNNING"]]
    finally:
        subprocess.run(["scancel", job_id], check=False)


def sacctmgr(*args):
    return subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def lab_account():
    """A lab's Slurm account (the portal's QOS its only one, as the account
    portal's), alice's default while the test runs: made with sacctmgr as
    root; afterwards alice's default is portal again and the lab is gone."""
    lab = f"lab{PORT}"
    for args in (
        ("add", "account", lab, "cluster=portal", "qos=portal", "defaultqos=portal",
         "description=a lab", "organization=tests"),
        ("add", "user", "alice", f"account={lab}", "cluster=portal"),
        ("modify", "user", "where", "name=alice", "set", f"defaultaccount={lab}"),
    ):  # fmt: skip
        made = sacctmgr(*args)
        assert made.returncode == 0, (args, made.stderr)
    try:
        yield lab
    finally:
        sacctmgr("modify", "user", "where", "name=alice", "set", "defaultaccount=portal")
        deadline = time.monotonic() + 60  # slurmdbd keeps an ended job's association a moment
        while sacctmgr("remove", "user", "alice", f"account={lab}").returncode != 0:
            assert time.monotonic() < deadline, f"alice's association with {lab} stays"
            time.sleep(2)
        sacctmgr("remove", "account", lab)


def test_a_session_under_a_lab_s_account_is_extended(lab_account, session, portal):
    """The helper knows a session by its hub's registration, not by the
    Slurm account: alice's default account is her lab's, her session runs
    under it and is extended. Her own job (sbatch from her shell, the same
    lab) named like the sessions is not: the hub extends the job it
    submitted; asked by the hub's account directly, the helper still holds
    it to the QOS's day."""
    session("alice", profile="pytorch", gpus=1, hours=2)
    job_id = job_of("alice")
    assert squeue("-j", job_id, "-o", "%a") == [[lab_account]]
    partition = settings.load()["slurm"]["partition"]
    status, out, err = as_user(
        "alice", "sbatch", "--parsable", "-J", JOB_NAME, "-p", partition, "--gres=gpu:1",
        "-t", "60", "-o", "/dev/null", "--wrap", "sleep 600",
    )  # fmt: skip
    assert status == 0, err
    own = out.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while squeue("-j", own, "-o", "%T %a") != [["RUNNING", lab_account]]:
        assert time.monotonic() < deadline, squeue("-j", own, "-o", "%T %a %r")
        time.sleep(0.5)

    r = portal("alice").send("POST", "api/sessions/alice/extend", json={"hours": 1})
    assert r.status_code == 200 and r.json()["job_id"] == job_id, r.text
    assert time_limit(job_id) == "03:00:00"
    assert time_limit(own) == "01:00:00"
    status, out, err = helper(HUB_USER, own, 1500, extendhelper.MAX_MINUTES)
    assert (status, out) == (1, "") and err == (
        "portal-extend: 1-01:00:00 is more than QOS portal allows (1-00:00:00)\n"
    )
    assert time_limit(own) == "01:00:00"
