"""The site's Slurm on the spawn page (issue 38), in the browser: both GPU
models with their free counts, only the user's own accounts, the
reservation for its group alone (and a session run in it), a QOS the
partition denies shown disabled with the reason, and a session without
GPUs; screenshots in test-artifacts/site-choices-*.png."""

import re

from playwright.sync_api import expect

from tests.support.browser import stop_from_home
from tests.support.jobs import (
    cancel_jobs_of,
    sacct_record,
    scontrol_job,
    user_jobs,
    wait_no_jobs,
)

START = "#spawn_form input[type=submit], #spawn_form button[type=submit]"


def options(page, select):
    """``[(value, text, disabled), ...]`` of the select ``select``."""
    return page.locator(f"{select} option").evaluate_all(
        "os => os.map((o) => [o.value, o.textContent, o.disabled])"
    )


def shot_listed(page, shot, name, *selects):
    """A screenshot with ``selects`` drawn as open lists (a closed select
    shows one option), then closed again."""
    unfold = "(s, on) => { s.size = on ? s.options.length : 0; }"
    for select in selects:
        page.locator(select).evaluate(unfold, True)
    shot(page, name)
    for select in selects:
        page.locator(select).evaluate(unfold, False)


def watch_errors(page):
    """The page's JavaScript errors and console errors, as they come."""
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors


def site_page(page, browser_login, name):
    browser_login(page, name)
    page.select_option("#profile", "pytorch-site")
    expect(page.locator("#partition-group")).to_be_visible()


def start_and_stop(page, hub, user, shot, name):
    """Start the form's session; return its scontrol fields; stop it."""
    page.click(START)
    try:
        page.wait_for_url(re.compile(rf".*/user/{user}/lab.*"), timeout=180_000)
        [(job_id, state)] = user_jobs(user)
        assert state == "RUNNING"
        return scontrol_job(job_id)
    finally:
        page.goto(hub + "/hub/home")
        shot(page, name)
        if page.locator("#stop").is_visible():
            stop_from_home(page)
        cancel_jobs_of([user], timeout=30)
        wait_no_jobs(user)


def test_models_and_accounts_as_the_site_has_them(page, browser_login, hub, shot):
    errors = watch_errors(page)
    site_page(page, browser_login, "carol")
    page.select_option("#partition", "gpu")  # her last session's may be another
    models = {v: text for v, text, _ in options(page, "#gpu_type")}
    assert set(models) == {"", "v100-sxm2", "v100-pcie"}
    for model in ("v100-sxm2", "v100-pcie"):
        assert re.match(rf"{model}: \d+ of 4 free, \d+ on one node, \d+ GB each$", models[model])
    accounts = [v for v, _, _ in options(page, "#account")]
    assert sorted(accounts) == ["lab-nlp", "lab-vision", "portal"]
    shot_listed(page, shot, "site-choices-models-carol", "#gpu_type", "#account")
    # a session on the PCIe model, under the account chosen: its GRES typed
    # on its partition (scontrol), and sacct records that model's TRES
    page.select_option("#partition", "pcie")
    page.select_option("#gpu_type", "v100-pcie")
    page.select_option("#account", "lab-vision")
    page.select_option("#gpus", "1")
    expect(page.locator("#queue-note")).not_to_contain_text("Cannot start")
    job = start_and_stop(page, hub, "carol", shot, "site-choices-pcie-running")
    assert (job["Partition"], job["Account"]) == ("pcie", "lab-vision"), job
    assert "gres/gpu:v100-pcie=1" in job["TRES"].split(","), job["TRES"]
    tres, account, _qos = sacct_record(job["JobId"])
    assert "gres/gpu:v100-pcie=1" in tres.split(",") and account == "lab-vision", tres

    page.context.clear_cookies()
    site_page(page, browser_login, "bob")
    accounts = [v for v, _, _ in options(page, "#account")]
    assert sorted(accounts) == ["lab-nlp", "portal"]
    shot_listed(page, shot, "site-choices-accounts-bob", "#account")
    assert errors == []


def test_reservation_for_its_group_and_a_denied_qos(page, browser_login, hub, shot):
    errors = watch_errors(page)
    site_page(page, browser_login, "bob")
    # the table of what is free: n3's GPUs are the reservation's, not bob's
    expect(page.locator('#availability tr[data-partition="sxm2"]')).to_contain_text(
        re.compile(r"\d of 6 \(and \d free in reservation vision-course\)")
    )
    page.select_option("#partition", "sxm2")
    held = [(t, off) for v, t, off in options(page, "#reservation") if v == "vision-course"]
    assert held in ([], [(held[0][0], True)]), held
    if held:
        assert "not available (Reservation vision-course is not open to you)" in held[0][0]
    shot_listed(page, shot, "site-choices-reservation-bob", "#reservation")

    page.select_option("#partition", "pcie")
    page.select_option("#account", "lab-nlp")
    [(text, disabled)] = [(t, off) for v, t, off in options(page, "#qos") if v == "nlp"]
    assert disabled and "Partition pcie denies QOS nlp" in text, text
    # the account's default is nlp too: no choice either, and the page says
    # the session cannot start (it once said "Can start now")
    [(text, disabled)] = [(t, off) for v, t, off in options(page, "#qos") if v == ""]
    assert disabled and text.startswith("The account's default (nlp): not available"), text
    expect(page.locator("#queue-note")).to_have_text(
        "Cannot start: QOS: Partition pcie denies QOS nlp."
    )
    shot_listed(page, shot, "site-choices-qos-denied-bob", "#qos")
    # the quota line names the QOS the session would run under
    page.select_option("#partition", "gpu")
    page.select_option("#account", "lab-nlp")
    expect(page.locator("#gpu-quota")).to_contain_text("QOS nlp")
    page.select_option("#account", "portal")
    expect(page.locator("#gpu-quota")).to_contain_text("QOS portal")

    page.context.clear_cookies()
    site_page(page, browser_login, "alice")
    page.select_option("#partition", "sxm2")
    [(text, disabled)] = [(t, off) for v, t, off in options(page, "#reservation")
                          if v == "vision-course"]  # fmt: skip
    assert not disabled, text
    # n3 is the reservation's: outside it, sxm2's free v100-sxm2 are n1's
    # alone (4 at most); inside, n3's 2 (her last session's may have been in it)
    page.select_option("#reservation", "")
    sxm2 = dict((v, t) for v, t, _ in options(page, "#gpu_type"))["v100-sxm2"]
    assert re.match(r"v100-sxm2: \d of 4 free", sxm2), sxm2
    page.select_option("#account", "lab-vision")
    page.select_option("#reservation", "vision-course")
    sxm2 = dict((v, t) for v, t, _ in options(page, "#gpu_type"))["v100-sxm2"]
    assert re.match(r"v100-sxm2: \d of 2 free", sxm2), sxm2
    page.select_option("#gpus", "1")
    shot_listed(page, shot, "site-choices-reservation-alice", "#reservation")
    assert errors == []
    job = start_and_stop(page, hub, "alice", shot, "site-choices-reservation-running")
    assert job["Reservation"] == "vision-course"
    assert job["NodeList"] == "n3"
    assert job["Partition"] == "sxm2"
    assert job["Account"] == "lab-vision"


def test_a_session_without_gpus(page, browser_login, hub, shot):
    errors = watch_errors(page)
    site_page(page, browser_login, "carol")
    page.select_option("#partition", "cpu")
    assert options(page, "#gpus") == [["0", "No GPU", False]]
    expect(page.locator("#cpu-group")).to_be_visible()
    page.fill("#cores", "2")
    page.fill("#mem_gb", "4")
    expect(page.locator("#slice")).to_contain_text("No GPU: 2 cores + 4 GB, partition cpu")
    shot_listed(page, shot, "site-choices-cpu", "#partition", "#gpus")
    assert errors == []
    job = start_and_stop(page, hub, "carol", shot, "site-choices-cpu-running")
    assert job["Partition"] == "cpu"
    assert "gres/gpu" not in job["TRES"], job["TRES"]
    assert "cpu=2" in job["TRES"], job["TRES"]
