"""Desktop notifications in a real browser (issue 26): the spawn page asks
for the permission; granted (Playwright), a notification appears when
alice's queued session starts. Every GPU of the cluster is held by root's
jobs until then (as another team's work would).

Chromium shows a notification to the desktop, which a test cannot see: the
page's own Notification is wrapped (an init script) to report each one it
makes to the test (``expose_function``), on every page the browser opens,
the progress page included."""

import time

from playwright.sync_api import expect

from tests.support.jobs import occupy_nodes, release_nodes, squeue
from tests.support.testhub import JOB_NAME

RECORD = """
(() => {
  const Real = window.Notification;
  if (!Real) return;
  class Recorded extends Real {
    constructor(title, options) {
      window.portalNotificationSeen(title, (options || {}).body || "");
      super(title, options);
    }
  }
  Object.defineProperty(Recorded, "permission", { get: () => Real.permission });
  Recorded.requestPermission = (...args) => Real.requestPermission(...args);
  window.Notification = Recorded;
})();
"""


DRAW = """(title) => {
  const box = document.createElement("div");
  box.style = "position:fixed;top:16px;right:16px;z-index:99999;width:380px;padding:12px 16px;" +
    "background:#fff;border:1px solid #999;border-radius:8px;box-shadow:0 4px 16px #0004;" +
    "font:14px sans-serif";
  const head = document.createElement("b");
  head.textContent = title;
  const origin = document.createElement("div");
  origin.textContent = "portal.localhost (desktop notification, as the page made it)";
  origin.style = "color:#666;font-size:12px;margin-top:6px";
  box.append(head, origin);
  document.body.append(box);
}"""


def test_a_desktop_notification_appears_when_a_queued_session_starts(
    browser, hub, browser_login, login, shot
):
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    page = context.new_page()
    seen = []
    page.expose_function("portalNotificationSeen", lambda title, body: seen.append(title))
    page.add_init_script(RECORD)
    try:
        browser_login(page, "alice")
        expect(page.locator("#allow-notices")).to_be_visible()  # asked, not yet granted
        context.grant_permissions(["notifications"], origin=hub)
        page.click("#allow-notices")
        expect(page.locator("#notices-state")).to_have_text(
            "This browser shows a notification when your session starts, ends soon or ends."
        )
        expect(page.locator("#allow-notices")).to_be_hidden()
        shot(page, "spawn-page-notifications")

        occupy_nodes(leave_free=0)
        page.select_option("#profile", "pytorch")
        page.select_option("#gpus", "1")
        page.click("#spawn_form input[type=submit], #spawn_form button[type=submit]")
        page.wait_for_url("**/hub/spawn-pending/alice**")
        deadline = time.monotonic() + 30
        while not (rows := squeue("-n", JOB_NAME, "-u", "alice", "-o", "%i %T")):
            assert time.monotonic() < deadline, "alice's session was not submitted"
            time.sleep(0.3)
        [(job_id, state)] = rows
        assert state == "PENDING", rows
        assert not seen
        shot(page, "spawn-pending-queued")
        time.sleep(3)

        release_nodes()
        wanted = f"has started (Slurm job {job_id})"
        deadline = time.monotonic() + 60
        while not any(wanted in title for title in seen):
            assert time.monotonic() < deadline, f"no notification {wanted!r}: {seen}"
            page.wait_for_timeout(500)
        # headless Chromium shows a desktop notification on no screen: the
        # picture draws the one the page made, from its recorded call
        title = next(title for title in seen if wanted in title)
        page.evaluate(DRAW, title)
        shot(page, "notification-session-started")
    finally:
        release_nodes()
        login("alice").api("DELETE", "/users/alice/server")
        context.close()


def test_jupyterlab_shows_a_desktop_notification_before_the_end(
    browser, hub, browser_login, session, shot
):
    """In the session's JupyterLab (its own origin, where the permission is
    granted anew), the notice before the time limit comes to the desktop too."""
    import re
    from urllib.parse import urlsplit

    from tests.browser.test_time_left import set_minutes_left, show_again
    from tests.support.jobs import user_jobs

    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    page = context.new_page()
    seen = []
    page.expose_function("portalNotificationSeen", lambda title, body: seen.append((title, body)))
    page.add_init_script(RECORD)
    try:
        browser_login(page, "alice")
        session("alice", profile="pytorch", gpus=1, hours=1)
        ((job_id, _),) = user_jobs("alice")
        page.goto(f"{hub}/user/alice/lab?reset")
        page.wait_for_url(re.compile(r".*/user/alice/lab.*"), timeout=60_000)
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(page.url))
        context.grant_permissions(["notifications"], origin=origin)
        expect(page.locator(".jp-portal-timeleft")).to_have_text(
            re.compile(r"min left$"), timeout=60_000
        )
        set_minutes_left(job_id, 10)
        show_again(page)
        expect(page.locator(".jp-Notification-Toast-warning")).to_have_count(1, timeout=10_000)
        deadline = time.monotonic() + 10
        while not seen:
            assert time.monotonic() < deadline, "no desktop notification"
            page.wait_for_timeout(200)
        title, body = seen[0]
        assert title == f"Slurm job {job_id}: time is running out"
        assert re.match(r"Your session ends in (9|10) min, at .*: save your work", body), body
    finally:
        context.close()
