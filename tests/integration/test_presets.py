"""Saved presets (issue 38) against the real hub, admin service and Slurm: a
preset saved from the spawn page's fields starts from the home page in one
POST (a job with its GPUs and hours in squeue), stops and is deleted; one
whose profile is gone names the field "profile", submits nothing, and its
version with that field reset starts; the REST API's refusals name the
field, and a user sees only their own and the published ones."""

import re
import time

import pytest

from portal import settings
from portal.store import ProfileStore, store_url
from tests.support.jobs import cancel_jobs_of, squeue, stop_session
from tests.support.testhub import JOB_NAME, SETTINGS_FILE


def jobs_of(user):
    """``[(job id, tres per node, time limit)]`` of the user's test jobs."""
    return [tuple(row) for row in squeue("-n", JOB_NAME, "-u", user, "-o", "%i %b %l")]


def page_xsrf(client, path="/hub/spawn"):
    page = client.session.get(client.url(path), timeout=60)
    assert page.status_code == 200, page.text[:300]
    return re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)


def post(client, path, **data):
    # the form's token (the page's), or the hub's XSRF cookie, as the API client sends it
    data["_xsrf"] = data.get("_xsrf") or client.session.cookies.get("_xsrf", path="/hub/")
    return client.session.post(client.url(path), data=data, allow_redirects=False, timeout=60)


def home(client):
    return client.session.get(client.url("/hub/home"), timeout=60).content.decode()


def notice(page):
    """The home page's notice, or its presets card (what a failed check shows)."""
    found = re.search(r'id="session-notice">(.*?)</p>', page, re.S)
    return found.group(1) if found else page[page.find('id="presets"') :][:2000]


def preset_named(client, name):
    r = client.api("GET", "/portal/presets")
    assert r.status_code == 200, r.text
    return next((p for p in r.json() if p["name"] == name), None)


def test_a_preset_saved_on_the_spawn_page_starts_from_home_stops_and_goes(login):
    alice = login("alice")
    name = "ResNet 2×GPU 3 h"
    fields = {"profile": "pytorch", "gpus": "2", "hours": "3", "nodes": "1", "notify": ""}
    try:
        # the spawn page's "Save as preset": its own form's fields, with a name
        r = post(alice, "/hub/portal/presets", _xsrf=page_xsrf(alice), preset_name=name, **fields)
        assert r.status_code == 303 and r.headers["Location"].endswith("/hub/home"), r.text
        page = home(alice)
        assert "Saved preset &#39;ResNet 2×GPU 3 h&#39;." in page, notice(page)
        preset = preset_named(alice, name)
        assert preset["options"] == {"profile": "pytorch", "gpus": "2", "hours": "3", "nodes": "1"}
        assert preset["fits"] and not preset["published"]
        assert f'data-preset="{preset["id"]}"' in page and "pytorch, 2 GPUs, 3 h" in page

        # one click on the home page: one POST, JupyterHub's pending page
        assert jobs_of("alice") == []
        r = post(alice, f"/hub/portal/presets/{preset['id']}/start")
        assert r.status_code == 302 and "/hub/spawn-pending/alice" in r.headers["Location"]
        alice.wait_ready("alice", timeout=180)
        [(job, tres, limit)] = jobs_of("alice")
        assert re.search(r"gpu(:[\w.-]+)?:2$", tres) and limit == "3:00:00", (job, tres, limit)
        assert alice.user_model("alice")["servers"][""]["user_options"]["gpus"] == 2

        # started again while it runs: said, nothing more submitted
        r = post(alice, f"/hub/portal/presets/{preset['id']}/start")
        assert r.status_code == 303 and "is running already" in home(alice)
        assert [j for j, *_ in jobs_of("alice")] == [job]
        stop_session(alice, "alice")

        r = post(alice, f"/hub/portal/presets/{preset['id']}/delete")
        assert r.status_code == 303
        assert f"Deleted preset &#39;{name}&#39;." in home(alice)
        assert preset_named(alice, name) is None
        assert alice.api("GET", f"/portal/presets/{preset['id']}").status_code == 404
    finally:
        stop_session(alice, "alice")
        gone = preset_named(alice, name)
        if gone:
            alice.api("DELETE", f"/portal/presets/{gone['id']}")


def test_a_preset_whose_profile_is_gone_names_it_and_starts_reset(login, portal, restore_profiles):
    carol = portal("carol")
    base = carol.profile("pytorch")
    profile = {k: v for k, v in base.items() if k != "revision"}
    r = carol.send("POST", "api/profiles", json={**profile, "name": "presetgone",
                                                  "display_name": "Soon gone"})  # fmt: skip
    assert r.status_code == 201, r.text
    alice = login("alice")
    options = {"profile": "presetgone", "gpus": 1, "hours": 1}
    r = alice.api("POST", "/portal/presets", json={"name": "Soon gone", "options": options})
    assert r.status_code == 201, r.text
    preset = r.json()
    try:
        assert preset["fits"] and preset["options"] == options
        revision = carol.profile("presetgone")["revision"]
        r = carol.send("DELETE", f"api/profiles/presetgone?revision={revision}")
        assert r.status_code == 204, r.text

        # the API and the home page name the field, and offer it reset
        shown = preset_named(alice, "Soon gone")
        assert not shown["fits"] and shown["field"] == "profile"
        assert shown["error"] == "Profile 'presetgone' is not available to you"
        assert shown["reset_options"] == {"gpus": 1, "hours": 1}
        page = home(alice)
        assert "No longer fits: Profile &#39;presetgone&#39; is not available to you" in page
        assert "Start with profile reset to the profile's default" in page

        # Start as it is: refused, naming the field, nothing submitted
        r = post(alice, f"/hub/portal/presets/{preset['id']}/start")
        assert r.status_code == 303
        page = home(alice)
        assert "was not started: Profile &#39;presetgone&#39; is not available to you" in page
        assert 'id="notice-reset"' in page
        time.sleep(1)
        assert jobs_of("alice") == []

        # the offer: the profile's default (the first profile alice may run)
        r = post(alice, f"/hub/portal/presets/{preset['id']}/start", reset="profile")
        assert r.status_code == 302, r.text
        alice.wait_ready("alice", timeout=180)
        [(_, tres, limit)] = jobs_of("alice")
        assert re.search(r"gpu(:[\w.-]+)?:1$", tres) and limit == "1:00:00", (tres, limit)
        assert alice.user_model("alice")["servers"][""]["user_options"]["profile"] != "presetgone"
    finally:
        stop_session(alice, "alice")
        alice.api("DELETE", f"/portal/presets/{preset['id']}")


def test_the_api_refuses_naming_the_field_and_keeps_users_apart(login, portal):
    alice, bob = login("alice"), login("bob")
    r = alice.api("POST", "/portal/presets", json={"name": "x", "options": {"partiton": "gpu"}})
    assert r.status_code == 400 and r.json()["field"] == "options", r.text
    r = alice.api("POST", "/portal/presets", json={"name": "x\n", "options": {"gpus": "1\n"}})
    assert r.status_code == 400 and r.json()["field"] == "gpus", r.text
    r = alice.api("POST", "/portal/presets", json={"name": "<b>", "options": {}})
    assert r.status_code == 400 and r.json()["field"] == "name", r.text
    r = alice.api("POST", "/portal/presets", json={"name": "all", "options": {},
                                                    "published": True})  # fmt: skip
    assert r.status_code == 400 and r.json()["field"] == "published", r.text
    r = alice.api("POST", "/portal/presets", json={"name": "big", "options": {"gpus": 99}})
    assert r.status_code == 400 and r.json()["field"] == "gpus", r.text

    r = alice.api("POST", "/portal/presets", json={"name": "Mine", "options": {"gpus": 1}})
    assert r.status_code == 201, r.text
    mine = r.json()
    try:
        r = alice.api("POST", "/portal/presets", json={"name": "Mine", "options": {}})
        assert r.status_code == 400 and r.json()["field"] == "name", r.text
        # bob neither sees nor changes alice's
        assert preset_named(bob, "Mine") is None
        for method in ("GET", "PUT", "DELETE"):
            r = bob.api(method, f"/portal/presets/{mine['id']}", json={})
            assert r.status_code == 404, (method, r.text)
        r = post(bob, f"/hub/portal/presets/{mine['id']}/start")
        assert r.status_code == 404
        assert squeue("-n", JOB_NAME, "-u", "bob") == []
        changed = {"name": "Mine, 2 h", "options": {"hours": 2}}
        r = alice.api("PUT", f"/portal/presets/{mine['id']}", json=changed)
        assert r.status_code == 200 and r.json()["options"] == {"hours": 2}, r.text

        # an admin (carol) publishes a copy of hers in the admin service: bob sees it
        carol = portal("carol")
        r = carol.client.api("POST", "/portal/presets", json={"name": "Course", "options": {}})
        assert r.status_code == 201, r.text
        r = carol.send("POST", f"api/presets/{r.json()['id']}/publish")
        assert r.status_code == 201 and r.json()["published"], r.text
        published = r.json()
        shown = preset_named(bob, "Course")
        assert shown["published"] and shown["fits"]
        r = bob.api("DELETE", f"/portal/presets/{published['id']}")
        assert r.status_code == 403, r.text
        assert "Course" in carol.get("presets").text
        r = portal("bob").send("POST", f"api/presets/{mine['id']}/publish")
        assert r.status_code == 403, r.text
        r = carol.send("DELETE", f"api/presets/{published['id']}")
        assert r.status_code == 204, r.text
        assert preset_named(bob, "Course") is None

        # the spawn page's "for everyone": an admin's alone
        form = {"profile": "pytorch", "gpus": "1", "preset_publish": "on"}
        r = post(alice, "/hub/portal/presets", preset_name="Everyone's", **form)
        assert r.status_code == 303 and "Only portal admins publish" in notice(home(alice))
        assert preset_named(bob, "Everyone's") is None
        r = post(carol.client, "/hub/portal/presets", preset_name="Everyone's", **form)
        assert r.status_code == 303, r.text
        shown = preset_named(bob, "Everyone's")
        assert shown["published"] and shown["options"] == {"profile": "pytorch", "gpus": "1"}
        r = carol.client.api("DELETE", f"/portal/presets/{shown['id']}")
        assert r.status_code == 204, r.text
    finally:
        alice.api("DELETE", f"/portal/presets/{mine['id']}")
        carol_own = preset_named(login("carol"), "Course")
        if carol_own:
            login("carol").api("DELETE", f"/portal/presets/{carol_own['id']}")


def test_a_preset_names_the_session_it_starts(login):
    alice = login("alice")
    options = {"profile": "pytorch", "gpus": 1, "hours": 1}
    body = {"name": "Train beside", "options": options, "server_name": "train"}
    r = alice.api("POST", "/portal/presets", json=body)
    assert r.status_code == 201 and r.json()["server_name"] == "train", r.text
    preset = r.json()
    r = alice.api("POST", "/portal/presets", json={**body, "server_name": "Train!"})
    assert r.status_code == 400 and r.json()["field"] == "server_name", r.text
    try:
        r = post(alice, f"/hub/portal/presets/{preset['id']}/start")
        assert r.status_code == 302 and "/hub/spawn-pending/alice/train" in r.headers["Location"]
        alice.wait_ready("alice", timeout=180, server_name="train")
        assert len(jobs_of("alice")) == 1
        assert "" not in alice.user_model("alice")["servers"]  # the main session: not started
    finally:
        alice.api("DELETE", "/users/alice/servers/train", json={"remove": True})
        cancel_jobs_of(["alice"], timeout=30)
        alice.api("DELETE", f"/portal/presets/{preset['id']}")


def test_a_preset_whose_account_was_removed_says_so_and_starts_reset(
    login, portal, restore_profiles
):
    """alice's preset names an account she no longer has (lab-nlp: written
    into the store as it was saved when she had it; Slurm's associations
    are the demo's, left as they are)."""
    carol = portal("carol")
    profile = {k: v for k, v in carol.profile("pytorch").items() if k != "revision"}
    new = {**profile, "name": "presetacct", "display_name": "Accounts", "choose": ["account"]}
    r = carol.send("POST", "api/profiles", json=new)
    assert r.status_code == 201, r.text
    store = ProfileStore(store_url(settings.load(SETTINGS_FILE)))
    options = {"profile": "presetacct", "gpus": "1", "hours": "1", "account": "lab-nlp"}
    preset = store.save_preset("alice", "Old lab", options, "", "alice")
    alice = login("alice")
    try:
        shown = preset_named(alice, "Old lab")
        assert not shown["fits"] and shown["field"] == "account", shown
        if "not read yet" in shown["error"]:
            pytest.skip("this hub reads no catalog of accounts yet: " + shown["error"])
        assert "lab-nlp" in shown["error"]
        assert shown["reset_options"] == {"profile": "presetacct", "gpus": "1", "hours": "1"}
        page = home(alice)
        assert "No longer fits: " in page and "Start with account reset" in page

        r = post(alice, f"/hub/portal/presets/{preset['id']}/start")
        assert r.status_code == 303 and "lab-nlp" in notice(home(alice))
        time.sleep(1)
        assert jobs_of("alice") == []

        r = post(alice, f"/hub/portal/presets/{preset['id']}/start", reset="account")
        assert r.status_code == 302, r.text
        alice.wait_ready("alice", timeout=180)
        [account] = [row[0] for row in squeue("-n", JOB_NAME, "-u", "alice", "-o", "%a")]
        assert account != "lab-nlp"
    finally:
        stop_session(alice, "alice")
        store.delete_preset(preset["id"], "alice")
        store.engine.dispose()
