"""What the hub's samples of a session's GPU use say, in a real browser
(issue 28): alice's 2-GPU session, sampled as spawners/gpu_use.py stores
samples (this cluster's GPUs have no driver to read), used one GPU at most;
once it is stopped her home page and her usage report say so."""

import re

from playwright.sync_api import expect

from tests.integration.test_gpu_use import in_store, usage_ended
from tests.support.jobs import user_jobs

# her last session alone, or with the one tests/integration/test_gpu_use.py left
ADVICE = re.compile(
    r"^Your last (session|2 sessions) used 1 of (its|their) 2 GPUs: fewer would start sooner\.$"
)


def test_the_home_page_and_the_report_say_a_slice_was_larger_than_used(
    page, browser_login, session, portal, hub, shot
):
    alice = session("alice", profile="pytorch", gpus=2)
    [[job_id, _]] = user_jobs("alice")
    in_store("".join(f"store.record_gpu_sample({job_id!r}, {busy}, {mean})\n"
                     for busy, mean in ((1, 70.0), (1, 45.0), (0, 1.0))))  # fmt: skip
    alice.api("DELETE", "/users/alice/server")
    alice.wait_stopped("alice")
    usage_ended(portal("alice"), job_id)

    browser_login(page, "alice")
    page.goto(hub + "/hub/home")
    expect(page.locator("#session-gpu-advice")).to_have_text(ADVICE)
    shot(page, "home-gpu-advice")

    page.goto(hub + "/services/portal/usage")
    expect(page.locator("#usage-advice")).to_have_text(ADVICE)
    row = page.locator('#usage-username tr[data-name="alice"]')
    expect(row).to_contain_text(re.compile(r"\d+%"))  # her GPU busy share, from the samples
    shot(page, "usage-advice")
