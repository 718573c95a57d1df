import json
import time
from datetime import datetime

import pytest

from portal.slurm.commands import resource_options
from portal.slurm.model import Node, snapshot_from_json, snapshot_to_json
from portal.slurm.parse import gpu_count, parse_sinfo, parse_squeue, parse_will_run
from spawners.poller import SlurmPoller, Snapshot

SQUEUE = """\
12|alice|RUNNING|vm|None|2026-11-22T20:00:00|2026-11-23T04:00:00|gres:gpu:2|gpu|8:00:00
13|bob|PENDING||Resources|2026-11-23T04:00:00|2026-11-23T12:00:00|gres:gpu:4|gpu|8:00:00
garbage line
"""


def test_parse_squeue():
    jobs = parse_squeue(SQUEUE)
    assert set(jobs) == {"12", "13"}
    assert jobs["12"].running and jobs["12"].node == "vm" and jobs["12"].nodes == ("vm",)
    assert jobs["12"].end == datetime(2026, 11, 23, 4) and jobs["12"].time_limit == 480
    assert jobs["13"].pending and jobs["13"].reason == "Resources" and jobs["13"].node == ""
    assert jobs["13"].start == datetime(2026, 11, 23, 4)
    assert jobs["13"].nodes == ()


def test_a_job_over_several_nodes_lists_them_all_and_runs_jupyter_on_the_first():
    line = "15|alice|RUNNING|n[1-2]|None|2026-11-22T20:00:00|N/A|gres:gpu:1|gpu|2:00:00"
    job = parse_squeue(line)["15"]
    assert job.nodes == ("n1", "n2") and job.node == "n1"
    odd = parse_squeue(line.replace("n[1-2]", "n[1-x]"))["15"]
    assert odd.nodes == ("n[1-x]",)  # listed all the same


def test_a_snapshot_keeps_the_nodes_and_reads_one_of_an_older_hub():
    jobs = parse_squeue(SQUEUE + "15|alice|RUNNING|n[1-2]|None|N/A|N/A|gres:gpu:1|gpu|2:00:00\n")
    _, _, back, _ = snapshot_from_json(snapshot_to_json({}, jobs))
    assert back == jobs
    old = json.loads(snapshot_to_json({}, jobs))
    for job in old["jobs"]:
        job["node"] = job.pop("nodes")[0] if job["nodes"] else ""
    _, _, back, _ = snapshot_from_json(json.dumps(old))
    assert back["12"].nodes == ("vm",) and back["13"].nodes == () and back["15"].nodes == ("n1",)


def test_a_job_is_gone_when_unlisted_or_completing_in_a_later_successful_query():
    poller = SlurmPoller("unit-test")
    listed = SQUEUE + "14|carol|COMPLETING|vm|None|N/A|N/A|gres:gpu:1|gpu|2:00:00\n"
    poller.snapshot = Snapshot(jobs=parse_squeue(listed), started=10.0, ok=True)
    assert not poller.is_gone("12", submitted=5.0)  # RUNNING
    assert not poller.is_gone("13", submitted=5.0)  # PENDING
    assert poller.is_gone("14", submitted=5.0)  # COMPLETING: its server is being killed
    assert poller.is_gone("15", submitted=5.0)  # not listed
    assert not poller.is_gone("15", submitted=11.0)  # the query began before the sbatch
    poller.snapshot.error = "squeue failed"
    assert not poller.is_gone("15", submitted=5.0)  # Slurm did not answer: kept


def test_expected_starts_are_asked_with_each_slices_own_submission_options(monkeypatch):
    """sbatch --test-only gets the slice's own options (its cores per GPU, one
    task per GPU), only for slices no node can take now."""
    import asyncio

    from portal.core.slice import make_slice
    from portal.slurm import commands

    asked = []

    async def fake_run(argv, **kwargs):  # Slurm's runner, faked in this unit test only
        asked.append(argv)
        return "sbatch: Job 99 to start at 2026-11-23T18:00:00 using 32 processors"

    monkeypatch.setattr(commands, "run", fake_run)
    full = parse_sinfo("vm gpu* gpu:4 gpu:4(IDX:0-3) 32/0/0/32 alloc 196608 196608 7-00:00:00\n")
    wide = make_slice(
        1, 2, partition="gpu", max_gpus=2, cores_per_gpu=16, mem_per_gpu_gb=48, max_hours=24
    )
    elsewhere = make_slice(
        1, 2, partition="cpu", max_gpus=2, cores_per_gpu=8, mem_per_gpu_gb=48, max_hours=24
    )
    poller = SlurmPoller("unit-test", will_run_slices=lambda: [wide, wide, elsewhere])
    poller.partitions = full
    asyncio.run(poller._refresh_expected_starts())
    assert asked == [["/usr/bin/sbatch", "--test-only", *resource_options(wide), "--wrap=true"]]
    assert "--cpus-per-task=16" in asked[0] and "--ntasks-per-node=1" in asked[0]
    assert poller.expected_start == {wide: datetime(2026, 11, 23, 18, 0)}


def test_gpu_count():
    assert gpu_count("gpu:4") == 4
    assert gpu_count("gpu:0") == 0
    assert gpu_count("gpu:a100:2(IDX:0-1)") == 2
    assert gpu_count("gpu:a100:2(S:0-1),gpu:v100:1(S:0)") == 3
    assert gpu_count("(null)") == 0
    assert gpu_count("shard:8,gpu:1(IDX:3)") == 1


SINFO = """\
a1    gpu*   gpu:a100:4(S:0-1)   gpu:a100:3(IDX:0-2)   24/8/0/32   mix     196608   147456   7-00:00:00
a2    gpu*   gpu:a100:4(S:0-1)   gpu:a100:0(IDX:N/A)   0/32/0/32   idle    196608   0        7-00:00:00
v1    gpu*   gpu:v100:8          gpu:v100:1(IDX:5)     8/56/0/64   mix     393216   49152    7-00:00:00
d1    gpu*   gpu:v100:8          gpu:v100:0            0/0/64/64   down*   393216   0        7-00:00:00
c1    cpu    (null)              gpu:0                 0/64/0/64   idle    262144   0        1-00:00:00
"""


def test_parse_sinfo_combines_mixed_nodes_per_partition():
    parts = parse_sinfo(SINFO)
    gpu = parts["gpu"]
    assert gpu.gpus == 4 + 4 + 8 + 8
    assert gpu.gpus_free == 1 + 4 + 7  # the down node offers nothing
    assert gpu.largest_free == 7
    assert gpu.largest_node.name in ("v1", "d1") and gpu.largest_node.gpus == 8
    assert gpu.max_time == "7-00:00:00"
    assert parts["cpu"].gpus == 0 and parts["cpu"].largest_free == 0


def test_parse_will_run():
    out = (
        "sbatch: Job 57 to start at 2026-11-23T04:00:12 "
        "using 8 processors on nodes vm in partition gpu"
    )
    assert parse_will_run(out) == datetime(2026, 11, 23, 4, 0, 12)
    assert parse_will_run("sbatch: error: Requested node configuration is not available") is None


@pytest.mark.parametrize(
    "state, available",
    [
        ("idle", True), ("mix", True), ("alloc", True),
        ("down*", False), ("mix*", False), ("idle*", False),  # not responding
        ("drain", False), ("drng", False), ("fail", False), ("maint", False), ("unk*", False),
    ],
)  # fmt: skip
def test_a_node_that_is_down_or_not_responding_offers_no_free_gpus(state, available):
    node = Node("n1", ("gpu",), 4, 1, 32, 8, 196608, 49152, state)
    assert node.available is available
    assert node.gpus_free == (3 if available else 0)


def test_the_spawn_pages_sinfo_costs_the_same_for_one_user_or_fifty(monkeypatch):
    """While spawn pages are rendered, the pages' loop reads sinfo every 0.8
    of the age they ask for, however many pages there are; a page waits only
    for the first, and the reads stop once no page asked for
    ``cluster_interval`` (issue 38: 200 users cost Slurm what one does)."""
    import asyncio

    from portal.slurm import commands

    reads = []

    async def partitions(timeout):  # Slurm's sinfo, faked in this unit test only
        reads.append(time.monotonic())
        await asyncio.sleep(0.01)
        return {}

    async def browse(users):
        poller = SlurmPoller(f"unit-test-pages-{users}", cluster_interval=0.5)
        monkeypatch.setattr(commands, "partitions", partitions)
        monkeypatch.setattr(poller.quotas, "refresh", lambda: asyncio.sleep(0))
        monkeypatch.setattr(poller, "write_snapshot", lambda: None)

        def pages_only():
            if poller._pages_task is None:
                poller._pages_task = asyncio.ensure_future(poller._pages_loop())

        monkeypatch.setattr(poller, "ensure_running", pages_only)
        reads.clear()
        await poller.partitions_since(0.25, timeout=2.0)  # none yet: waits for one
        assert len(reads) == 1
        for _ in range(8):  # 1.2 s of browsing
            for _ in range(users):
                await poller.partitions_since(0.25, timeout=2.0)
            await asyncio.sleep(0.15)
        browsing = len(reads)
        await asyncio.sleep(1.0)  # no page for two cluster intervals: no read
        idle = len(reads) - browsing
        poller._pages_task.cancel()
        return browsing, idle

    async def run():
        one, idle_one = await browse(1)
        fifty, idle_fifty = await browse(50)
        assert abs(fifty - one) <= 1 and 4 <= one <= 8, (one, fifty)
        assert idle_one <= 2 and idle_fifty <= 2  # the last reads, then none

    asyncio.run(run())
