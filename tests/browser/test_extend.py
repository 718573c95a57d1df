"""The session card's "Extend by N hours": the new limit and time left show at
once, Slurm has it; the card's GPU use is filled from the session."""

import re

from playwright.sync_api import expect

from tests.support.browser import stop_from_home
from tests.support.jobs import cancel_jobs_of, scontrol_job, user_jobs


def test_extend_from_the_session_card(page, browser_login, hub, shot):
    browser_login(page, "alice")
    page.select_option("#profile", "pytorch")
    page.select_option("#gpus", "1")
    page.fill("#hours", "2")
    page.click("#spawn_form input[type=submit], #spawn_form button[type=submit]")
    try:
        page.wait_for_url(re.compile(r".*/user/alice/lab.*"), timeout=120_000)
        [(job_id, state)] = user_jobs("alice")
        assert state == "RUNNING"

        page.goto(hub + "/hub/home")
        expect(page.locator("#session-limit")).to_have_text("2 h")
        expect(page.locator("#session-left")).to_have_text(re.compile(r"^1 h 5\d min$"))
        # 1 to what the profile still allows (PyTorch: 24 h in all)
        hours = page.locator("#extend-hours option")
        expect(hours).to_have_count(22)
        # GPU use: the session's own figures, or why there are none
        gpu_use = page.locator("#session-gpu-use")
        # (the session's own answer, relayed by the hub: no NVIDIA driver here)
        expect(gpu_use).to_have_text(re.compile(r"GPU \d+.*%|No NVIDIA driver on n\d"))

        page.select_option("#extend-hours", "1")
        page.click("#extend")
        page.wait_for_url(re.compile(r".*/hub/home$"))
        expect(page.locator("#session-notice")).to_have_text(
            "Extended by 1 hour: the time limit is now 3 h."
        )
        expect(page.locator("#session-limit")).to_have_text("3 h")
        expect(page.locator("#session-left")).to_have_text(re.compile(r"^2 h 5\d min$"))
        expect(hours).to_have_count(21)
        assert scontrol_job(job_id)["TimeLimit"] == "03:00:00"
        expect(gpu_use).not_to_have_text("…", timeout=15_000)
        shot(page, "home-extend")

        # past the profile's limit: said on the card, nothing changed
        page.evaluate(
            "document.querySelector('#extend-hours').add(new Option('30', '30'))"
        )  # what a changed page could send
        page.select_option("#extend-hours", "30")
        page.click("#extend")
        expect(page.locator("#session-notice")).to_contain_text(
            "Not extended: 30 more hours would make 33 h; "
            "profile PyTorch allows 24 h: at most 21 more"
        )
        assert scontrol_job(job_id)["TimeLimit"] == "03:00:00"

        # how the card shows GPU figures (the session's answer, as a node with GPUs gives it)
        gpus = {
            "gpus": [
                {"index": 0, "name": "NVIDIA H100", "utilization": 87,
                 "memory_used_mb": 30112, "memory_total_mb": 81559},
            ],
            "reason": "",
        }  # fmt: skip
        page.route("**/hub/portal/sessions/alice/gpus", lambda route: route.fulfill(json=gpus))
        page.reload()
        expect(gpu_use).to_have_text("GPU 0 (NVIDIA H100): 87 %, 30112 / 81559 MB")
        reason = {"gpus": [], "reason": "no NVIDIA driver on node n1"}
        page.unroute("**/hub/portal/sessions/alice/gpus")
        page.route("**/hub/portal/sessions/alice/gpus", lambda route: route.fulfill(json=reason))
        page.reload()
        expect(gpu_use).to_have_text("no NVIDIA driver on node n1")

        stop_from_home(page)
    finally:
        cancel_jobs_of(["alice"])
