"""Notebooks run as Slurm jobs (issue 27), on the test hub and the real Slurm.

alice hands the PyTorch template to Slurm through the admin service's API
with ``{"max_steps": 300}``: 201 with the Slurm job id, one job of hers
(the notebook jobs' name, her account), which completes; the executed
notebook beside the input holds the test accuracy, and the service renders
it read-only, sanitized, under a CSP sandbox. A sweep over three values is
one array job of three tasks and three outputs. bob gets 404 for all of
hers. Each bad request (a path outside the home, a link out of it, no
notebook, a parameter not in the cell, a value of the wrong type, a sweep
over ``max_array``) is refused with its message and submits nothing. A job
keeps running across a restart of the hub, and completes.
"""

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests

from spawners.job_notices import CHECK_SECONDS as NOTICES_EVERY
from tests.integration.test_notices import body_of, wait_for_subject
from tests.support import REPO
from tests.support.hubsettings import CA_CERT
from tests.support.jobs import occupy_nodes, release_nodes
from tests.support.testhub import JOB_NAME, deploy

NOTEBOOK_JOBS = f"{JOB_NAME}-notebook"
TEMPLATE = REPO / "notebook_templates" / "pytorch" / "mnist-pytorch.ipynb"
FOLDER = "nbjobs-test"  # in the user's home


def as_user(user, *argv, stdin=None):
    return subprocess.run(
        ["sudo", "-u", user, "--", *argv], input=stdin, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin"}, check=True, timeout=60,
    )  # fmt: skip


def home(user):
    return Path(as_user(user, "sh", "-c", "echo $HOME").stdout.strip())


def sleeper(seconds_default):
    """A notebook with a parameters cell (``seconds``, ``label``) that sleeps."""
    cells = [
        {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "execution_count": None,
         "outputs": [], "source": f"seconds = {seconds_default}\nlabel = 'x'"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "import time\ntime.sleep(seconds)\nprint('slept', seconds, label)"},
        {"cell_type": "markdown", "metadata": {}, "source": "# Slept well"},
        {"cell_type": "markdown", "metadata": {},
         "source": "<script>alert('md')</script><img src=x onerror=alert(1)> **bold**"},
    ]  # fmt: skip
    return json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "cells": cells,
        "metadata": {"kernelspec": {"name": "pytorch", "language": "python",
                                    "display_name": "PyTorch"}},
    })  # fmt: skip


def where():
    """A notebook that prints the image it runs in (its /etc/portal-image)."""
    cells = [
        {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "execution_count": None,
         "outputs": [], "source": "label = 'x'"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "import os\nprint(label, open('/etc/portal-image').read() "
                   "if os.path.exists('/etc/portal-image') else 'no image')"},
    ]  # fmt: skip
    return json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "cells": cells,
        "metadata": {"kernelspec": {"name": "pytorch", "language": "python",
                                    "display_name": "PyTorch"}},
    })  # fmt: skip


@pytest.fixture(scope="module")
def notebooks(cluster, accounts):
    """alice's test folder: the PyTorch template, a sleeper, a link out of
    her home, a file that is not a notebook. Removed at the end."""
    folder = home("alice") / FOLDER
    as_user("alice", "rm", "-rf", str(folder))
    as_user("alice", "mkdir", "-p", str(folder))
    as_user("alice", "cp", str(TEMPLATE), str(folder / "mnist-pytorch.ipynb"))
    as_user("alice", "tee", str(folder / "sleeper.ipynb"), stdin=sleeper(1))
    as_user("alice", "tee", str(folder / "notes.ipynb"), stdin="not a notebook\n")
    as_user("alice", "tee", str(folder / "where.ipynb"), stdin=where())
    as_user("alice", "ln", "-sf", "/usr/share/doc/python3/copyright", str(folder / "out.ipynb"))
    yield folder
    subprocess.run(["scancel", "--name", NOTEBOOK_JOBS], check=False)
    as_user("alice", "rm", "-rf", str(folder))


def jobs_of(user):
    """The Slurm job ids of ``user``'s notebook jobs: those squeue lists (at
    once) and those sacct has recorded (a moment later)."""
    listed = subprocess.run(
        ["squeue", "-h", "-u", user, "-n", NOTEBOOK_JOBS, "-o", "%i"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    recorded = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-u", user, "--name", NOTEBOOK_JOBS, "-o", "JobID",
         "-S", "now-1days"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return sorted({line.split("_")[0] for line in (listed + recorded).split()})


def wait_ended(portal, job_id, timeout=400):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = portal.get(f"api/jobs/{job_id}")
        assert r.status_code == 200, r.text
        job = r.json()
        if job["ended"]:
            return job
        time.sleep(2)
    raise AssertionError(f"job {job_id} did not end within {timeout} s: {job}")


def submit(portal, **body):
    """POST api/jobs with ``body`` as Python's json writes it (NaN included)."""
    return portal.send("POST", "api/jobs", data=json.dumps(body))


def test_a_template_runs_as_a_job_and_only_its_owner_sees_it(notebooks, portal):
    alice, bob = portal("alice"), portal("bob")
    notebook = f"{FOLDER}/mnist-pytorch.ipynb"
    r = submit(alice, notebook=notebook, profile="pytorch", gpus=1, hours=1,
               parameters={"max_steps": 300})  # fmt: skip
    assert r.status_code == 201, r.text
    job = r.json()
    job_id = job["id"]
    assert re.fullmatch(r"\d+", job_id) and job["user"] == "alice"
    fields = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                            text=True).stdout  # fmt: skip
    # a Slurm job of hers, with the notebook jobs' name
    assert f"JobName={NOTEBOOK_JOBS} " in fields and "UserId=alice(" in fields, fields
    assert "Requeue=0" in fields and "TRES=cpu=8,mem=48G" in fields, fields
    # nothing of the parameters on a command line of the job's
    assert "max_steps" not in fields

    done = wait_ended(alice, job_id)
    assert done["state"] == "COMPLETED", done
    output = done["output"]
    assert output == f"{FOLDER}/jobs/mnist-pytorch-{job_id}.ipynb"
    executed = json.loads((home("alice") / output).read_text())
    text = "".join(
        "".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", [])
    )
    accuracy = float(re.search(r"Test Accuracy ([0-9.]+)", text).group(1))
    assert accuracy >= 0.80, text[-500:]
    assert (home("alice") / done["html"]).stat().st_size > 10000
    assert "portal: done" in (home("alice") / done["log"]).read_text()

    page = alice.get(f"jobs/{job_id}/result")
    assert page.status_code == 200, page.text[:300]
    assert "sandbox" in page.headers["Content-Security-Policy"]
    assert f"Test Accuracy {accuracy}" in page.text
    listed = alice.get("jobs")
    assert listed.status_code == 200 and f'data-job="{job_id}"' in listed.text

    # bob: 404 for her job, its page, its result, its log, its cancel and rerun
    for path in (f"api/jobs/{job_id}", f"jobs/{job_id}", f"jobs/{job_id}/result",
                 f"jobs/{job_id}/result?log=1"):  # fmt: skip
        r = bob.get(path)
        assert r.status_code == 404, (path, r.status_code)
        assert "Test Accuracy" not in r.text and notebook not in r.text
    for action in ("cancel", "rerun"):
        assert bob.send("POST", f"api/jobs/{job_id}/{action}").status_code == 404
    assert bob.get("api/jobs").json() == []
    # no login: nothing
    r = requests.get(alice.url(f"api/jobs/{job_id}"), allow_redirects=False, timeout=30,
                     verify=alice.client.session.verify)  # fmt: skip
    assert r.status_code == 401 and "alice" not in r.text and r.json()["field"] is None


def test_the_result_is_sanitized_and_runs_no_script(notebooks, portal):
    alice = portal("alice")
    r = submit(alice, notebook=f"{FOLDER}/sleeper.ipynb", profile="pytorch",
               parameters={"seconds": 0, "label": "<script>alert(2)</script>"})  # fmt: skip
    assert r.status_code == 201, r.text
    done = wait_ended(alice, r.json()["id"])
    assert done["state"] == "COMPLETED", done
    page = alice.get(f"jobs/{done['id']}/result")
    assert page.status_code == 200
    assert "<script>alert('md')" not in page.text and "<img src=x onerror" not in page.text
    assert "<script>alert(2)" not in page.text  # the output is text, escaped
    assert re.search(r"<h1[^>]*>Slept well", page.text)  # plain markdown is rendered


def test_a_sweep_is_one_array_job_with_an_output_per_task(notebooks, portal):
    alice = portal("alice")
    r = submit(alice, notebook=f"{FOLDER}/sleeper.ipynb", profile="pytorch",
               parameters={"label": "swept"}, sweep={"seconds": [1, 2, 3]})  # fmt: skip
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True
    ).stdout  # one line per task of the array, pending ones in one line until they start
    assert f"ArrayJobId={job_id} ArrayTaskId=" in shown, shown
    assert set(re.findall(r"ArrayTaskId=(\S+)", shown)) <= {"0", "1", "2", "0-2", "1-2"}
    done = wait_ended(alice, job_id)
    assert done["state"] == "COMPLETED", done
    assert [t["parameters"] for t in done["task_states"]] == [
        {"label": "swept", "seconds": s} for s in (1, 2, 3)
    ]
    tasks = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State"], capture_output=True,
        text=True,
    ).stdout.split()  # fmt: skip
    assert sorted(tasks) == [f"{job_id}_{i}|COMPLETED" for i in range(3)], tasks
    for task in done["task_states"]:
        executed = (home("alice") / task["output"]).read_text()
        assert f"slept {task['parameters']['seconds']} swept" in executed
    assert alice.get(f"jobs/{job_id}/result?task=2").status_code == 200


@pytest.mark.parametrize(
    "body, field, message",
    [
        ({"notebook": "/etc/hostname.ipynb"}, "notebook", "is not inside your home"),
        ({"notebook": f"{FOLDER}/../../bob/x.ipynb"}, "notebook", "may not contain '..'"),
        ({"notebook": f"{FOLDER}/out.ipynb"}, "notebook", "leads outside your home"),
        ({"notebook": f"{FOLDER}/notes.ipynb"}, "notebook", "is not a notebook"),
        ({"notebook": f"{FOLDER}/run.py"}, "notebook", "is not a notebook"),
        ({"parameters": {"steps": 3}}, "parameters", "is not in the notebook's parameters cell"),
        ({"parameters": {"seconds": "3"}}, "parameters", "must be of type int"),
        ({"sweep": {"seconds": list(range(17))}}, "sweep", "max_array"),
        ({"sweep": {"seconds": [1, 2, 3, 4, 5], "label": list("abcd")}}, "sweep", "max_array"),
        ({"gpus": 99}, "gpus", "GPUs must be"),
        ({"profile": "vision"}, "profile", "is not available to you"),
        ({"parameters": {"seconds": float("nan")}}, None, "not valid JSON"),
        ({"notebook": f"{FOLDER}/{{x}}.ipynb"}, "notebook", "braces"),
    ],
)
def test_a_bad_request_is_refused_and_submits_nothing(notebooks, portal, body, field, message):
    bob = portal("bob")  # not in the vision group
    as_user("bob", "mkdir", "-p", str(home("bob") / FOLDER))
    as_user("bob", "tee", str(home("bob") / FOLDER / "sleeper.ipynb"), stdin=sleeper(1))
    as_user("bob", "tee", str(home("bob") / FOLDER / "notes.ipynb"), stdin="not a notebook\n")
    as_user("bob", "ln", "-sf", "/usr/share/doc/python3/copyright",
            str(home("bob") / FOLDER / "out.ipynb"))  # fmt: skip
    before, in_slurm = bob.get("api/jobs").json(), jobs_of("bob")
    request = {"notebook": f"{FOLDER}/sleeper.ipynb", "profile": "pytorch", **body}
    r = submit(bob, **request)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field and message in r.json()["error"], r.json()
    assert bob.get("api/jobs").json() == before
    assert jobs_of("bob") == in_slurm


def test_a_job_runs_on_across_a_hub_restart_and_completes(notebooks, portal, hub_env):
    alice = portal("alice")
    r = submit(alice, notebook=f"{FOLDER}/sleeper.ipynb", profile="pytorch",
               parameters={"seconds": 25, "label": "restart"})  # fmt: skip
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    deadline = time.monotonic() + 120
    while alice.get(f"api/jobs/{job_id}").json()["state"] != "RUNNING":
        assert time.monotonic() < deadline, "the job never ran"
        time.sleep(1)
    # its GPU use, from its runner's samples: this cluster's nodes have no
    # NVIDIA driver, which is said, never a 0 %
    deadline = time.monotonic() + 20
    while "gpus" not in (use := alice.get(f"api/jobs/{job_id}").json()["task_states"][0].get(
            "gpu_use", {})) or "no sample yet" in use.get("reason", ""):  # fmt: skip
        assert time.monotonic() < deadline, use
        time.sleep(1)
    assert use["gpus"] == [] and "NVIDIA" in use["reason"], use
    assert "no GPU data (No NVIDIA driver" in alice.get(f"jobs/{job_id}").text
    result = deploy("hub.sh", "restart", env=hub_env, check=False)  # what make restart-hub runs
    assert result.returncode == 0, result.stderr
    alice = portal("alice")  # the new service's login
    done = wait_ended(alice, job_id)
    assert done["state"] == "COMPLETED", done
    assert "slept 25 restart" in (home("alice") / done["output"]).read_text()


def test_jupyterlabs_scheduler_submits_a_job_that_outlives_the_session(notebooks, session, portal):
    """jupyter-scheduler's REST API in alice's session (what its dialog and
    job list call), with the portal as its backend: her profiles are its
    environments, their slices its compute types; a job it creates is a
    portal job of hers, which completes after the session is stopped."""
    service = portal("alice")
    alice = session("alice", profile="pytorch", gpus=1, hours=1)
    token = alice.api("POST", "/users/alice/tokens", json={"note": "scheduler"}).json()["token"]
    server = alice.url("/user/alice/")
    http = requests.Session()
    http.verify, http.headers["Authorization"] = CA_CERT, f"token {token}"
    envs = http.get(server + "scheduler/runtime_environments", timeout=60).json()
    pytorch = next(e for e in envs if e["name"] == "pytorch")
    assert "1 GPU, 8 h" in pytorch["compute_types"] and "4 GPUs, 24 h" in pytorch["compute_types"]
    assert "vision" in [e["name"] for e in envs]  # alice is in the vision group

    body = {"input_uri": f"{FOLDER}/mnist-pytorch.ipynb", "runtime_environment_name": "pytorch",
            "compute_type": "1 GPU, 1 h", "name": "from the dialog",
            "output_formats": ["ipynb", "html"]}  # fmt: skip
    refused = http.post(server + "scheduler/jobs", timeout=60,
                        json={**body, "parameters": {"max_steps": "many"}})  # fmt: skip
    assert refused.status_code == 500 and "must be of type int" in refused.text, refused.text
    refused = http.post(server + "scheduler/job_definitions", timeout=60,
                        json={**body, "schedule": "0 * * * *", "timezone": "UTC"})  # fmt: skip
    assert refused.status_code == 500 and "run once, now" in refused.text, refused.text

    r = http.post(server + "scheduler/jobs", timeout=60,
                  json={**body, "parameters": {"max_steps": "300"}})  # fmt: skip
    assert r.status_code == 200, r.text
    job_id = r.json()["job_id"]
    listed = http.get(server + "scheduler/jobs", timeout=60).json()["jobs"]
    job = next(j for j in listed if j["job_id"] == job_id)
    assert job["runtime_environment_name"] == "pytorch" and job["compute_type"] == "1 GPU, 1 h"
    assert job["parameters"] == {"max_steps": "300"}

    # the session ends; the job is Slurm's, and completes
    alice.api("DELETE", "/users/alice/server")
    alice.wait_stopped("alice")
    done = wait_ended(service, job_id)
    assert done["state"] == "COMPLETED" and done["hours"] == 1, done
    assert done["parameters"] == {"max_steps": 300}  # typed from the parameters cell
    assert "Test Accuracy" in (home("alice") / done["output"]).read_text()


def test_a_job_that_queued_tells_its_start_and_end_by_mail_and_on_the_pages(
    notebooks, portal, login, mail_server
):
    """Every GPU held by root's jobs: alice's job (``"notify": true``) queues;
    freed, it starts and completes, and her mailbox and the hub's pages'
    notices hold both, naming the job."""
    alice, client = portal("alice"), login("alice")
    occupy_nodes(leave_free=0)
    try:
        # it runs longer than the notices' interval: they see it running
        r = submit(alice, notebook=f"{FOLDER}/sleeper.ipynb", profile="pytorch", notify=True,
                   parameters={"seconds": int(NOTICES_EVERY) + 5, "label": "told"})  # fmt: skip
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        time.sleep(NOTICES_EVERY + 5)  # the notices see it queued
        assert alice.get(f"api/jobs/{job_id}").json()["state"] == "PENDING"
    finally:
        release_nodes()
    assert wait_ended(alice, job_id)["state"] == "COMPLETED"
    wait_for_subject(f"has started (Slurm job {job_id})")
    (subject,) = wait_for_subject(f"has ended (Slurm job {job_id})")
    assert "Your notebook job nbjobs-test/sleeper.ipynb" in subject
    assert "your notebook job has ended: COMPLETED after" in body_of(f"ended (Slurm job {job_id})")
    events = client.session.get(client.url("/hub/portal/notices?since=0"), timeout=30).json()
    kinds = [e["kind"] for e in events["events"] if e["job_id"] == job_id]
    assert kinds == ["started", "ended"], events


def test_a_profile_with_a_site_image_runs_the_job_in_the_image(notebooks, portal):
    alice = portal("alice")
    r = submit(alice, notebook=f"{FOLDER}/where.ipynb", profile="pytorch-image",
               parameters={"label": "inside"})  # fmt: skip
    assert r.status_code == 201, r.text
    done = wait_ended(alice, r.json()["id"])
    assert done["state"] == "COMPLETED", done
    assert "inside NAME=pytorch" in (home("alice") / done["output"]).read_text()
    log = (home("alice") / done["log"]).read_text()
    assert "portal: image /var/lib/portal/images/pytorch (ch-run)" in log
    # the same notebook with the environment's profile runs outside any image
    r = submit(alice, notebook=f"{FOLDER}/where.ipynb", profile="pytorch")
    done = wait_ended(alice, r.json()["id"])
    assert "x no image" in (home("alice") / done["output"]).read_text()


def test_cancelling_a_job_slurmctld_no_longer_knows_is_answered_not_an_error(portal, login):
    """An ended job leaves slurmctld after MinJobAge (300 s here) and the
    store keeps it: the real scancel then says "Invalid job id", which the
    cancel answered 503 (found by fuzzing). A job id slurmctld never had is
    the same answer, without the wait."""
    from portal import settings
    from portal.store import ProfileStore, store_url
    from tests.support.testhub import SETTINGS_FILE

    store = ProfileStore(store_url(settings.load(SETTINGS_FILE)))
    forgotten = subprocess.run(
        ["scancel", "--name", NOTEBOOK_JOBS, "999999"], capture_output=True, text=True
    )
    assert "Invalid job id" in forgotten.stderr, forgotten.stderr  # what sudo's scancel says too
    store.record_notebook_job(
        job_id="999999", user="alice", notebook=f"{FOLDER}/sleeper.ipynb", profile="pytorch",
        gpus=1, nodes=1, hours=1, parameters={}, sweep={}, tasks=[{}], kernel="pytorch",
        submitted_by="alice", rerun_of=None, notify=False,
    )  # fmt: skip
    r = portal("alice").send("POST", "api/jobs/999999/cancel")
    assert r.status_code == 200 and r.json()["id"] == "999999", r.text
    r = login("alice").api("POST", "/portal/jobs/999999/cancel")  # the hub's API, the same
    assert r.status_code == 200 and r.json()["id"] == "999999", r.text
