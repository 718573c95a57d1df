"""Extending a running session's time limit, on the test hub and the real
Slurm: the admin service's API (``POST /services/portal/api/sessions/NAME/extend``)
for the owner, an admin and a script's token; refused past the profile's
max_hours, for other users, for what is no whole number and where no session
runs, each changing nothing; audited; and the session card's form on the hub."""

import pwd
import re
import subprocess
import time

from portal import settings
from portal.extend import ExtensionCheck
from portal.slurm import commands
from tests.support.hubclient import SERVICE
from tests.support.jobs import scontrol_job, user_jobs
from tests.support.testhub import deploy


def job_of(user):
    rows = user_jobs(user)
    assert len(rows) == 1, f"expected one job of {user}, got {rows}"
    return rows[0][0]


def time_limit(job_id):
    return scontrol_job(job_id)["TimeLimit"]


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
    assert r.status_code == 403
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


def test_slurms_own_caps_hold_though_the_hub_is_an_operator(restore_profiles, session, portal):
    """Slurm does not hold an operator's scontrol update to the QOS's MaxWall
    (1 day here): a profile that allows 48 h still gets no more than it.
    (restore_profiles first: it removes the profile after the session ends.)"""
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


def test_the_hubs_account_is_a_slurm_operator_and_sync_users_keeps_it(cluster):
    hub_user = settings.load()["hub"]["user"]

    def level():
        return subprocess.run(
            ["sacctmgr", "-n", "-P", "list", "user", hub_user, "format=adminlevel"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

    r = deploy("slurm.sh", "sync-users", check=False)
    assert r.returncode == 0, r.stderr
    assert level() == "Operator"
    r = deploy("slurm.sh", "sync-users", check=False)  # set only when it differs
    assert r.returncode == 0 and "AdminLevel" not in r.stderr, r.stderr
    assert level() == "Operator"


async def test_slurm_knows_the_hubs_account_by_its_uid_as_an_operator(cluster):
    """The check the hub and the admin service make at their start, against the
    real slurmctld: it holds the hub's account with its real uid (a user
    synced before the Unix account existed has none, and every extension is
    refused as "Invalid user id"), at an AdminLevel that may extend jobs."""
    hub_user = settings.load()["hub"]["user"]
    user = await commands.slurm_user(hub_user, timeout=20)
    assert user is not None, f"slurmctld holds no user {hub_user}"
    assert user.uid == pwd.getpwnam(hub_user).pw_uid, user
    assert user.admin_level in ("Operator", "Administrator"), user
    assert await ExtensionCheck(hub_user, timeout=20).verdict() is None
