"""The home page with two named sessions in a real browser (issue 26): a
card each, with its own job, nodes, GPUs, time left and extend form."""

from playwright.sync_api import expect

from tests.support.browser import stop_from_home
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
        # each card stops its own session; a stopped one is listed, and removed
        stop_from_home(page, "one")
        expect(page.locator('.stopped-session[data-session="one"]')).to_be_visible()
        expect(page.locator('.session-card[data-session="two"]')).to_be_visible()
        assert "one" not in alice.user_model("alice")["servers"]
        page.click("#remove-one")
        expect(page.locator('.stopped-session[data-session="one"]')).to_have_count(
            0, timeout=20_000
        )
        # no main session: the one way to start is the spawn page (which names one)
        expect(page.locator("#start-session")).to_have_attribute("href", "/hub/spawn")
    finally:
        for server in ("one", "two"):
            alice.api("DELETE", f"/users/alice/servers/{server}", json={"remove": True})
        cancel_jobs_of(["alice"], timeout=30)


def test_the_spawn_page_starts_a_session_of_the_name_given(page, browser_login, login, hub):
    alice = login("alice")
    try:
        browser_login(page, "alice")
        expect(page.locator("#session-name")).to_have_attribute("placeholder", "pytorch")
        page.select_option("#profile", "tensorflow")
        expect(page.locator("#session-name")).to_have_attribute("placeholder", "tensorflow")
        page.select_option("#profile", "pytorch")
        for bad in ("Bad Name", "my_session", "1gpu", "a--b", "gpu-"):
            page.fill("#session-name", bad)
            page.click("#spawn_form input[type=submit], #spawn_form button[type=submit]")
            assert "/hub/spawn" in page.url and "spawn-pending" not in page.url, bad  # refused
        page.fill("#session-name", "explore")
        page.click("#spawn_form input[type=submit], #spawn_form button[type=submit]")
        page.wait_for_url("**/user/alice/explore/**", timeout=180_000)
        model = alice.wait_ready("alice", timeout=180, server_name="explore")
        assert "" not in model["servers"]  # the main session was not started
    finally:
        alice.api("DELETE", "/users/alice/servers/explore", json={"remove": True})
        cancel_jobs_of(["alice"], timeout=30)
