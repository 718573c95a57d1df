"""The health check's parts that read files (portal/health.py), without the
cluster: the shared poll's snapshot is written here. The real parts are
checked by tests/reliability/test_health.py."""

from datetime import datetime, timedelta

from portal import health
from portal.slurm.model import Node, Partition, snapshot_to_json

NOW = datetime(2026, 11, 27, 10, 0, 0)


def settings(tmp_path):
    return {
        "hub": {"state_dir": str(tmp_path)},
        "portal": {"cluster_snapshot": str(tmp_path / "cluster.json")},
        "slurm": {"cluster_interval": 30.0, "poll_interval": 10.0},
    }


def node(name, state, gpus=4, used=0):
    return Node(name, ("gpu",), gpus, used, 32, 0, 200_000, 0, state)


def write(tmp_path, nodes, age=5, jobs_error=""):
    partitions = {"gpu": Partition("gpu", tuple(nodes), "1-00:00:00")}
    text = snapshot_to_json(partitions, {}, jobs_error=jobs_error, now=NOW - timedelta(seconds=age))
    (tmp_path / "cluster.json").write_text(text)


def test_a_fresh_poll_with_nodes_that_run_is_up_and_counts_free_gpus(tmp_path):
    write(tmp_path, [node("n1", "mixed", used=3), node("n2", "idle")])
    poll, nodes, free = health.poll_parts(settings(tmp_path), now=NOW)
    assert poll.ok and poll.detail == "5 s ago (at most 90)"
    assert nodes.ok and nodes.detail == "n1 mixed, n2 idle"
    assert free.ok and not free.critical and free.detail == "gpu 5 of 8"


def test_a_stale_poll_or_one_whose_squeue_fails_is_down(tmp_path):
    write(tmp_path, [node("n1", "idle")], age=200)
    assert not health.poll_parts(settings(tmp_path), now=NOW)[0].ok
    write(tmp_path, [node("n1", "idle")], jobs_error="squeue failed: no answer")
    poll = health.poll_parts(settings(tmp_path), now=NOW)[0]
    assert not poll.ok and "squeue failed" in poll.detail


def test_a_partition_no_node_of_which_can_run_anything_is_down(tmp_path):
    write(tmp_path, [node("n1", "down*"), node("n2", "drained")])
    _, nodes, free = health.poll_parts(settings(tmp_path), now=NOW)
    assert not nodes.ok and "no node can run partition gpu" in nodes.detail
    assert free.detail == "gpu 0 of 8"


def test_no_snapshot_at_all_is_said(tmp_path):
    (poll,) = health.poll_parts(settings(tmp_path), now=NOW)
    assert not poll.ok and "cluster.json" in poll.detail


def test_free_disk_under_a_gigabyte_is_down(tmp_path, monkeypatch):
    assert health.disk(settings(tmp_path)).ok
    monkeypatch.setattr(health, "MIN_FREE_BYTES", 2**62)
    assert not health.disk(settings(tmp_path)).ok


def test_a_part_that_raises_is_down_with_why_never_a_500():
    import asyncio

    async def missing(settings):
        raise FileNotFoundError("scontrol")

    part = asyncio.run(health.guarded("slurmctld", missing, {}))
    assert not part.ok and part.name == "slurmctld" and "FileNotFoundError" in part.detail
