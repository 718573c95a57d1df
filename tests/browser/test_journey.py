"""A data scientist's journey through the portal, in a real browser.

alice opens the portal, logs in, asks for a 2-GPU TensorFlow slice, waits on
the progress page, lands in JupyterLab with her templates and the shared data,
trains the TensorFlow template, opens its TensorBoard from the file browser,
and stops her server from the hub's control panel. Each step leaves a
screenshot ``journey-NN-*.png`` in test-artifacts/.

The templates train for 3 epochs by default, several minutes each on this
machine's two CPU cores; the tests make them short as a user would, by adding
a line to the parameters cell in the browser (``SHORT_RUN``) before
*Restart Kernel and Run All Cells*. The notebook is put back as it was at the
end, since JupyterLab may autosave the edit into alice's own copy.
"""

import os
import pwd
import re
import subprocess
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.support.axe import assert_accessible
from tests.support.browser import stop_from_home
from tests.support.jobs import user_jobs, wait_no_jobs
from tests.support.pages import dir_item
from tests.support.testhub import JOB_NAME

USER = "alice"
HOME = Path(pwd.getpwnam(USER).pw_dir)
SHORT_RUN = "epochs, max_steps, log_every = 1, 200, 50"
TRAINING_TIMEOUT = 300_000  # ms; one short run takes about a minute on two busy cores
SPAWN_TIMEOUT = 600_000  # ms; a 2-GPU slice may queue behind other tests' sessions


def notebook_of(framework):
    return f"templates/{framework}/mnist-{framework}.ipynb"


@pytest.fixture
def keep_template():
    """keep_template(framework): put alice's copy of the template back as it is now."""
    saved = {}

    def _keep(framework):
        path = HOME / notebook_of(framework)
        saved[path] = path.read_bytes() if path.exists() else None

    yield _keep
    for path, content in saved.items():
        if content is None:
            continue
        st = path.stat()
        path.write_bytes(content)
        os.chown(path, st.st_uid, st.st_gid)


def open_in_file_browser(page, *names):
    """Double-click through folders and the file, as a user does."""
    for name in names:
        item = dir_item(page, name)
        expect(item).to_be_visible(timeout=30_000)
        item.dblclick()


def restart_and_run_all_with_short_parameters(page, framework, shot):
    """Shorten the run in the parameters cell, then Kernel > Restart Kernel and Run All Cells."""
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
    parameters = notebook.locator(".jp-CodeCell").first
    expect(parameters).to_contain_text("max_steps", timeout=60_000)
    # the kernel of the template is up before we restart it
    expect(page.locator(".jp-Notebook-ExecutionIndicator, .jp-KernelStatus").first).to_be_visible(
        timeout=60_000
    )
    news = page.locator(".jp-toast-button", has_text=re.compile("^No$"))
    if news.count():  # "Would you like to get notified about official Jupyter news?"
        news.first.click()
    parameters.locator(".cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.press("Enter")
    page.keyboard.type(SHORT_RUN)
    expect(parameters).to_contain_text(SHORT_RUN)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Kernel$")).click()
    page.locator(".lm-Menu-itemLabel", has_text="Restart Kernel and Run All Cells").click()
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    started = time.monotonic()
    # the outputs may be out of view (cells are virtualised): read their text
    page.wait_for_function(
        """() => [...document.querySelectorAll('.jp-OutputArea-output')]
                   .some(e => /Test Accuracy \\d/.test(e.textContent))""",
        timeout=TRAINING_TIMEOUT,
    )
    seconds = time.monotonic() - started
    # and every cell has run (the TensorBoard writer is closed at the end of training)
    page.wait_for_function(
        """() => ![...document.querySelectorAll('.jp-InputArea-prompt')]
                   .some(e => e.textContent.includes('*'))""",
        timeout=TRAINING_TIMEOUT,
    )
    line = page.locator(".jp-OutputArea-output", has_text=re.compile(r"Test Accuracy \d")).last
    line.scroll_into_view_if_needed()
    accuracy = float(re.search(r"Test Accuracy ([\d.]+)", line.text_content()).group(1))
    assert 0.1 < accuracy <= 1.0, accuracy  # better than chance on 10 classes
    shot(page, f"journey-{framework}-test-accuracy")
    print(f"\n{framework} template: Test Accuracy {accuracy:.4f} after {seconds:.0f} s")
    return accuracy


def newest_run(framework):
    runs = sorted(
        (HOME / f"templates/{framework}/logs/{framework}").iterdir(), key=os.path.getmtime
    )
    return f"{framework}/{runs[-1].name}"


@pytest.fixture
def stop_at_end(login):
    """Stops alice's server at the end, however the test ends (it starts it in the browser)."""
    yield
    client = login(USER)
    client.api("DELETE", f"/users/{USER}/server")
    try:
        client.wait_stopped(USER)
    finally:
        subprocess.run(["scancel", "-n", JOB_NAME, "-u", USER], check=False)
        wait_no_jobs(USER)


@pytest.mark.slow
def test_journey_tensorflow(page, hub, accounts, shot, keep_template, stop_at_end):
    # 1. the portal's address; log in with a demo LDAP account
    page.goto(hub)
    expect(page.locator("#username_input")).to_be_visible()
    page.fill("#username_input", USER)
    page.fill("#password_input", accounts[USER]["password"])
    shot(page, "journey-01-login")
    page.click("#login_submit")
    page.wait_for_url("**/hub/spawn**")

    # 2. the spawn page: a profile, 2 GPUs, the slice and what is free
    for _ in range(20):  # the hub's first sinfo may not be in yet
        if page.locator("table#availability").count():
            break
        page.wait_for_timeout(1000)
        page.reload()
    page.select_option("#profile", "tensorflow")
    page.select_option("#gpus", "2")
    page.fill("#hours", "2")
    expect(page.locator("#slice")).to_contain_text("2 GPUs = 16 cores + 96 GB")
    expect(page.locator("#availability")).to_contain_text(re.compile(r"\d+ of \d+"))
    expect(page.locator("#queue-note")).not_to_be_empty()
    shot(page, "journey-02-spawn")
    page.click("#spawn_form input[type=submit], #spawn_form button[type=submit]")

    # 3. the progress page, then JupyterLab with the templates and the shared data
    page.wait_for_url(f"**/hub/spawn-pending/{USER}**")
    expect(page.locator("#progress-message")).not_to_be_empty(timeout=30_000)
    shot(page, "journey-03-progress")
    assert_accessible(page, "/hub/spawn-pending")
    page.wait_for_url(re.compile(rf".*/user/{USER}/lab.*"), timeout=SPAWN_TIMEOUT)
    [(job_id, state)] = user_jobs(USER)
    assert state == "RUNNING"
    page.goto(f"{hub}/user/{USER}/lab?reset")  # the default layout: the file browser at home
    expect(dir_item(page, "templates")).to_be_visible(timeout=60_000)
    expect(dir_item(page, "shared-data")).to_be_visible()
    shot(page, "journey-04-lab")

    # 4. the TensorFlow template: Restart Kernel and Run All Cells
    keep_template("tensorflow")
    open_in_file_browser(page, "templates", "tensorflow", "mnist-tensorflow.ipynb")
    restart_and_run_all_with_short_parameters(page, "tensorflow", shot)
    run = newest_run("tensorflow")

    # 5. select logs (next to the notebook), click TensorBoard: the run in a new tab
    button = page.locator(".jp-FileBrowser-toolbar .jp-portal-tensorboard-button")
    logs = dir_item(page, "logs")
    expect(logs).to_be_visible(timeout=30_000)
    logs.click()
    expect(button).to_have_attribute("aria-disabled", "false")
    shot(page, "journey-05-logs-selected")
    with page.context.expect_page() as opened:
        button.click()
    tab = opened.value
    failed = []
    tab.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    expect(tab).to_have_url(re.compile(rf"/user/{USER}/portal/tensorboard/[0-9a-f]+/"))
    for _ in range(3):  # TensorBoard reads new event files every few seconds
        try:
            expect(tab.get_by_text(run, exact=True).first).to_be_visible(timeout=20_000)
            break
        except AssertionError:
            tab.reload()
    shot(tab, "journey-06-tensorboard")
    print("TensorBoard tab: failed requests:", failed)
    expect(tab.get_by_text(run, exact=True).first).to_be_visible(timeout=20_000)
    expect(tab.get_by_text("test/accuracy").first).to_be_visible(timeout=30_000)
    tab.wait_for_load_state("networkidle")
    tab.wait_for_timeout(1000)  # the charts draw their data
    shot(tab, "journey-06-tensorboard")
    tab.close()

    # 6. the home page: the card's Stop; the Slurm job is gone
    page.goto(hub + "/hub/home")
    expect(page.locator("#session-card")).to_contain_text(f"{job_id} (running)")
    shot(page, "journey-07-home")
    stop_from_home(page)
    deadline = time.monotonic() + 30
    while user_jobs(USER) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not user_jobs(USER), "Stop left the Slurm job"
    shot(page, "journey-08-stopped")


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "mxnet"])
def test_template_runs_in_jupyterlab(
    framework, page, browser_login, session, hub, shot, keep_template
):
    browser_login(page, USER)
    session(USER, profile="pytorch", gpus=1)
    keep_template(framework)
    page.goto(f"{hub}/user/{USER}/lab?reset")
    open_in_file_browser(page, "templates", framework, f"mnist-{framework}.ipynb")
    restart_and_run_all_with_short_parameters(page, framework, shot)
