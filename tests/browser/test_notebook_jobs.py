"""A notebook job in a real browser (issue 27): from JupyterLab's file
browser, alice creates a job of the PyTorch template with jupyter-scheduler's
dialog (the portal's profile as its environment, a slice as its compute
type, ``max_steps`` as a parameter), sees it in JupyterLab's job list and on
the portal's home page, and opens its result. Screenshots:
``jobs-01-dialog``, ``jobs-02-lab-list``, ``jobs-03-home``, ``jobs-04-result``."""

import re
import subprocess
import time
from pathlib import Path

from playwright.sync_api import expect

from tests.support import REPO
from tests.support.axe import assert_accessible
from tests.support.jobs import cancel_jobs_of
from tests.support.pages import dir_item
from tests.support.testhub import JOB_NAME

USER = "alice"
FOLDER = "nbjobs-browser"
TEMPLATE = REPO / "notebook_templates" / "pytorch" / "mnist-pytorch.ipynb"


def as_user(*argv):
    return subprocess.run(
        ["sudo", "-u", USER, "--", *argv], capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin"}, timeout=60,
    ).stdout  # fmt: skip


def choose(page, select_id, option):
    page.locator(f"#{select_id}").click()
    page.locator("li[role=option]", has_text=re.compile(rf"^{re.escape(option)}$")).click()


def test_a_job_from_jupyterlabs_dialog_to_its_result(page, browser_login, login, hub, shot):
    home = Path(as_user("sh", "-c", "echo $HOME").strip())
    as_user("mkdir", "-p", str(home / FOLDER))
    as_user("cp", str(TEMPLATE), str(home / FOLDER / TEMPLATE.name))
    browser_login(page, USER)  # before the session: the login lands on the spawn page
    alice = login(USER)
    try:
        r = alice.api("POST", f"/users/{USER}/server", json={"profile": "pytorch", "gpus": 1})
        assert r.status_code in (201, 202), r.text
        alice.wait_ready(USER, timeout=300)
        page.goto(f"{hub}/user/{USER}/lab/tree/{FOLDER}?reset")
        item = dir_item(page, TEMPLATE.name)
        expect(item).to_be_visible(timeout=60_000)
        item.click(button="right")
        page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Create Job$")).click()

        expect(page.locator("#jp-create-job-environment")).to_be_visible(timeout=30_000)
        choose(page, "jp-create-job-environment", "pytorch")
        choose(page, "jp-create-job-computeType", "1 GPU, 1 h")
        page.locator("button[title='Add new parameter']").click()
        # typed as a user types (the dialog checks each field as it changes)
        page.locator("input[name=parameter-0-name]").press_sequentially("max_steps")
        page.locator("input[name=parameter-0-value]").press_sequentially("300")
        page.keyboard.press("Tab")
        expect(page.get_by_role("button", name=re.compile("^Create$"))).to_be_enabled()
        shot(page, "jobs-01-dialog")
        page.get_by_role("button", name=re.compile("^Create$")).click()

        # JupyterLab's job list: the portal's job, named after the notebook and its Slurm job
        row = page.locator("tr, .MuiTableRow-root", has_text=re.compile(r"mnist-pytorch \(\d+\)"))
        expect(row.first).to_be_visible(timeout=60_000)
        job_id = re.search(r"mnist-pytorch \((\d+)\)", row.first.text_content()).group(1)
        shot(page, "jobs-02-lab-list")

        # the portal's home page lists it; it completes there
        deadline = time.monotonic() + 400
        while True:
            page.goto(f"{hub}/hub/home")
            state = page.locator(f'.home-job[data-job="{job_id}"] .home-job-state')
            expect(state).to_be_visible(timeout=30_000)
            if state.text_content().strip() in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
                break
            assert time.monotonic() < deadline, f"job {job_id} still {state.text_content()}"
            time.sleep(3)
        expect(state).to_have_text("COMPLETED")
        shot(page, "jobs-03-home")
        assert_accessible(page, "/hub/home")

        # its result: the executed notebook, read-only, on the portal's own address
        page.locator(f'.home-job[data-job="{job_id}"] .home-job-result').click()
        expect(page.locator("body")).to_contain_text("Test Accuracy", timeout=60_000)
        assert f"/services/portal/jobs/{job_id}/result" in page.url
        accuracy = float(re.search(r"Test Accuracy ([\d.]+)", page.content()).group(1))
        assert accuracy >= 0.80, accuracy
        shot(page, "jobs-04-result")
        assert_accessible(page, "/services/portal/jobs/ID/result")
        page.goto(f"{hub}/services/portal/jobs/{job_id}")
        expect(page.locator("h1 .job-state")).to_have_text("COMPLETED")
        assert_accessible(page, "/services/portal/jobs/ID")
    finally:
        alice.api("DELETE", f"/users/{USER}/server")
        subprocess.run(["scancel", "-n", f"{JOB_NAME}-notebook", "-u", USER], check=False)
        cancel_jobs_of([USER], timeout=60)
        as_user("rm", "-rf", str(home / FOLDER))
