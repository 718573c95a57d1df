"""The home page's session card (``spawners.card.session_info``): a pure
function of the shared poll's job and the spawner's state."""

from datetime import datetime

from portal.slurm.model import Job
from spawners import card


def test_a_queued_session_shows_when_slurm_expects_it_to_start():
    """Issue 39: the home page's card of a queued session says when squeue
    expects it to start and why it waits; a running one says neither."""

    def info(state, start, reason):
        job = Job("88", "alice", state, (), reason, start, None, "gpu:1", "gpu")
        return card.session_info("88", job, ip="", gpu_indices={}, profile=None, job_slice=None,
                                 unknown=False, log="", extend={})  # fmt: skip

    queued = info("PENDING", datetime(2026, 12, 6, 21, 30), "Resources")
    assert (queued["expected_start"], queued["reason"]) == ("2026-12-06 21:30", "Resources")
    assert info("PENDING", None, "None")["expected_start"] == "not known yet"
    assert info("PENDING", None, "None")["reason"] == ""
    assert "expected_start" not in info("RUNNING", datetime(2026, 12, 6, 21, 30), "None")
