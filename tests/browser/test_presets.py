"""Saved presets in the browser (issue 38): one saved on the spawn page,
started from the home page in one click, edited and deleted; screenshots
in test-artifacts/presets-*.png."""

import re

from playwright.sync_api import expect

from tests.support.browser import stop_from_home
from tests.support.jobs import cancel_jobs_of, scontrol_job, user_jobs, wait_no_jobs

NAME = "ResNet 2×V100 2 h"


START = "#spawn_form input[type=submit], #spawn_form button[type=submit]"


def test_a_preset_saved_started_in_one_click_edited_and_deleted(page, browser_login, hub, shot):
    browser_login(page, "alice")
    try:
        page.select_option("#profile", "pytorch")
        page.select_option("#gpus", "2")
        page.fill("#hours", "2")
        page.fill("#preset-name", NAME)
        shot(page, "presets-spawn-page")
        page.click("#save-preset-button")
        page.wait_for_url("**/hub/home")
        expect(page.locator("#session-notice")).to_have_text(f"Saved preset '{NAME}'.")
        row = page.locator(f".home-preset[data-name='{NAME}']")
        expect(row.locator(".preset-summary")).to_have_text("pytorch, 2 GPUs, 2 h")
        assert user_jobs("alice") == []
        shot(page, "presets-home")

        # one click
        row.locator(".preset-start").click()
        page.wait_for_url(re.compile(r".*/user/alice/lab.*"), timeout=180_000)
        [(job_id, state)] = user_jobs("alice")
        assert state == "RUNNING"
        assert re.search(r"gpu(:[\w.-]+)?:2$", scontrol_job(job_id)["TresPerNode"])
        assert scontrol_job(job_id)["TimeLimit"] == "02:00:00"
        page.goto(hub + "/hub/home")
        expect(page.locator("#session-gpus")).to_have_text(re.compile(r"^2 "))
        shot(page, "presets-started")
        # its Edit while the main session runs: a start needs another
        # session's name (it once answered JupyterHub's "already running")
        page.locator(f".home-preset[data-name='{NAME}'] .preset-edit").click()
        expect(page.locator("#session-name-running")).to_contain_text("Your main session runs")
        page.click(START)
        assert (
            page.locator("#session-name")
            .evaluate("e => e.validationMessage")
            .startswith("Your main session runs")
        )
        assert "/presets/" in page.url and len(user_jobs("alice")) == 1  # nothing started
        shot(page, "presets-edit-running")
        page.goto(hub + "/hub/home")
        stop_from_home(page)
        wait_no_jobs("alice")

        # edit: the spawn page filled with it; 3 hours, saved over it
        page.goto(hub + "/hub/home")
        page.locator(f".home-preset[data-name='{NAME}'] .preset-edit").click()
        expect(page.locator("#editing-preset")).to_have_text(NAME)
        expect(page.locator("#gpus")).to_have_value("2")
        expect(page.locator("#hours")).to_have_value("2")
        page.fill("#hours", "3")
        shot(page, "presets-edit")
        page.click("#save-preset-button")
        page.wait_for_url("**/hub/home")
        row = page.locator(f".home-preset[data-name='{NAME}']")
        expect(row.locator(".preset-summary")).to_have_text("pytorch, 2 GPUs, 3 h")
        expect(page.locator(".home-preset")).to_have_count(1)  # changed, not added

        with page.expect_navigation():
            row.locator(".preset-delete").click()
        expect(page.locator("#session-notice")).to_have_text(f"Deleted preset '{NAME}'.")
        expect(page.locator("#no-presets")).to_be_visible()
        shot(page, "presets-deleted")
    finally:
        page.goto(hub + "/hub/home")
        for _ in range(page.locator(".preset-delete").count()):
            with page.expect_navigation():
                page.locator(".preset-delete").first.click()
        cancel_jobs_of(["alice"], timeout=30)  # the hub sees its job gone


def test_a_preset_whose_profile_is_gone_says_so_and_starts_reset(
    page, browser_login, hub, shot, portal, login, restore_profiles
):
    carol = portal("carol")
    profile = {k: v for k, v in carol.profile("pytorch").items() if k != "revision"}
    r = carol.send("POST", "api/profiles", json={**profile, "name": "presetgone"})
    assert r.status_code == 201, r.text
    alice = login("alice")
    body = {"name": "Soon gone", "options": {"profile": "presetgone", "gpus": 1, "hours": 1}}
    r = alice.api("POST", "/portal/presets", json=body)
    assert r.status_code == 201, r.text
    preset = r.json()
    revision = carol.profile("presetgone")["revision"]
    assert carol.send("DELETE", f"api/profiles/presetgone?revision={revision}").status_code == 204
    browser_login(page, "alice")
    try:
        page.goto(hub + "/hub/home")
        row = page.locator(".home-preset[data-name='Soon gone']")
        expect(row.locator(".preset-problem")).to_contain_text(
            "No longer fits: Profile 'presetgone' is not available to you (field profile)"
        )
        shot(page, "presets-no-longer-fits")
        with page.expect_navigation():
            row.locator(".preset-start").click()
        expect(page.locator("#session-notice")).to_contain_text(
            "Preset 'Soon gone' was not started: Profile 'presetgone' is not available to you"
        )
        assert user_jobs("alice") == []
        shot(page, "presets-refused")
        page.click("#notice-reset")
        page.wait_for_url(re.compile(r".*/user/alice/lab.*"), timeout=180_000)
        [(job_id, _)] = user_jobs("alice")
        assert scontrol_job(job_id)["TimeLimit"] == "01:00:00"
    finally:
        alice.api("DELETE", "/users/alice/server")
        cancel_jobs_of(["alice"], timeout=30)
        alice.api("DELETE", f"/portal/presets/{preset['id']}")
