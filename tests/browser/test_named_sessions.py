"""The home page with two named sessions in a real browser (issue 26): a
card each, with its own job, nodes, GPUs, time left and extend form."""

from playwright.sync_api import expect

from tests.support.jobs import cancel_jobs_of


def test_the_home_page_shows_a_card_for_each_named_session(page, browser_login, login, hub, shot):
    alice = login("alice")
    try:
        for server in ("one", "two"):
            r = alice.api("POST", f"/users/alice/servers/{server}",
                          json={"profile": "pytorch", "gpus": 1})  # fmt: skip
            assert r.status_code in (201, 202), r.text
        for server in ("one", "two"):
            alice.wait_ready("alice", timeout=180, server_name=server)
        browser_login(page, "alice")
        page.goto(hub + "/hub/home")
        for server in ("one", "two"):
            card = page.locator(f'.session-card[data-session="{server}"]')
            expect(card).to_contain_text(f"Your session {server}: PyTorch")
            expect(card.locator(f"#session-job-{server}")).to_contain_text("(running)")
            expect(card.locator(f"#extend-form-{server}")).to_be_visible()
        shot(page, "home-two-sessions")
    finally:
        for server in ("one", "two"):
            alice.api("DELETE", f"/users/alice/servers/{server}", json={"remove": True})
        cancel_jobs_of(["alice"], timeout=30)
