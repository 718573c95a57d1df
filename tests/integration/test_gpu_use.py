"""The hub's samples of the sessions' GPU use (spawners/gpu_use.py), on the
test hub (a sample every GPU_SAMPLE_SECONDS): it asks alice's running
session for its GPUs through the session's own API; this cluster's GPUs
have no NVIDIA driver, so the answer is counted as no GPU data, logged
with the session's reason, and stored as none (never 0). Samples stored as
the sampler stores them say nothing while the session runs; once it has
ended, they show on her home page and in her usage report as a plain
sentence, and not in bob's."""

import json
import re
import subprocess
import time

from tests.support.jobs import user_jobs
from tests.support.testhub import GPU_SAMPLE_SECONDS, REPO, STATE

HUB_LOG = STATE / "jupyterhub.log"
HUB_PYTHON = "/opt/portal/envs/hub/bin/python"


def in_store(code):
    """Run ``code`` with ``store``, the test hub's portal store, as the hub's account."""
    script = (
        "from portal.store import ProfileStore, default_url\n"
        f"store = ProfileStore(default_url({str(STATE)!r}))\n" + code
    )
    out = subprocess.run(
        ["runuser", "-u", STATE.owner(), "--", HUB_PYTHON, "-c", script],
        capture_output=True, text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def usage_with(client, job_id, timeout=30):
    """The usage report once Slurm's accounting lists ``job_id`` (slurmdbd
    has a job's start a moment after slurmctld)."""
    deadline = time.monotonic() + timeout
    while True:
        report = client.get("api/usage").json()
        if job_id in {j["id"] for j in report["jobs"]} or time.monotonic() > deadline:
            return report
        time.sleep(1)


def usage_ended(client, job_id, timeout=30):
    """The usage report once Slurm's accounting has ``job_id``'s end."""
    deadline = time.monotonic() + timeout
    while True:
        report = client.get("api/usage").json()
        ended = [j for j in report["jobs"] if j["id"] == job_id and j["state"] != "RUNNING"]
        if ended or time.monotonic() > deadline:
            return report
        time.sleep(1)


def samples_counted(client, result):
    text = client.session.get(client.url("/hub/metrics"), timeout=30).text
    match = re.search(rf'^portal_gpu_samples_total\{{result="{result}"\}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0, text


def test_a_sessions_gpus_without_a_driver_are_no_data_and_stored_samples_advise(portal, session):
    carol = portal("carol").client  # a portal admin: read:metrics
    before, _ = samples_counted(carol, "no_gpu_data")
    alice = session("alice", profile="pytorch", gpus=2)
    [[job_id, state]] = user_jobs("alice")
    assert state == "RUNNING"

    deadline = time.monotonic() + 10 * GPU_SAMPLE_SECONDS + 20
    while time.monotonic() < deadline:
        counted, text = samples_counted(carol, "no_gpu_data")
        if counted > before:
            break
        time.sleep(1)
    assert counted > before, "the hub never asked the session for its GPUs"
    assert re.search(r'^portal_gpus_busy\{kind="session"\} 0\.0$', text, re.M), text
    log = HUB_LOG.read_text(errors="replace")
    assert re.search(
        rf"No GPU sample of job {job_id} \(alice's session\): 'No NVIDIA driver on \S+", log
    ), log[-2000:]
    stored = json.loads(
        in_store(f"import json; print(json.dumps(store.session_gpu_use(job_ids=[{job_id!r}])))")
    )[job_id]
    assert (stored["gpus"], stored["gpu_samples"], stored["gpu_busy"], stored["gpus_used"]) == (
        2, 0, None, None,
    )  # fmt: skip
    mine = usage_with(portal("alice"), job_id)
    [job] = [j for j in mine["jobs"] if j["id"] == job_id]
    assert (job["gpu_busy"], job["gpus_used"]) == (None, None)  # "no GPU data", never 0
    assert mine["advice"] == ""

    # three samples as the sampler stores them, one of the two GPUs busy at most
    in_store("".join(f"store.record_gpu_sample({job_id!r}, {busy}, {mean})\n"
                     for busy, mean in ((1, 60.0), (0, 2.0), (1, 40.0))))  # fmt: skip
    home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    assert "session-gpu-advice" not in home  # her running session: nothing said yet
    assert portal("alice").get("api/usage").json()["advice"] == ""

    alice.api("DELETE", "/users/alice/server")
    alice.wait_stopped("alice")
    # her last session alone, or with the one tests/browser/test_gpu_advice.py left
    told = (
        r"Your last (session|2 sessions) used 1 of (its|their) 2 GPUs: fewer would start sooner\."
    )
    home = alice.session.get(alice.url("/hub/home"), timeout=30)
    assert home.status_code == 200
    found = re.search(rf'id="session-gpu-advice"[^>]*>({told})<', home.text)
    assert found, home.text
    advice = found.group(1)
    mine = usage_ended(portal("alice"), job_id)
    [job] = [j for j in mine["jobs"] if j["id"] == job_id]
    assert (job["gpu_busy"], job["gpus_used"]) == (34.0, 1)
    assert mine["advice"] == advice
    page = portal("alice").get("usage").text
    assert f'id="usage-advice">{advice}<' in page
    assert portal("bob").get("api/usage").json()["advice"] == ""  # alice's sessions, not his
