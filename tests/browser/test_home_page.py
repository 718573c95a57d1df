"""The hub's home page: the session card, its Stop, relaunch."""

import re
import time

from playwright.sync_api import expect

from tests.support.browser import stop_from_home
from tests.support.jobs import scontrol_job, user_jobs


def test_session_card_stop_and_relaunch(page, browser_login, hub, shot):
    browser_login(page, "alice")
    page.select_option("#profile", "pytorch")
    page.select_option("#gpus", "2")
    page.fill("#hours", "2")
    page.click("#spawn_form input[type=submit], #spawn_form button[type=submit]")
    page.wait_for_url(re.compile(r".*/user/alice/lab.*"), timeout=120_000)
    [(job_id, state)] = user_jobs("alice")
    assert state == "RUNNING"

    page.goto(hub + "/hub/home")
    card = page.locator("#session-card")
    expect(card).to_contain_text(f"{job_id} (running)")
    node = scontrol_job(job_id)["BatchHost"]  # a compute node, never the login node
    expect(page.locator("#session-node")).to_have_text(node)
    expect(page.locator("#session-gpus")).to_have_text(re.compile(r"^2 \(GPU [\d,-]+\)$"))
    expect(page.locator("#session-cores")).to_have_text("16")
    expect(page.locator("#session-mem")).to_have_text("96 GB")
    expect(page.locator("#session-left")).to_have_text(re.compile(r"^1 h 5\d min$"))
    expect(page.locator("#session-log")).to_contain_text(f".portal/logs/jupyter-{job_id}.log")
    shot(page, "home-session-card")
    # the card's Open; another session beside it is named here first
    expect(page.locator("#open")).to_have_attribute("href", re.compile(r"/user/alice/$"))
    page.fill("#new-session-name", "Bad Name")
    page.click("#start-session")
    assert page.url.endswith("/hub/home")  # refused by the page's own check
    page.fill("#new-session-name", "three")
    page.click("#start-session")
    page.wait_for_url("**/hub/spawn/alice/three")
    expect(page.locator("#spawn_form")).to_be_visible()
    page.goto(hub + "/hub/home")

    stop_from_home(page)
    deadline = time.monotonic() + 20
    while user_jobs("alice") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not user_jobs("alice"), "Stop left the Slurm job running"

    page.goto(hub + "/hub/home")
    relaunch = page.locator("#relaunch")
    expect(relaunch).to_be_visible()
    expect(page.locator("#session-card")).to_contain_text("Last session: pytorch, 2 GPUs, 2 h.")
    shot(page, "home-relaunch")
    relaunch.click()
    page.wait_for_url(re.compile(r".*/user/alice/lab.*"), timeout=120_000)
    [(job_id2, _)] = user_jobs("alice")
    assert job_id2 != job_id
    page.goto(hub + "/hub/home")
    stop_from_home(page)
