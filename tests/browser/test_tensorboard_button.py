"""TensorBoard from JupyterLab's file browser, in a real browser.

alice selects her log folder in the file browser of her session; the
TensorBoard button opens TensorBoard on it in a new tab, with her run. The
side panel lists it, and its stop button stops it.
"""

import pwd
import re
import subprocess

from playwright.sync_api import expect

from tests.support.pages import dir_item

USER = "alice"
RUN = f"{pwd.getpwnam(USER).pw_dir}/logs/run1"
# a fresh run: the event files of earlier test runs would draw over it
WRITE_EVENTS = f"""
import shutil
from torch.utils.tensorboard import SummaryWriter
shutil.rmtree({RUN!r}, ignore_errors=True)
with SummaryWriter({RUN!r}) as writer:
    for step in range(5):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
"""


def write_events():
    result = subprocess.run(
        ["sudo", "-u", USER, "/opt/portal/envs/pytorch/bin/python", "-c", WRITE_EVENTS],
        cwd="/tmp",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_tensorboard_button_opens_the_selected_folder(page, browser_login, session, hub, shot):
    browser_login(page, USER)
    session(USER, profile="pytorch", gpus=1)
    write_events()

    # ?reset: the default layout, the file browser open on the home folder
    page.goto(f"{hub}/user/{USER}/lab?reset")
    button = page.locator(".jp-FileBrowser-toolbar .jp-portal-tensorboard-button")
    expect(button).to_be_visible(timeout=60_000)
    expect(button).to_have_attribute("aria-disabled", "true")  # nothing selected
    dir_item(page, "logs").click()
    expect(button).to_have_attribute("aria-disabled", "false")
    shot(page, "tensorboard-button")

    with page.context.expect_page() as opened:
        button.click()
    tab = opened.value
    expect(tab).to_have_url(
        re.compile(rf"/user/{USER}/portal/tensorboard/[0-9a-f]+/"), timeout=60_000
    )
    expect(tab.get_by_text("run1", exact=True).first).to_be_visible(timeout=60_000)
    expect(tab.get_by_text("loss", exact=True).first).to_be_visible()
    tab.wait_for_load_state("networkidle")  # the charts have their data
    tab.wait_for_timeout(1000)  # and draw it
    shot(tab, "tensorboard-tab")

    # the side panel lists it; stop stops it
    page.bring_to_front()
    page.locator('.jp-SideBar [data-id="portal-tensorboard-panel"]').click()
    item = page.locator("#portal-tensorboard-panel .jp-portal-tensorboard-item")
    expect(item).to_have_count(1, timeout=10_000)
    expect(item.locator(".jp-portal-tensorboard-logdir")).to_have_text("logs")
    assert tab.url.startswith(item.locator("a").get_attribute("href"))
    shot(page, "tensorboard-panel")
    item.locator(".jp-portal-tensorboard-stop").click()
    expect(item).to_have_count(0, timeout=10_000)
    assert tab.reload().status == 404, "TensorBoard still answers after stop"
