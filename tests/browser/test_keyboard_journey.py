"""The whole journey with the keyboard alone (issue 39): log in, start a
session, open JupyterLab from the home page, extend, stop, run a notebook as
a Slurm job. Each control is reached with Tab from the page's start (no
click, no fill), and each focus it passes is visible. A ``goto`` stands for
an address typed into the browser."""

import re
import subprocess
import time

from playwright.sync_api import expect

from tests.support.jobs import cancel_jobs_of, squeue, user_jobs, wait_no_jobs
from tests.support.testhub import JOB_NAME

USER = "alice"

# The focused element and whether its focus shows: an outline or a box
# shadow (Bootstrap's focus ring) while it matches :focus-visible.
FOCUS = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const cs = getComputedStyle(el);
  const ring = (cs.outlineStyle !== "none" && parseFloat(cs.outlineWidth) > 0)
    || cs.boxShadow !== "none";
  const id = el.id ? "#" + el.id : el.tagName.toLowerCase();
  return {id: id, visible: el.matches(":focus-visible") && ring};
}"""


def tab_to(page, selector, limit=120):
    """Press Tab from the page's start until ``selector`` has the focus;
    fail naming a focus that did not show, or when it is never reached."""
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); }")
    page.keyboard.press("Escape")
    hidden = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        focus = page.evaluate(FOCUS)
        if focus and not focus["visible"]:
            hidden.append(focus["id"])
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            assert not hidden, f"focus not visible on {hidden} on the way to {selector}"
            return
    raise AssertionError(f"{selector} not reached with {limit} Tabs on {page.url}")


def type_into(page, selector, text):
    tab_to(page, selector)
    page.keyboard.press("Control+a")
    page.keyboard.type(text)


def test_the_journey_with_the_keyboard_alone(page, hub, accounts):
    try:
        # 1. log in
        page.goto(hub + "/hub/login")
        type_into(page, "#username_input", USER)
        page.keyboard.press("Tab")
        page.keyboard.type(accounts[USER]["password"])
        page.keyboard.press("Enter")
        page.wait_for_url("**/hub/spawn**")

        # 2. start a session: the profile chosen with the arrow keys
        tab_to(page, "#profile")
        while page.eval_on_selector("#profile", "s => s.value") != "pytorch":
            page.keyboard.press("ArrowDown")
        type_into(page, "#hours", "2")
        tab_to(page, "#spawn_form input[type=submit], #spawn_form button[type=submit]")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(rf".*/user/{USER}/lab.*"), timeout=180_000)
        [(job_id, state)] = user_jobs(USER)
        assert state == "RUNNING"

        # 3. the home page's Open JupyterLab
        page.goto(hub + "/hub/home")
        expect(page.locator("#session-state")).to_have_text("running")
        tab_to(page, "#open")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(rf".*/user/{USER}/lab.*"), timeout=60_000)
        expect(page.locator("#jp-main-dock-panel")).to_be_visible(timeout=60_000)

        # 4. extend by one hour
        page.goto(hub + "/hub/home")
        tab_to(page, "#extend")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r".*/hub/home$"))
        expect(page.locator("#session-notice")).to_have_text(
            "Extended by 1 hour: the time limit is now 3 h."
        )

        # 5. stop: the card goes, the job ends, the relaunch is offered
        page.wait_for_function("window._portal_home_ready === true")
        tab_to(page, "#stop")
        page.keyboard.press("Enter")
        expect(page.locator("#stop")).to_have_count(0, timeout=30_000)
        expect(page.locator("#relaunch")).to_be_visible()
        wait_no_jobs(USER)

        # 6. a notebook as a Slurm job, from the home page's link
        tab_to(page, "#run-notebook-job")
        page.keyboard.press("Enter")
        page.wait_for_url("**/services/portal/jobs**")
        type_into(page, "#notebook", "templates/pytorch/mnist-pytorch.ipynb")
        type_into(page, "#gpus", "1")
        type_into(page, "#parameters", '{"max_steps": 20}')
        tab_to(page, "#submit-job")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r".*/services/portal/jobs/\d+$"))
        assert notebook_jobs(), "the notebook job was not submitted"
        expect(page.locator("h1 .job-state")).to_have_text(re.compile("PENDING|RUNNING|SUBMITTED"))
        tab_to(page, "#cancel-job")
        page.keyboard.press("Enter")
        # the job's state, as Slurm has it, is announced without a reload
        expect(page.locator("#live-status")).to_contain_text("CANCELLED", timeout=40_000)
        expect(page.locator("h1 .job-state")).to_have_text("CANCELLED")
        expect(page.locator("#cancel-job")).to_have_count(0)
        deadline = time.monotonic() + 30
        while notebook_jobs() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not notebook_jobs(), "Cancel left the notebook job"
    finally:
        subprocess.run(["scancel", "-n", f"{JOB_NAME}-notebook", "-u", USER], check=False)
        cancel_jobs_of([USER], timeout=30)


def notebook_jobs():
    """The test hub's notebook jobs of the user, from squeue."""
    return squeue("-n", f"{JOB_NAME}-notebook", "-u", USER, "-o", "%i %T")
