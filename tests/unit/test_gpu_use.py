"""The hub's samples of the sessions' GPU use (spawners/gpu_use.py), kept in
a real store (SQLite, migrated), and what they say: the usage report's busy
share, portal_gpus_busy and the card's advice (portal.usage.slice_advice).
The sessions' answers are made here; a real session's answer through the
hub is tests/integration/test_usage.py's."""

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest

from portal.core.slice import make_slice
from portal.store import ProfileStore, default_url
from portal.usage import slice_advice
from spawners import metrics
from spawners.gpu_use import GPUUse


@pytest.fixture
def store(tmp_path):
    s = ProfileStore(default_url(tmp_path))
    s.upgrade()
    return s


def session(job_id, gpus, ready=True, user="alice"):
    job_slice = (
        make_slice(gpus, 1, partition="gpu", max_gpus=4, cores_per_gpu=8, mem_per_gpu_gb=48,
                   max_hours=24) if gpus else SimpleNamespace(gpus=0)
    )  # fmt: skip
    return SimpleNamespace(
        job_id=job_id, job_slice=job_slice, ready=ready, server=object() if ready else None,
        user=SimpleNamespace(name=user), log=logging.getLogger("test"),
    )  # fmt: skip


def answers(by_job):
    """A fetch that answers each session's figures from ``by_job`` and
    counts whom it asked."""
    asked = []

    async def fetch(spawner):
        asked.append(spawner.job_id)
        utils = by_job[spawner.job_id]
        if utils is None:
            return {"gpus": [], "reason": "No NVIDIA driver on n1"}
        return {"gpus": [{"index": i, "utilization": u} for i, u in enumerate(utils)], "reason": ""}

    return fetch, asked


def test_each_round_keeps_the_mean_and_the_most_gpus_busy_at_once(store):
    store.record_session_job("11", "alice", "pytorch", 4, 1)
    use = {"11": [95, 3, 0, 1]}
    fetch, _ = answers(use)
    sampler = GPUUse(lambda: [session("11", 4)], store, fetch, threshold=10, interval=60)
    asyncio.run(sampler.sample())
    use["11"] = [90, 80, 0, 2]
    asyncio.run(sampler.sample())
    use["11"] = [0, 0, 0, 0]
    asyncio.run(sampler.sample())
    row = store.session_gpu_use(job_ids=["11"])["11"]
    assert row["gpu_samples"] == 3
    assert row["gpus_used"] == 2
    assert row["gpu_busy"] == pytest.approx((24.8 + 43.0 + 0.0) / 3)  # each sample to 0.1 %
    assert sampler.busy_now() == 0  # the latest round: none busy


def test_sessions_without_gpus_or_not_ready_are_not_asked_and_no_driver_is_no_sample(store):
    for job_id in ("1", "2", "3"):
        store.record_session_job(job_id, "bob", "pytorch", 1, 1)
    fetch, asked = answers({"1": None, "2": [50], "3": [50]})
    spawners = [session("1", 1), session("2", 0), session("3", 1, ready=False)]
    sampler = GPUUse(lambda: spawners, store, fetch, threshold=10, interval=60)
    asyncio.run(sampler.sample())
    assert asked == ["1"]
    assert store.session_gpu_use(job_ids=["1"])["1"]["gpu_samples"] == 0
    assert store.session_gpu_use(job_ids=["1"])["1"]["gpu_busy"] is None
    assert sampler.latest == {}


def test_the_gauge_counts_fresh_samples_and_forgets_ended_sessions(store):
    for job_id in ("5", "6"):
        store.record_session_job(job_id, "carol", "pytorch", 2, 1)
    fetch, _ = answers({"5": [60, 70], "6": [40, 1]})
    running = [session("5", 2), session("6", 2)]
    sampler = GPUUse(lambda: list(running), store, fetch, threshold=10, interval=60)
    asyncio.run(sampler.sample())
    assert sampler.busy_now() == 3

    poller = SimpleNamespace(job=lambda _: None, snapshot=SimpleNamespace(ok=False, started=0))
    collector = metrics.PortalCollector(list, poller, None, store, sampler)
    busy = [f for f in collector.collect() if f.name == "portal_gpus_busy"][0]
    assert [(s.labels, s.value) for s in busy.samples] == [({"kind": "session"}, 3)]

    running.pop()  # job 6 ended
    asyncio.run(sampler.sample())
    assert set(sampler.latest) == {"5"} and sampler.busy_now() == 2
    sampler.latest["5"] = (time.monotonic() - 1000, 2)  # two rounds missed: stale
    assert sampler.busy_now() == 0


def test_a_session_answering_more_gpus_than_its_job_holds_counts_only_its_own(store):
    store.record_session_job("7", "alice", "pytorch", 1, 1)
    fetch, _ = answers({"7": [99, 99, 99]})
    sampler = GPUUse(lambda: [session("7", 1)], store, fetch, threshold=10, interval=60)
    asyncio.run(sampler.sample())
    assert store.session_gpu_use(job_ids=["7"])["7"]["gpus_used"] == 1


def test_the_advice_reads_the_users_last_five_sampled_sessions_newest_first(store):
    fetch, _ = answers({str(j): [90, 0, 0, 0] for j in range(20, 27)})
    for job_id in range(20, 27):
        store.record_session_job(str(job_id), "alice", "pytorch", 4, 1)
        sampler = GPUUse(lambda j=job_id: [session(str(j), 4)], store, fetch, 10, 60)
        for _ in range(3):  # portal.usage.MIN_SAMPLES
            asyncio.run(sampler.sample())
    store.record_session_job("30", "alice", "pytorch", 4, 1)  # never sampled: not counted
    last = store.session_gpu_use(user="alice")
    assert [s["job_id"] for s in last] == ["26", "25", "24", "23", "22"]
    assert (
        slice_advice(last)
        == "Your last 5 sessions used 1 of their 4 GPUs: fewer would start sooner."
    )
    running = store.session_gpu_use(user="alice", exclude=["26"])  # her running session
    assert [s["job_id"] for s in running] == ["25", "24", "23", "22", "21"]
    assert store.session_gpu_use(user="bob") == []


def test_a_session_that_stops_or_restarts_during_a_round_is_not_credited(store, caplog):
    store.record_session_job("40", "alice", "pytorch", 1, 1)
    store.record_session_job("41", "bob", "pytorch", 1, 1)
    alice, bob = session("40", 1, user="alice"), session("41", 1, user="bob")

    async def fetch(spawner):
        if spawner is alice:  # alice's session restarts as job 42 while it answers
            alice.job_id = "42"
        bob.server = None  # bob's stops before his turn
        return {"gpus": [{"utilization": 90}], "reason": ""}

    sampler = GPUUse(lambda: [alice, bob], store, fetch, threshold=10, interval=60)
    sampler.fetch = fetch
    asyncio.run(sampler.sample())
    use = store.session_gpu_use(job_ids=["40", "41"])
    assert use["40"]["gpu_samples"] == 0 and use["41"]["gpu_samples"] == 0
    assert sampler.latest == {}


def test_an_error_in_one_session_leaves_the_round_to_the_others(store, caplog):
    store.record_session_job("50", "alice", "pytorch", 1, 1)
    store.record_session_job("51", "bob", "pytorch", 1, 1)

    async def fetch(spawner):
        if spawner.job_id == "50":
            raise AttributeError("'NoneType' object has no attribute 'url'")
        return {"gpus": [{"utilization": 90}], "reason": ""}

    sampler = GPUUse(lambda: [session("50", 1), session("51", 1, user="bob")], store, fetch, 10, 60)
    asyncio.run(sampler.sample())
    assert store.session_gpu_use(job_ids=["51"])["51"]["gpu_samples"] == 1
    assert "The GPU use of alice's session was not sampled" in caplog.text


def test_the_sessions_reason_is_quoted_in_the_hubs_log(store, caplog):
    store.record_session_job("60", "alice", "pytorch", 1, 1)
    forged = "x\n[E 2026-11-27 13:00:00.000 JupyterHub app:1] FORGED"

    async def fetch(spawner):
        return {"gpus": [], "reason": forged}

    caplog.set_level(logging.INFO)
    asyncio.run(GPUUse(lambda: [session("60", 1)], store, fetch, 10, 60).sample())
    assert "\n[E 2026" not in caplog.text and repr(forged) in caplog.text
