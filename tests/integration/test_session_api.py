"""The session's time left, from its own server, in a real session.

alice's 1-hour session asks Slurm (squeue, on its node) when its job ends:
``GET /user/alice/portal/api/session`` answers the job's id, Slurm's end, the
seconds left and the minutes before the end that JupyterLab warns. When Slurm
moves the end (an extension), the answer follows. bob, logged in to the same
hub, gets none of it.
"""

import subprocess
import time
from datetime import datetime, timedelta

import requests

from portal.session.jobend import FRESH_AGE
from tests.support.hubsettings import DOMAIN
from tests.support.jobs import scontrol_job, user_jobs

USER = "alice"


def slurm_end(job_id):
    """The job's EndTime as scontrol prints it (this host's local time), aware."""
    return datetime.fromisoformat(scontrol_job(job_id)["EndTime"]).astimezone()


def test_time_left_comes_from_slurm(session, login):
    alice = session(USER, profile="pytorch", gpus=1, hours=1)
    ((job_id, state),) = user_jobs(USER)
    assert state == "RUNNING"
    base = alice.user_model(USER)["servers"][""]["url"]
    # open the server as a browser does: the hub's OAuth sets its cookie
    assert alice.session.get(alice.url(base + "lab"), timeout=60).status_code == 200
    api = alice.url(base + "portal/api/session")

    r = alice.session.get(api, timeout=30)
    assert r.status_code == 200, r.text
    model = r.json()
    assert model["job_id"] == job_id
    assert model["warn_minutes"] == 15  # deploy/portal.toml [slurm] warn_minutes
    # on the hub's host, which is not the session's when sessions have origins of their own
    assert model["extend_url"] == (alice.base if DOMAIN else "") + "/hub/home"
    assert "reason" not in model, model
    end = datetime.fromisoformat(model["end"])
    assert end.tzinfo is not None, model["end"]
    assert abs(end - slurm_end(job_id)) <= timedelta(minutes=1), (model, slurm_end(job_id))
    assert 3600 - 300 < model["seconds_left"] <= 3600, model

    # Slurm moves the end (as an extension does): the answers take the end
    # read at most 20 s ago, for every tab; a fresh one (a tab opened or
    # shown again) one read at most FRESH_AGE s ago
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=02:00:00"], check=True)
    assert alice.session.get(api, timeout=30).json()["end"] == model["end"]
    time.sleep(FRESH_AGE)
    moved = alice.session.get(api, params={"fresh": "1"}, timeout=30).json()
    assert abs(datetime.fromisoformat(moved["end"]) - slurm_end(job_id)) <= timedelta(minutes=1)
    assert moved["seconds_left"] - model["seconds_left"] > 3500, (model, moved)

    # bob: a redirect to a login or a refusal, never alice's job
    bob = login("bob")
    r = bob.session.get(api, allow_redirects=False, timeout=30)
    assert r.status_code in (302, 403), r.status_code
    r = bob.session.get(api, timeout=60)
    assert r.status_code in (403, 404), r.status_code
    assert '"job_id"' not in r.text and model["end"] not in r.text
    # no login at all: the same
    r = requests.get(api, allow_redirects=False, timeout=30)
    assert r.status_code in (302, 403) and '"job_id"' not in r.text
