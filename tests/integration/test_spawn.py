"""A session is a real Slurm job, submitted as the LDAP user."""

import pwd
import subprocess
import time

from tests.support.jobs import scontrol_job, squeue, user_jobs
from tests.support.testhub import JOB_NAME


def job_of(user):
    rows = user_jobs(user)
    assert len(rows) == 1, f"expected one job of {user}, got {rows}"
    return rows[0][0]


def test_spawn_runs_a_slurm_job_as_the_user_and_stop_ends_it(login):
    alice = login("alice")
    # a profile alone: its defaults (1 GPU, 8 h), whatever alice asked for last
    r = alice.api("POST", "/users/alice/server", json={"profile": "pytorch"})
    assert r.status_code in (201, 202), r.text
    try:
        model = alice.wait_ready("alice")
        job_id = job_of("alice")
        job = scontrol_job(job_id)
        uid = pwd.getpwnam("alice").pw_uid
        assert job["UserId"] == f"alice({uid})"
        assert uid >= 20000  # the LDAP uidNumber, not a local account
        tres = dict(item.split("=", 1) for item in job["TRES"].split(","))
        assert tres["gres/gpu"] == "1"
        assert tres["cpu"] == "8"
        assert tres["mem"] == "48G"
        assert tres["node"] == "1"
        assert job["TimeLimit"] == "08:00:00"
        assert job["Partition"] == "gpu"

        # the server answers through the proxy, behind the hub's login
        url = alice.url(model["servers"][""]["url"] + "lab")
        page = alice.session.get(url, timeout=30)
        assert page.status_code == 200
        assert "JupyterLab" in page.text
    finally:
        r = alice.api("DELETE", "/users/alice/server")
        assert r.status_code in (202, 204), r.text
    alice.wait_stopped("alice")
    deadline = time.monotonic() + 30
    while squeue("-n", JOB_NAME, "-u", "alice", "-o", "%i %T") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not squeue("-n", JOB_NAME, "-u", "alice", "-o", "%i %T"), "the Slurm job outlived Stop"
    log = subprocess.run(
        ["cat", f"/home/alice/.portal/logs/jupyter-{job_id}.log"], capture_output=True, text=True
    )
    assert f"job {job_id} on" in log.stdout
