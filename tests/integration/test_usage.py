"""The usage report (issue 28) from the real Slurm accounting: alice and
bob each run a short notebook job and alice a session; carol (a portal
admin) sees both users' GPU-hours, their groups and profiles; alice and bob
each see only their own; the CSV has a row per user."""

import time

import pytest

from tests.integration.test_notebook_jobs import as_user, home, sleeper, wait_ended

FOLDER = "usage-test"


@pytest.fixture(scope="module")
def sleepers(cluster, accounts):
    for user in ("alice", "bob"):
        folder = home(user) / FOLDER
        as_user(user, "mkdir", "-p", str(folder))
        as_user(user, "tee", str(folder / "sleeper.ipynb"), stdin=sleeper(3))
    yield
    for user in ("alice", "bob"):
        as_user(user, "rm", "-rf", str(home(user) / FOLDER))


def test_admins_see_everyones_gpu_hours_and_users_their_own(sleepers, portal, session):
    alice, bob, carol = portal("alice"), portal("bob"), portal("carol")
    session("alice", profile="pytorch", gpus=1)  # a session of hers, recorded with its profile
    for client in (alice, bob):
        r = client.send("POST", "api/jobs", json={
            "notebook": f"{FOLDER}/sleeper.ipynb", "profile": "pytorch", "gpus": 1})  # fmt: skip
        assert r.status_code == 201, r.text
        assert wait_ended(client, r.json()["id"])["state"] == "COMPLETED"
    time.sleep(2)  # slurmdbd has the ends
    r = carol.get("api/usage")
    assert r.status_code == 200, r.text
    users = {u["username"]: u for u in r.json()["users"]}
    assert users["alice"]["gpu_hours"] > 0 and users["bob"]["gpu_hours"] > 0, users
    assert users["alice"]["notebook_jobs"] >= 1 and users["alice"]["sessions"] >= 1
    assert users["bob"]["gpu_busy"] is None  # no NVIDIA driver here: no GPU data, never 0
    assert "portal-users" in {g["group"] for g in r.json()["groups"]}
    assert "pytorch" in {p["profile"] for p in r.json()["profiles"]}

    for user, client in (("alice", alice), ("bob", bob)):
        mine = client.get("api/usage").json()
        assert [u["username"] for u in mine["users"]] == [user], mine["users"]
        assert {j["user"] for j in mine["jobs"]} == {user}
    assert carol.get("api/usage", params={"since": "2026-13-01"}).status_code == 400

    csv = carol.get("usage", params={"format": "csv"})
    assert csv.status_code == 200 and csv.headers["Content-Type"].startswith("text/csv")
    assert {line.split(",")[0] for line in csv.text.splitlines()[1:]} >= {"alice", "bob"}
    page = carol.get("usage")
    assert page.status_code == 200 and 'id="chart-days"' in page.text
    assert 'data-name="alice"' in page.text and 'data-name="bob"' in page.text
