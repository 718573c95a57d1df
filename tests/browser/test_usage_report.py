"""The usage report's page with its charts, in a real browser (issue 28):
carol, a portal admin, opens it after a notebook job of alice's."""

from playwright.sync_api import expect

from tests.integration.test_notebook_jobs import as_user, home, sleeper, wait_ended

FOLDER = "usage-browser"


def test_the_usage_report_draws_its_charts(page, browser_login, portal, hub, shot):
    folder = home("alice") / FOLDER
    as_user("alice", "mkdir", "-p", str(folder))
    as_user("alice", "tee", str(folder / "sleeper.ipynb"), stdin=sleeper(3))
    try:
        alice = portal("alice")
        r = alice.send("POST", "api/jobs", json={
            "notebook": f"{FOLDER}/sleeper.ipynb", "profile": "pytorch", "gpus": 2})  # fmt: skip
        assert r.status_code == 201, r.text
        assert wait_ended(alice, r.json()["id"])["state"] == "COMPLETED"
        browser_login(page, "carol")
        page.goto(f"{hub}/services/portal/usage")
        expect(page.locator("#chart-days rect").first).to_be_visible(timeout=60_000)
        expect(page.locator("#chart-efficiency")).to_be_visible()
        expect(page.locator('#usage-username tr[data-name="alice"]')).to_be_visible()
        shot(page, "usage-report")
    finally:
        as_user("alice", "rm", "-rf", str(folder))
