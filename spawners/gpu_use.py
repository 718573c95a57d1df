"""The sessions' GPU use, sampled by the hub (issue 28).

Every ``interval`` seconds (``[metrics] gpu_sample_seconds``) the hub asks
each running session that holds GPUs for its own GPUs' figures, as the
card's relay does (``spawners.handlers.session_gpus``: the session's NVML
reader, ``/user/NAME/portal/api/gpus``, with its server's own token). A GPU
is busy above ``[culling] gpu_busy_percent``, the activity rule's
threshold. Each sample goes to the store's record of the session's job
(``ProfileStore.record_gpu_sample``: the number of samples, their mean
utilisation, the most GPUs busy at once), so a hub restart loses none; the
latest count of busy GPUs per session stays in memory for
``portal_gpus_busy`` (``spawners.metrics``).

A session whose node has no NVIDIA driver (this cluster's fake GPUs) answers
with no GPU and a reason: it gets no sample, and the usage report says "no
GPU data" for it, never 0. The figures are the session's own report, which
its owner could change: they feed the report, the metrics and the card's
advice (``portal.usage.slice_advice``), never a decision about anyone else.
A multi-node session is read on its server's node.
"""

import asyncio
import logging
import time

from portal.usage import gpu_sample

from . import metrics
from .handlers import UNANSWERED, session_gpus

log = logging.getLogger("portal.gpu_use")

CONCURRENT = 10  # sessions asked at once


class GPUUse:
    def __init__(self, spawners, store, fetch, threshold, interval):
        self.spawners = spawners  # () -> the hub's active spawners
        self.store = store  # portal.store.ProfileStore
        self.fetch = fetch  # async (spawner) -> the session's figures
        self.threshold = threshold
        self.interval = interval
        self.latest = {}  # job id -> (monotonic time, busy GPUs)
        self.told = set()  # job ids whose lack of GPU data was logged
        self._task = None

    def start(self):
        if self.interval > 0 and (self._task is None or self._task.done()):
            self._task = asyncio.ensure_future(self.run())

    async def run(self):
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sample()
            except Exception:
                log.exception("Sampling the sessions' GPU use failed; it goes on")

    def sampled(self):
        """The spawners to ask: running, with a job and GPUs on their node."""
        out = []
        for spawner in self.spawners():
            job_slice = getattr(spawner, "job_slice", None)
            if (
                getattr(spawner, "job_id", "")
                and job_slice is not None
                and job_slice.gpus > 0
                and spawner.ready
                and spawner.server
            ):
                out.append(spawner)
        return out

    async def sample(self):
        """One round: every running session with GPUs asked once."""
        spawners = self.sampled()
        limit = asyncio.Semaphore(CONCURRENT)

        async def one(spawner):
            # the job asked about: a session restarted meanwhile is another job
            job_id, held, user = spawner.job_id, spawner.job_slice.gpus, spawner.user.name
            async with limit:
                if spawner.job_id != job_id or not spawner.server:
                    return  # stopped or restarted while others were asked
                figures = await self.fetch(spawner)
            if spawner.job_id != job_id:
                return
            sample = gpu_sample(figures, self.threshold, held)
            if sample is None:
                reason = figures.get("reason") or "no utilisation"
                metrics.GPU_SAMPLES.labels(
                    "no_answer" if reason == UNANSWERED else "no_gpu_data"
                ).inc()
                if job_id not in self.told:
                    self.told.add(job_id)
                    # the session's own text: quoted, so that it cannot forge log lines
                    spawner.log.info("No GPU sample of job %s (%s's session): %r", job_id,
                                     user, reason[:300])  # fmt: skip
                return
            metrics.GPU_SAMPLES.labels("sampled").inc()
            busy, mean = sample
            self.latest[job_id] = (time.monotonic(), busy)
            try:
                await asyncio.to_thread(self.store.record_gpu_sample, job_id, busy, mean)
            except Exception as e:  # noqa: BLE001 (the metrics keep the sample)
                log.error("The GPU sample of job %s was not stored: %s", job_id, e)

        results = await asyncio.gather(*(one(s) for s in spawners), return_exceptions=True)
        for spawner, result in zip(spawners, results, strict=True):
            if isinstance(result, Exception):
                log.error("The GPU use of %s's session was not sampled: %r", spawner.user.name,
                          result)  # fmt: skip
        running = {s.job_id for s in spawners}
        for job_id in [j for j in self.latest if j not in running]:
            del self.latest[job_id]
        self.told &= running

    def busy_now(self):
        """GPUs busy in the sessions' latest samples (those of the last two
        rounds), for ``portal_gpus_busy``."""
        fresh = time.monotonic() - 2.5 * max(self.interval, 1)
        return sum(busy for when, busy in self.latest.values() if when >= fresh)


_instance = None


def install(spawners, store, settings):
    """The hub's sampler, started with its event loop (``hub_config``)."""
    from jupyterhub.app import JupyterHub

    from spawners.internal_tls import hub_client_context

    async def fetch(spawner):
        app = JupyterHub.instance()
        return await session_gpus(spawner, hub_client_context(app.tornado_settings))

    global _instance
    threshold = float(settings["culling"]["gpu_busy_percent"])
    interval = float(settings["metrics"]["gpu_sample_seconds"])
    if _instance is None:
        _instance = GPUUse(spawners, store, fetch, threshold, interval)
    else:  # configured again in one process: the same loop, its new sources
        _instance.spawners, _instance.store, _instance.fetch = spawners, store, fetch
        _instance.threshold, _instance.interval = threshold, interval
    return _instance
