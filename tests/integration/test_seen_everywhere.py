"""The site's choices seen everywhere (issue 38), on the test hub, the admin
service and the real Slurm and slurmdbd.

alice's session card names its partition and account, and her notebook
job keeps them: its JSON, its page and the job list say where it ran. A
job of hers on a GPU, named as the portal's notebook jobs, is in the usage
report under its GPU model and its account, from slurmdbd's AllocTRES and
Account, and in the CSV's columns: on the demo's untyped GRES as
"(untyped)"; on the reshaped demo (typed GRES ``gpu:v100-sxm2`` on
partition sxm2, account lab-vision) under ``v100-sxm2``.
"""

import subprocess
import time

import pytest

from tests.integration.test_notebook_jobs import as_user, home, sleeper, wait_ended
from tests.support.testhub import JOB_NAME

FOLDER = "seen-test"
NOTEBOOK_JOBS = f"{JOB_NAME}-notebook"  # the report takes the portal's jobs by name
MODEL, PARTITION, ACCOUNT = "v100-sxm2", "sxm2", "lab-vision"


def gres_by_partition():
    """``{partition: its sinfo %G}``, as ``sinfo -o '%P %G'`` lists them."""
    out = subprocess.run(
        ["sinfo", "-h", "-o", "%P %G"], capture_output=True, text=True, check=True
    ).stdout
    found = {}
    for line in out.splitlines():
        name, _, gres = line.partition(" ")
        found[name.rstrip("*")] = found.get(name.rstrip("*"), "") + "," + gres
    return found


def typed(gres):
    """Whether a partition's GRES (``,gpu:v100-sxm2:4(S:0)``) names a GPU model.

    >>> typed(",gpu:4"), typed(",gpu:v100-sxm2:4(S:0)"), typed(",gpu:4(S:0-1)")
    (False, True, False)
    """
    return any(g.split("(")[0].count(":") > 1 for g in gres.split(",") if g.startswith("gpu:"))


def run_gpu_job(user, *argv):
    """sbatch as ``user`` a 5 s job of one GPU named as the portal's notebook
    jobs, with ``argv``; its id once sacct has its end."""
    job_id = as_user(
        user, "sbatch", "--parsable", "-J", NOTEBOOK_JOBS, "-t", "2", "-o", "/dev/null",
        "--chdir", "/tmp", *argv, "--wrap", "sleep 5",
    ).stdout.strip().split(";")[0]  # fmt: skip
    deadline = time.monotonic() + 180
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        if state and state not in ("PENDING", "RUNNING", "COMPLETING"):
            break
        time.sleep(2)
    else:
        subprocess.run(["scancel", job_id], check=False)
        raise AssertionError(f"job {job_id} did not end within 180 s ({state})")
    assert state == "COMPLETED", f"job {job_id}: {state}"
    time.sleep(2)  # slurmdbd has its end
    return job_id


def reported(client, job_id):
    """The usage report's JSON, and its job ``job_id``."""
    r = client.get("api/usage")
    assert r.status_code == 200, r.text
    report = r.json()
    jobs = {j["id"]: j for j in report["jobs"]}
    assert job_id in jobs, f"job {job_id} not in the report: {sorted(jobs)}"
    return report, jobs[job_id]


def csv_column(client, user, column):
    """``user``'s row's value of ``column`` in the report's CSV."""
    r = client.get("usage", params={"format": "csv"})
    assert r.status_code == 200, r.text
    header, *lines = r.text.splitlines()
    columns = header.split(",")
    assert column in columns, columns
    rows = {line.split(",")[0]: line.split(",") for line in lines}
    return float(rows[user][columns.index(column)])


def default_account(user):
    return subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "user", user, "format=DefaultAccount"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.fixture(scope="module")
def sleepers(cluster, accounts):
    folder = home("alice") / FOLDER
    as_user("alice", "mkdir", "-p", str(folder))
    as_user("alice", "tee", str(folder / "sleeper.ipynb"), stdin=sleeper(1))
    yield folder
    subprocess.run(["scancel", "--name", NOTEBOOK_JOBS, "-u", "alice"], check=False)
    as_user("alice", "rm", "-rf", str(folder))


def test_the_card_and_the_job_pages_name_the_partition_and_account(sleepers, session, portal):
    alice, carol = portal("alice"), portal("carol")
    profile = {p["name"]: p for p in carol.get("api/profiles").json()}["pytorch"]
    client = session("alice", profile="pytorch", gpus=1)
    card = client.session.get(client.url("/hub/home"), timeout=30).text
    assert f'id="session-partition">{profile["partition"]}</td>' in card, card[:3000]
    # no account chosen: the user's default, said so
    assert 'id="session-account">your default account</td>' in card

    r = alice.send("POST", "api/jobs", json={
        "notebook": f"{FOLDER}/sleeper.ipynb", "profile": "pytorch", "gpus": 1})  # fmt: skip
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["partition"] == profile["partition"]
    assert (job["gpu_type"], job["account"], job["qos"], job["reservation"]) == ("", "", "", "")
    assert wait_ended(alice, job["id"])["state"] == "COMPLETED"
    seen = alice.get(f"api/jobs/{job['id']}").json()
    assert seen["partition"] == profile["partition"] and seen["cores"] == 0
    shown = f'data-field="partition">{profile["partition"]}</span>'
    page = alice.get(f"jobs/{job['id']}")
    assert page.status_code == 200 and shown in page.text
    assert shown in alice.get("jobs").text
    # run again: the same partition, asked for again (a job recorded before
    # issue 38 has none, and gets its profile's)
    r = alice.send("POST", f"api/jobs/{job['id']}/rerun")
    assert r.status_code == 201, r.text
    again = r.json()
    assert again["rerun_of"] == job["id"] and again["partition"] == profile["partition"]
    subprocess.run(["scancel", again["id"]], check=False)


def test_untyped_gpus_count_as_untyped_under_their_account(cluster, accounts, portal):
    shape = gres_by_partition()
    untyped = [p for p, gres in shape.items() if "gpu:" in gres and not typed(gres)]
    if not untyped:
        pytest.skip(
            f"no partition of untyped GPUs (gres gpu:N) here: sinfo -o '%P %G' lists {shape}"
        )
    job_id = run_gpu_job("alice", "-p", untyped[0], "--gres=gpu:1")
    account = default_account("alice")
    report, job = reported(portal("carol"), job_id)
    assert job["gpu_models"] == {"(untyped)": 1} and job["account"] == account, job
    assert "(untyped)" in {m["gpu_model"] for m in report["models"]}
    assert account in {a["account"] for a in report["accounts"]}
    assert csv_column(portal("carol"), "alice", f"gpu_hours_account_{account}") > 0


def test_a_typed_gpu_counts_under_its_model_and_account(cluster, accounts, portal):
    shape = gres_by_partition()
    if f"gpu:{MODEL}" not in shape.get(PARTITION, ""):
        pytest.skip(
            f"the demo cluster is not reshaped yet (helper demoshape): no typed GRES "
            f"gpu:{MODEL} on partition {PARTITION}; sinfo -o '%P %G' lists {shape}"
        )
    job_id = run_gpu_job("alice", "-p", PARTITION, f"--gres=gpu:{MODEL}:1", "-A", ACCOUNT)
    carol, alice = portal("carol"), portal("alice")
    report, job = reported(carol, job_id)
    assert job["gpu_models"] == {MODEL: 1} and job["account"] == ACCOUNT, job
    models = {m["gpu_model"]: m for m in report["models"]}
    assert models[MODEL]["gpu_hours"] > 0 and models[MODEL]["notebook_jobs"] >= 1
    assert {a["account"]: a for a in report["accounts"]}[ACCOUNT]["gpu_hours"] > 0
    users = {u["username"]: u for u in report["users"]}
    assert users["alice"]["gpu_hours_by_model"][MODEL] > 0
    assert users["alice"]["gpu_hours_by_account"][ACCOUNT] > 0
    assert csv_column(carol, "alice", f"gpu_hours_model_{MODEL}") > 0
    assert csv_column(carol, "alice", f"gpu_hours_account_{ACCOUNT}") > 0
    page = carol.get("usage").text
    assert 'id="usage-gpu_model"' in page and f'data-name="{MODEL}"' in page
    assert 'id="usage-account"' in page and f'data-name="{ACCOUNT}"' in page
    # alice sees her own job under its model too
    _, own = reported(alice, job_id)
    assert own["gpu_models"] == {MODEL: 1}
