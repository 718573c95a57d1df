"""The QOS's GPUs per user, against the real Slurm and hub (issue 26): alice
holds GPUs in a batch job of her own (sbatch from a shell, QOS portal); the
spawn page says how many she holds and may still ask for, a session past
the QOS's limit is refused at once with that message and nothing is
submitted, and one within it starts."""

import html
import re
import subprocess
import time
import uuid

import pytest

from portal import settings as portal_settings
from spawners.spawner_settings import PortalSpawnerSettings
from tests.support.jobs import squeue
from tests.support.testhub import JOB_NAME

LIMIT = portal_settings.load()["cluster"]["qos_max_gpus_per_user"]
HELD_NAME = f"portal-held-{uuid.uuid4().hex[:8]}"
# A spawn page shows what a query at most this old saw (sinfo and the usage)
PAGE_AGE = PortalSpawnerSettings.form_sinfo_age.default_value


def hold_gpus(user, gpus):
    """A batch job of ``user`` on ``gpus`` GPUs of one node, running."""
    done = subprocess.run(
        ["sudo", "-u", user, "sbatch", "--parsable", "-J", HELD_NAME, "--chdir=/tmp",
         "--output=/dev/null", "-p", "gpu", f"--gres=gpu:{gpus}", "-c", "1", "--mem=1G",
         "-t", "10", "--wrap", "sleep 600"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    deadline = time.monotonic() + 60
    while squeue("-j", job_id, "-o", "%T") != [["RUNNING"]]:
        assert time.monotonic() < deadline, f"alice's job {job_id} did not start"
        time.sleep(0.5)
    return job_id


@pytest.fixture
def held(cluster):
    if LIMIT < 2:
        pytest.skip("[cluster] qos_max_gpus_per_user of 2 or more needed")
    yield hold_gpus("alice", LIMIT - 1)
    subprocess.run(["scancel", "-n", HELD_NAME], check=False)


def test_a_session_past_the_qos_gpus_per_user_is_refused_at_once(login, session, held):
    alice = login("alice")
    time.sleep(PAGE_AGE)  # the page's read of the usage begins after the job runs
    page = alice.session.get(alice.url("/hub/spawn/alice"), timeout=30).text
    line = html.unescape(re.search(r'id="gpu-quota" role="status">([^<]*)</p>', page).group(1))
    assert line == (
        f"You hold {LIMIT - 1} of the {LIMIT} GPUs that QOS portal lets you use at once: "
        "you may ask for 1 more."
    )

    r = alice.api("POST", "/users/alice/server", json={"profile": "pytorch", "gpus": 2})
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert message.startswith("2 GPUs is more than you may ask for now"), message
    assert f"you hold {LIMIT - 1} of the {LIMIT} GPUs that QOS portal" in message
    time.sleep(0.2)
    assert not squeue("-n", JOB_NAME, "-u", "alice", "-o", "%i")
    assert not alice.user_model("alice")["servers"]

    # within it: the session starts
    session("alice", profile="pytorch", gpus=1)
    assert squeue("-n", JOB_NAME, "-u", "alice", "-o", "%T") == [["RUNNING"]]
