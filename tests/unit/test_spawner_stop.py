"""A stop that cancels a spawn while sbatch runs: the job sbatch queues all
the same is cancelled once its id is known (the hub's own stop never got it)."""

import asyncio
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from spawners.spawner import PortalSpawner


async def stop_during_sbatch(sbatch):
    """Start a spawner whose submission is ``sbatch`` (a coroutine function of
    the spawner), cancel the start while it runs; returns the spawner and the
    stops it got (job id, now)."""
    spawner = PortalSpawner(config=Config(), user=SimpleNamespace(name="alice"))
    spawner.job_slice = object()  # options already validated
    stops = []

    async def stop(now=False):
        stops.append((spawner.job_id, now))

    spawner.submit_batch_script = lambda: sbatch(spawner)
    spawner.stop = stop
    start = asyncio.ensure_future(spawner.start())
    await asyncio.sleep(0.05)
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    return spawner, stops


async def test_a_stop_during_sbatch_cancels_the_job_it_queues():
    async def sbatch(spawner):
        await asyncio.sleep(0.2)  # sbatch still running when the stop comes
        spawner.job_id = "42"
        return "42"

    spawner, stops = await stop_during_sbatch(sbatch)
    assert stops == [("42", True)]
    assert spawner.job_id == ""  # nothing left for the hub to stop again


async def test_a_failed_submission_leaves_nothing_to_cancel():
    async def sbatch(spawner):
        await asyncio.sleep(0.2)
        raise RuntimeError("sbatch: error: invalid partition")

    _, stops = await stop_during_sbatch(sbatch)
    assert stops == []
