"""The session's time left and GPU use in JupyterLab's status bar, and the
notice before the end, in a real browser.

alice opens JupyterLab in her 1-hour session: the status bar shows the time
left and her GPU's use (or why there is none). Slurm shortens the job (as
root, so as not to wait an hour): when the page is shown again, the notice
says when it ends and links to the hub's home page to extend it; again at
5 minutes. An extension clears it and the status bar follows.
"""

import math
import re
import subprocess

from playwright.sync_api import expect

from portal.session.jobend import FRESH_AGE
from tests.support.jobs import scontrol_job, user_jobs

USER = "alice"
NOTICE = ".jp-Notification-Toast-warning"
CLOCK = r"\d\d?:\d\d( [AP]M)?"  # the end, as the browser's locale writes the time


def run_seconds(job_id):
    """How long the job has run, from scontrol's RunTime ([D-]HH:MM:SS)."""
    days, _, clock = scontrol_job(job_id)["RunTime"].rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def set_minutes_left(job_id, minutes):
    """Give the job a time limit that ends it in ``minutes`` (and under a minute more)."""
    limit = math.ceil(run_seconds(job_id) / 60) + minutes
    subprocess.run(["scontrol", "update", f"JobId={job_id}", f"TimeLimit={limit}"], check=True)


def show_again(page):
    """The tab is shown again (as after a visit to the hub's home page)."""
    page.wait_for_timeout(FRESH_AGE * 1000)  # the server reads Slurm anew
    page.evaluate("window.dispatchEvent(new Event('focus'))")


def test_time_left_and_the_notice_before_the_end(page, browser_login, session, hub, shot):
    browser_login(page, USER)
    session(USER, profile="pytorch", gpus=1, hours=1)
    ((job_id, _),) = user_jobs(USER)

    page.goto(f"{hub}/user/{USER}/lab?reset")
    left = page.locator(".jp-StatusBar-Widget .jp-portal-timeleft")
    expect(left).to_have_text(re.compile(r"^(1 h 00|5\d) min left$"), timeout=60_000)
    expect(left).to_have_attribute("title", re.compile(rf"Slurm job {job_id}\) ends at"))
    gpus = page.locator(".jp-StatusBar-Widget .jp-portal-gpus")
    expect(gpus).to_have_text(
        re.compile(r"^(GPU \d+: (\d+|\?) %(, [\d.]+/[\d.]+ GB)?|no GPU data)$"), timeout=30_000
    )
    expect(gpus).to_have_attribute("title", re.compile(r"\S"))  # each GPU, or why none
    expect(page.locator(NOTICE)).to_have_count(0)

    # 10 minutes left: the notice, with a link to the hub's home page
    set_minutes_left(job_id, 10)
    show_again(page)
    notice = page.locator(NOTICE)
    expect(notice).to_have_count(1, timeout=10_000)
    expect(notice.locator(".jp-toast-message")).to_have_text(
        re.compile(rf"^Your session ends in (9|10) min, at {CLOCK}: save your work, or extend")
    )
    expect(left).to_have_text(re.compile(r"^(9|10) min left$"))
    extend = notice.get_by_role("button", name="Extend")
    expect(extend).to_be_visible()
    expect(notice).to_be_in_viewport(ratio=1)  # slid in
    shot(page, "lab-time-left")
    with page.context.expect_page() as opened:
        extend.click()
    home = opened.value
    expect(home).to_have_url(re.compile(r"/hub/home$"), timeout=30_000)
    home.close()

    # 4 minutes left: warned again
    set_minutes_left(job_id, 4)
    show_again(page)
    expect(notice).to_have_count(1, timeout=10_000)
    expect(notice.locator(".jp-toast-message")).to_have_text(
        re.compile(rf"^Your session ends in [34] min, at {CLOCK}:")
    )

    # extended: the notice goes, the status bar follows at once
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=02:00:00"], check=True)
    show_again(page)
    expect(left).to_have_text(re.compile(r"^1 h 5\d min left$"), timeout=10_000)
    expect(notice).to_have_count(0)
