"""The admin service /services/portal/ on the test hub: profiles edited by an
admin, validated against the live Slurm cluster, audited, locked against
concurrent edits, in effect at the next spawn; refused to everyone else."""

import html
import json
import re
import subprocess
import time

import pytest

from tests.support.hubclient import SERVICE
from tests.support.jobs import user_jobs

EDITABLE = ("display_name", "max_gpus", "groups", "enabled")


def spawn_page_profiles(client):
    page = client.session.get(client.url("/hub/spawn"), timeout=30)
    assert page.status_code == 200
    data = re.search(r'id="portal-profiles">(.*?)</script>', page.text, re.S).group(1)
    return {p["name"]: p for p in json.loads(html.unescape(data))}


def test_profiles_are_seeded_from_the_site_settings(portal):
    profiles = portal("carol").get("api/profiles").json()
    assert [p["name"] for p in profiles] == [
        "pytorch", "tensorflow", "vision", "distributed", "pytorch-image", "tensorflow-image",
        "pytorch-site",
    ]  # fmt: skip
    pytorch = profiles[0]
    assert pytorch["max_gpus"] == 4 and pytorch["cores_per_gpu"] == 8
    assert pytorch["mem_per_gpu_gb"] == 48 and pytorch["partition"] == "gpu"
    assert set(pytorch) == {
        "name", "display_name", "description", "environment", "partition", "max_gpus",
        "max_nodes", "cores_per_gpu", "mem_per_gpu_gb", "default_hours", "max_hours",
        "idle_minutes", "groups", "enabled", "image", "user_images", "revision", "max_array",
        "partitions", "gpu_types", "choose", "features", "max_cores", "max_mem_gb",
    }  # fmt: skip
    assert pytorch["image"] == "" and pytorch["user_images"] is False


def test_a_profile_may_let_its_sessions_idle_longer_than_the_site_never_shorter(
    portal, restore_profiles
):
    carol = portal("carol")
    before = carol.profile("pytorch")
    assert before["idle_minutes"] == 0  # the site's [culling] idle_minutes
    r = carol.put("pytorch", idle_minutes=30, revision=before["revision"])
    assert r.status_code == 400 and r.json()["field"] == "idle_minutes", r.text
    assert "idle_minutes 30 is less than the site's 120" in r.json()["error"]
    r = carol.put("pytorch", idle_minutes=480, revision=before["revision"])
    assert r.status_code == 200 and r.json()["idle_minutes"] == 480, r.text
    page = carol.get("profiles/pytorch").text
    assert re.search(r'id="idle_minutes" name="idle_minutes" value="480"', page)


def test_an_edit_applies_at_the_next_spawn(portal, login, restore_profiles):
    carol, bob = portal("carol"), login("bob")
    assert spawn_page_profiles(bob)["pytorch"]["offered_gpus"] == 4
    before = carol.profile("pytorch")
    r = carol.put("pytorch", max_gpus=2, revision=before["revision"])
    assert r.status_code == 200, r.text
    assert r.json()["max_gpus"] == 2 and r.json()["revision"] == before["revision"] + 1

    # no restart: the next spawn page offers 1 to 2, and 3 is refused
    offered = spawn_page_profiles(bob)["pytorch"]
    assert offered["offered_gpus"] == 2 and offered["revision"] == before["revision"] + 1
    r = bob.api("POST", "/users/bob/server", json={"profile": "pytorch", "gpus": 3})
    assert r.status_code == 400 and "between 1 and 2" in r.json()["message"], r.text
    time.sleep(0.2)
    assert not user_jobs("bob")

    # the audit: who, and what changed
    history = carol.history("pytorch")
    assert "carol" in history and "max_gpus" in history and "4 → 2" in history


def test_a_running_session_keeps_its_revision(portal, session, login, restore_profiles):
    carol = portal("carol")
    start = carol.profile("tensorflow")
    alice = session("alice", profile="tensorflow", gpus=1)
    r = carol.put("tensorflow", display_name="TensorFlow (edited)", revision=start["revision"])
    assert r.status_code == 200, r.text
    home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    card = re.search(r'id="session-revision">\(profile revision (\d+)\)', home)
    assert card and int(card.group(1)) == start["revision"], home[:2000]
    assert "TensorFlow (edited)" not in home
    # in use: it may be disabled, not deleted
    now = r.json()["revision"]
    r = carol.send("DELETE", f"api/profiles/tensorflow?revision={now}")
    assert r.status_code == 409 and "in use" in r.json()["error"] and "alice" in r.json()["error"]
    r = carol.put("tensorflow", enabled=False, revision=now)
    assert r.status_code == 200 and r.json()["enabled"] is False
    # a disabled profile is not offered (the running session goes on)
    assert "tensorflow" not in spawn_page_profiles(login("bob"))
    assert alice.user_model("alice")["servers"][""]["ready"]


def test_non_admins_read_what_is_offered_and_change_nothing(portal):
    bob, alice = portal("bob"), portal("alice")
    assert [p["name"] for p in bob.get("api/profiles").json()] == [
        "pytorch",
        "tensorflow",
        "distributed",
        "pytorch-image",
        "tensorflow-image",
        "pytorch-site",
    ]
    assert "vision" in [p["name"] for p in alice.get("api/profiles").json()]
    assert bob.get("api/profiles/vision").status_code == 404
    assert bob.get("api/profiles/pytorch").status_code == 200
    page = bob.get("profiles")
    assert page.status_code == 200 and "PyTorch" in page.text and "Vision" not in page.text
    assert "Edit</a>" not in page.text
    revision = bob.profile("pytorch")["revision"]
    refused = [
        bob.get("profiles/pytorch"),
        bob.get("profiles/new"),
        bob.get("profiles/pytorch/history"),
        bob.put("pytorch", max_gpus=1, revision=revision),
        bob.send("POST", "api/profiles", json={"name": "mine", "display_name": "Mine"}),
        bob.send("DELETE", f"api/profiles/pytorch?revision={revision}"),
        bob.send("POST", "api/check", json={}),
        bob.send("POST", "profiles/pytorch", data={"_xsrf": bob.xsrf, "max_gpus": "1"}),
        bob.send("POST", "profiles/pytorch/disable", data={"_xsrf": bob.xsrf}),
    ]
    for r in refused:
        assert r.status_code == 403, f"{r.request.method} {r.request.url}: {r.status_code}"
    assert bob.profile("pytorch")["revision"] == revision
    # without the XSRF header, the cookie alone changes nothing, even for an admin
    carol = portal("carol")
    r = carol.send("PUT", "api/profiles/pytorch", xsrf=False, json={"max_gpus": 1})
    assert r.status_code == 401 and "X-XSRFToken" in r.json()["error"], r.text
    assert carol.profile("pytorch")["revision"] == revision


INVALID = [
    ({"partition": "nosuch"}, "partition", "does not exist"),
    ({"max_gpus": 0}, "max_gpus", "between 1 and"),
    ({"max_gpus": 9}, "max_gpus", "largest node"),
    ({"mem_per_gpu_gb": 1000}, "mem_per_gpu_gb", "no node"),
    ({"cores_per_gpu": 64}, "cores_per_gpu", "no node"),
    ({"max_hours": 200}, "max_hours", "MaxTime"),
    ({"default_hours": 30, "max_hours": 24}, "default_hours", "more than max_hours"),
    ({"display_name": "<script>alert(1)</script>"}, "display_name", "markup"),
    ({"environment": "nosuch"}, "environment", "not installed"),
    ({"environment": "$(id)"}, "environment", "not allowed"),
    ({"groups": ["vision", "a)(uid=*"]}, "groups", "not a valid group"),
    ({"max_gpus": "two"}, "max_gpus", "whole number"),
    ({"enabled": "yes"}, "enabled", "true or false"),
    ({"name": "other"}, "name", "renamed"),
    ({"shell": "/bin/sh"}, "shell", "unknown field"),
]


@pytest.mark.parametrize("change, field, message", INVALID, ids=[i[1] for i in INVALID])
def test_invalid_values_are_refused_naming_the_field(portal, change, field, message):
    carol = portal("carol")
    before = carol.profile("pytorch")
    history = carol.history("pytorch").count("history-row")
    r = carol.put("pytorch", **change, revision=before["revision"])
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field and message in r.json()["error"], r.text
    assert carol.profile("pytorch") == before
    assert carol.history("pytorch").count("history-row") == history


BAD_NAMES = [[], "new", "rm -rf", "a;id", "<b>x</b>", "$(id)", "Upper", "x" * 40, ""]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_new_profiles_with_bad_names_are_refused(portal, name):
    carol = portal("carol")
    data = {"name": name, "display_name": "X", "environment": "pytorch", "max_gpus": 1}
    r = carol.send("POST", "api/profiles", json=data)
    assert r.status_code == 400 and r.json()["field"] == "name", r.text
    assert name not in [p["name"] for p in carol.get("api/profiles").json()]


def test_odd_revisions_and_bodies_are_refused_not_errors(portal):
    """What the fuzz found (tests/reliability/test_fuzz.py): each is refused,
    saying why, where it was a 500."""
    carol = portal("carol")
    before = carol.profile("vision")
    current = str(before["revision"])
    for revision in ("²", "9" * 30):  # str.isdigit takes "²"; SQLite no 30 digits
        r = carol.send("DELETE", "api/profiles/vision", params={"revision": revision})
        assert r.status_code == 400 and r.json()["field"] == "revision", r.text
        for action, data, status in [
            ("disable", {"revision": revision}, 302),  # back to the list: "Not done: ..."
            ("delete", {"revision": revision}, 302),
            ("revert", {"revision": current, "to": revision}, 404),  # no such revision
        ]:
            r = carol.send(
                "POST",
                f"profiles/vision/{action}",
                data={"_xsrf": carol.xsrf, **data},
                allow_redirects=False,
            )
            assert r.status_code == status, (action, r.status_code)
            assert status == 404 or "Not+done" in r.headers["Location"]
    r = carol.put("vision", revision=2**70)
    assert r.status_code == 400 and r.json()["field"] == "revision", r.text
    r = carol.put("vision", display_name="a\ud800", revision=before["revision"])
    assert r.status_code == 400 and "not valid Unicode" in r.json()["error"], r.text
    r = carol.send("POST", "api/profiles", data=b"[" * 5000)
    assert r.status_code == 400 and "nested too deeply" in r.json()["error"], r.text
    assert carol.profile("vision") == before


def test_concurrent_edits_the_second_is_refused(portal, restore_profiles):
    carol, dave = portal("carol"), portal("carol")  # two tabs of admins
    base = carol.profile("vision")["revision"]
    first = carol.put("vision", max_gpus=1, revision=base)
    assert first.status_code == 200
    second = dave.put("vision", max_hours=3, revision=base)
    assert second.status_code == 409, second.text
    body = second.json()
    assert body["field"] == "revision" and "max_gpus: 2 → 1" in body["error"]
    assert body["changes"] == {"max_gpus": [2, 1]}
    now = carol.profile("vision")
    assert now["max_gpus"] == 1 and now["max_hours"] == 4 and now["revision"] == base + 1
    rows = re.findall(r'<tr class="history-row" data-revision="(\d+)">', carol.history("vision"))
    assert rows[0] == str(base + 1) and rows.count(str(base + 1)) == 1


def test_create_duplicate_disable_history_revert_delete(portal, restore_profiles):
    carol = portal("carol")
    r = carol.send(
        "POST",
        "api/profiles",
        json={"name": "short", "display_name": "Short", "environment": "pytorch", "max_gpus": 1},
    )
    assert r.status_code == 201, r.text
    assert r.json()["revision"] == 1 and r.json()["partition"] == "gpu"  # [slurm] defaults
    assert (
        carol.send("POST", "api/profiles", json={**r.json(), "revision": None}).status_code == 400
    )
    r = carol.put("short", max_hours=2, default_hours=1, revision=1)
    assert r.status_code == 200 and r.json()["revision"] == 2
    # revert to revision 1 from the history page (a form, as the browser posts it)
    r = carol.send(
        "POST",
        "profiles/short/revert",
        xsrf=False,
        data={"_xsrf": carol.xsrf, "revision": "2", "to": "1"},
        allow_redirects=False,
    )
    assert r.status_code == 302 and "reverted" in r.headers["Location"]
    short = carol.profile("short")
    assert short["max_hours"] == 24 and short["revision"] == 3
    assert "revert" in carol.history("short")
    # duplicate: the form is filled from the source, disabled, under a new name
    form = carol.get("profiles/new?from=short").text
    assert 'value="short-copy"' in form and 'value="Short"' in form
    r = carol.send("DELETE", "api/profiles/short?revision=3")
    assert r.status_code == 204
    assert carol.get("api/profiles/short").status_code == 404
    assert "delete" in carol.history("short")  # the history outlives the profile


def test_the_form_shows_the_sbatch_lines_and_the_validation_message(portal):
    carol = portal("carol")
    page = carol.get("profiles/pytorch")
    assert page.status_code == 200
    text = html.unescape(page.text)
    for label, gpus in (("1 GPU", 1), ("4 GPUs", 4)):
        line = f"sbatch --nodes=1 --ntasks-per-node={gpus} --partition=gpu --gres=gpu:{gpus} "
        assert f"{label}: <code>{line}" in text
    assert "--cpus-per-task=8 --mem=192G --time=8:00:00 --no-requeue" in text
    assert "nodes ×" not in text  # pytorch: one node
    revision = carol.profile("pytorch")["revision"]
    form = {
        "_xsrf": carol.xsrf,
        "revision": str(revision),
        "display_name": "PyTorch",
        "environment": "pytorch",
        "partition": "gpu",
        "max_gpus": "9",
        "cores_per_gpu": "8",
        "mem_per_gpu_gb": "48",
        "default_hours": "8",
        "max_hours": "24",
        "groups": "",
        "enabled": "on",
    }
    r = carol.send("POST", "profiles/pytorch", xsrf=False, data=form)
    assert r.status_code == 400
    assert 'data-field="max_gpus"' in r.text and "largest node" in r.text
    assert 'id="max_gpus" name="max_gpus" value="9"' in r.text  # what was typed is kept
    assert carol.profile("pytorch")["revision"] == revision
    verdict = carol.send("POST", "api/check", json={**carol.profile("pytorch"), "max_gpus": 2})
    assert verdict.json()["lines"]["2 GPUs"].endswith(
        "--gres=gpu:2 --cpus-per-task=8 --mem=96G --time=8:00:00 --no-requeue"
    )


def test_hub_api_tokens_with_the_scope_work_and_others_do_not(login, portal, restore_profiles):
    carol, bob = login("carol"), login("bob")
    scopes = ["custom:portal:admin", "access:services!service=portal"]
    r = carol.api("POST", "/users/carol/tokens", json={"scopes": scopes, "note": "automation"})
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    headers = {"Authorization": f"token {token}"}
    api = carol.url(SERVICE + "api/profiles/vision")
    current = carol.session.get(api, headers=headers, timeout=30)
    assert current.status_code == 200
    r = carol.session.put(
        api,
        json={"description": "edited by a script", "revision": current.json()["revision"]},
        headers=headers,
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert "carol" in portal("carol").history("vision")
    # bob may not get the scope; a plain token of his reads but writes nothing
    r = bob.api("POST", "/users/bob/tokens", json={"scopes": scopes})
    assert r.status_code in (400, 403) and "not held" in r.json()["message"], r.text
    r = bob.api("POST", "/users/bob/tokens", json={"scopes": ["access:services!service=portal"]})
    headers = {"Authorization": f"token {r.json()['token']}"}
    assert bob.session.get(bob.url(SERVICE + "api/profiles"), headers=headers).status_code == 200
    r = bob.session.put(api, json={"max_gpus": 1, "revision": 1}, headers=headers, timeout=30)
    assert r.status_code == 403


def test_cluster_page(portal, session):
    session("alice", profile="pytorch", gpus=1)
    bob, carol = portal("bob"), portal("carol")
    page = bob.get("cluster").text
    assert 'data-partition="gpu"' in page and re.search(r'class="gpus">\d / 4<', page)
    assert 'id="sessions"' not in page  # sessions only for admins
    # the snapshot is the hub's poll: wait for it to show alice's job
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        page = carol.get("cluster").text
        if re.search(r'data-user="alice".*?class="time-left">\d+ h', page, re.S):
            break
        time.sleep(1)
    assert re.search(r'data-user="alice".*?<td>pytorch</td><td>1</td>', page, re.S), page
    assert re.search(r'class="time-left">7 h 5\d min<', page), page
    assert "the hub&#39;s poll" in page or "the hub's poll" in page


def test_the_hub_links_to_the_service(login):
    """One navigation: Home, Jobs, Usage, Presets for every user; Profiles,
    Images, Cluster and Admin for a portal admin; API tokens in the user's menu."""

    def links(html):
        return re.findall(r'id="nav-([a-z]+)" href="([^"]+)"', html)

    user = ["home", "jobs", "usage", "presets"]
    admin = user + ["profiles", "images", "cluster", "admin"]
    for name, expected in (("bob", user), ("carol", admin)):
        client = login(name)
        hub_home = client.session.get(client.url("/hub/home"), timeout=30).text
        service = client.session.get(client.url("/services/portal/jobs"), timeout=30).text
        for page in (hub_home, service):
            found = links(page)
            assert [key for key, _ in found if key != "token"] == expected, (name, found)
            assert ("token", "/hub/token") in found, found
        assert dict(links(hub_home))["jobs"].endswith("services/portal/jobs")


def test_store_upgrade_keeps_data(tmp_path):
    """The schema's migrations run on an existing store without losing a profile."""
    script = f"""
from portal.store import ProfileStore, default_url
store = ProfileStore(default_url({str(tmp_path)!r}))
store.upgrade()
store.seed([{{"name": "a", "display_name": "A", "environment": "pytorch", "partition": "gpu"}}])
store.upgrade()
print([p.name for p in store.profiles()], store.engine.connect().exec_driver_sql(
    "select version_num from portal_alembic_version").scalar())
"""
    out = subprocess.run(
        ["/opt/portal/envs/hub/bin/python", "-c", script], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['a'] 0013"
