"""What the home page's session card and the spawn's progress page show.

Plain functions of what the spawner and the shared poll know (no Slurm
call): the session's job, nodes, GPUs, time left and how far it may be
extended; how the last session ended when the user did not stop it; and
the progress messages of a starting session. ``SessionCard`` gives
PortalSpawner the methods the home page's template and ``progress`` call.
"""

import asyncio
from datetime import datetime

from portal.core.durations import describe_limit, describe_seconds, time_left
from portal.core.timelimit import hours_left
from portal.extend import ExtensionCheck
from portal.slurm import commands as slurm
from portal.slurm.model import describe_end
from portal.usage import slice_advice

from . import metrics


def progress_message(job_id, job_slice, job, port_reported):
    """The progress page's ``{"progress", "message"}`` for a spawn whose job
    is ``job_id`` (none yet: being submitted) and as the poll lists it
    (``job``: None when not listed yet)."""
    if not job_id:
        return {"progress": 10, "message": "Submitting the job to Slurm..."}
    slice_text = job_slice.describe() if job_slice else ""
    if job is None:
        return {"progress": 20, "message": f"Submitted Slurm job {job_id}: {slice_text}"}
    if job.pending:
        when = ""
        if job.start:
            when = f"; expected start {job.start:%a %H:%M}"
            minutes = int((job.start - datetime.now()).total_seconds() // 60)
            if minutes > 0:
                when += f" (in {time_left(minutes, pad=False)})"
        reason = job.reason or "waiting"
        return {"progress": 30, "message": f"Job {job_id} queued: {reason}{when}"}
    if port_reported:
        return {"progress": 90, "message": f"Jupyter is up on {job.node}; connecting..."}
    return {
        "progress": 60,
        "message": f"Job {job_id} allocated on {', '.join(job.nodes)}; starting Jupyter...",
    }


# seconds between sacct's askings while slurmdbd has not recorded a job's end
SETTLE_WAITS = (0.5, 1, 1, 2, 2, 4, 4, 6)
# seconds settle_end may take in all, sacct's own answers included: on a busy
# slurmdbd each sacct may take its whole timeout, and the home page should not
# say "not recorded yet" for minutes
SETTLE_DEADLINE_S = 30.0
# sacct states of a job that has not ended yet (slurmdbd not told yet)
NOT_ENDED = {"", "PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING"}


def is_final(reason):
    """Whether ``reason`` (``parse_end_reason``'s) is a state a job ends in.

    >>> is_final("CANCELLED, exit code 0:0"), is_final("RUNNING, exit code 0:0"), is_final("")
    (True, False, False)
    """
    return reason.split(",", 1)[0].strip() not in NOT_ENDED


def end_record(job_id, nodes, **details):
    """``PortalSpawner.last_end``: how the session of ``job_id`` on ``nodes``
    ended (sacct's ``reason`` and the job's ``memory``, or the culler's
    ``idle_seconds``), and when it was noticed."""
    return {
        "job_id": job_id,
        "nodes": nodes,
        **details,
        "ended": datetime.now().isoformat(timespec="seconds"),
    }


def ended_info(last_end):
    """How the last session ended (``PortalSpawner.last_end``) when neither
    the user nor the hub stopped it, or the idle culler did: ``{"job_id",
    "nodes", "reason", "why", "ended"}``."""
    if last_end.get("idle_seconds"):
        idle = describe_seconds(last_end["idle_seconds"])
        return {**last_end, "why": f"stopped after {idle} idle"}
    if last_end.get("settling"):
        return {**last_end, "why": "Slurm has not recorded yet how it ended (reload in a moment)"}
    reason = last_end.get("reason", "")
    return {**last_end, "why": describe_end(reason, last_end.get("memory", ""))}


def session_info(job_id, job, *, ip, gpu_indices, profile, job_slice, unknown, log, extend,
                 image=""):  # fmt: skip
    """The card of the running session ``job_id``, as the poll lists it
    (``job``, None when not listed; ``unknown``: Slurm did not answer), on
    ``ip`` (its first node) with ``gpu_indices`` (node -> "0-1"), its
    ``profile`` and ``job_slice``, its ``log``, ``extend`` (``extend_info``)
    and its container ``image`` ("" for none)."""
    nodes = job.nodes if job else (ip,) if ip else ()
    # key "": the first node's, as a hub before multi-node sessions kept them
    info = {
        "job_id": job_id,
        "profile": profile.display_name if profile else "",
        "revision": profile.revision if profile else 0,
        "image": image,
        "slice": job_slice,
        "nodes": [
            {
                "name": node,
                "gpus": gpu_indices.get(node) or (gpu_indices.get("", "") if i == 0 else ""),
            }
            for i, node in enumerate(nodes)
        ],
        "state": job.state if job else ("UNKNOWN" if unknown else ""),
        "log": log,
        "time_left": "",
        **site_choices(job, job_slice),
    }
    if job and job.end and job.running:
        left = int((job.end - datetime.now()).total_seconds() // 60)
        info["time_left"] = time_left(left) if left > 0 else "ending"
    if job and job.pending:
        # squeue's expected start of a queued session, and Slurm's reason
        info["expected_start"] = f"{job.start:%Y-%m-%d %H:%M}" if job.start else "not known yet"
        info["reason"] = "" if job.reason in ("", "None") else job.reason
    info.update(extend)
    return info


def site_choices(job, job_slice):
    """The card's site choices (issue 38): the partition (Slurm's, once the
    poll lists the job), the GPU model, account, QOS, reservation and node
    feature the session asked for ("": Slurm's default; the account "" is
    the user's default one).

    >>> from portal.core.slice import Slice
    >>> site_choices(None, Slice(1, 8, 48, 2, "sxm2", gpu_type="v100-sxm2", account="lab-nlp"))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'partition': 'sxm2', 'gpu_model': 'v100-sxm2', 'account': 'lab-nlp', 'qos': '',
     'reservation': '', 'feature': ''}
    """
    chosen = {key: getattr(job_slice, key, "") for key in ("account", "qos", "reservation",
                                                          "feature")}  # fmt: skip
    partition = (job.partition if job else "") or getattr(job_slice, "partition", "")
    return {"partition": partition, "gpu_model": getattr(job_slice, "gpu_type", ""), **chosen}


def extend_info(job, job_slice, profile, unavailable):
    """The card's time limit (Slurm's, which an extension changes) and how
    many more hours ``profile`` (as the store has it now: its ``max_hours``,
    as ``portal.extend`` checks it) allows now: ``extend_hours``, 0 when
    none; and ``extend_unavailable``, why the hub can extend no session
    (``unavailable``, or None)."""
    limit = job.time_limit if job else None
    if limit is None and job_slice:
        limit = job_slice.hours * 60
    more = 0
    if profile is not None and limit is not None and job is not None and job.running:
        more = hours_left(limit, profile.max_hours)
    return {
        "time_limit": describe_limit(limit) if limit is not None else "",
        "max_hours": profile.max_hours if profile is not None else 0,
        "extend_hours": more,
        "extend_unavailable": str(unavailable or ""),
    }


class SessionCard:
    """PortalSpawner's card for the home page (``session_info``,
    ``ended_info``) and the progress page's messages, from the spawner's
    state and the shared poll: each method passes the spawner's values to
    the function of its name above; and the record of how a session ended
    without a stop of the user's (``last_end``)."""

    _settling = None  # the background settle_end, kept from the garbage collector

    async def _record_end(self):
        """How a session that ended without a stop from the hub ended (a node
        failure, its time limit, a scancel from a shell), from sacct, for the
        home page: ``last_end`` is kept in the state until the next start.
        slurmdbd records a job's end after slurmctld drops it from squeue:
        when sacct has no final state yet, the record says so and is
        settled in the background (``settle_end``), which sends the notice."""
        # taken before sacct is awaited: a poll meanwhile (the shared squeue's
        # call and the hub's own) may forget the job (its id "" on the page)
        job_id, nodes = self.job_id, self._job_nodes()
        memory = self.job_slice.memory_limit if self.job_slice else ""
        reason = await self.job_end_reason()
        if not is_final(reason):
            self.last_end = end_record(job_id, nodes, reason="", memory=memory, settling=True)
            self._settling = asyncio.ensure_future(self.settle_end(job_id, nodes, memory))
            return
        self.last_end = end_record(job_id, nodes, reason=reason, memory=memory)
        self.notice_ended(describe_end(reason, memory))
        self._log_end(job_id, nodes, reason)

    async def settle_end(self, job_id, nodes, memory):
        """Ask sacct again, after each of ``SETTLE_WAITS`` seconds, until it has
        the job's final state (or the waits, or ``SETTLE_DEADLINE_S``, are
        over: "no record"); then the home page's record (kept in the hub's
        database) and the notice say it, unless a new session started
        meanwhile."""
        reason = ""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_DEADLINE_S
        for wait in SETTLE_WAITS:
            await asyncio.sleep(min(wait, max(0.0, deadline - loop.time())))
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                reason = await slurm.end_reason(
                    job_id, self.job_name, timeout=min(self.slurm_timeout, left)
                )
            except slurm.SlurmError:
                reason = ""
            if is_final(reason):
                break
        if not is_final(reason):
            reason = await self._ctld_end_reason(job_id)
        if (self.last_end or {}).get("job_id") != job_id or self.job_id:
            return  # a new start replaced the record
        self.last_end = end_record(job_id, nodes, reason=reason, memory=memory)
        self.poller.notices.ended(job_id, describe_end(reason, memory))
        self._log_end(job_id, nodes, reason)
        orm = self.orm_spawner
        if orm is not None:
            orm.state = self.get_state()
            self.user.db.commit()

    async def _ctld_end_reason(self, job_id):
        """How slurmctld says ``job_id`` ended, when slurmdbd never recorded
        it in ``settle_end``'s time (a busy or unreachable slurmdbd), or ""."""
        try:
            reason = await slurm.end_reason_ctld(job_id, self.job_name, self.slurm_timeout)
        except slurm.SlurmError as e:
            self.log.warning("Job %s: neither sacct nor slurmctld says how it ended: %s", job_id, e)
            return ""
        return reason if is_final(reason) else ""

    def _log_end(self, job_id, nodes, reason):
        self.log.info(
            "Job %s of %s on %s is no longer in the queue: %s",
            job_id, self.user.name, ",".join(nodes) or "no node", reason or "no sacct record",
        )  # fmt: skip

    def _job_nodes(self):
        return [n for n in (self.gpu_indices or {}) if n] or ([self.ip] if self.ip else [])

    def _record_idle_end(self):
        """A stop asked by the idle culler, for the home page: ``last_end``
        says after how long idle (``ended_info``)."""
        idle = self.idle_seconds()
        metrics.IDLE_CULLS.labels(self.profile.name if self.profile else "").inc()
        self._audit("record_idle_cull", self.job_id, idle)
        self.last_end = end_record(self.job_id, self._job_nodes(), reason="", idle_seconds=idle)
        self.notice_ended(f"the portal stopped it after {describe_seconds(idle)} idle")
        self.log.info(
            "Job %s of %s stopped by the idle culler after %s idle",
            self.job_id, self.user.name, describe_seconds(idle),
        )  # fmt: skip

    def record_session_job(self):
        """The submitted job in the store's audit (the usage report's profile of it)."""
        job_slice = self.job_slice
        self._audit("record_session_job", self.job_id, self.user.name,
                    self.profile.name if self.profile else "", job_slice.gpus if job_slice else 0,
                    job_slice.nodes if job_slice else 1)  # fmt: skip

    def _audit(self, method, *args):
        store = getattr(self.profile_source, "store", None)  # StoreProfiles' (hub_config)
        if store is None:
            return
        try:
            getattr(store, method)(*args)
        except Exception as e:  # noqa: BLE001 (the report misses it; the session goes on)
            self.log.error("The usage audit of job %s failed: %s", self.job_id, e)

    def _progress_message(self, poller):
        job = poller.job(self.job_id) if self.job_id else None
        return progress_message(self.job_id, self.job_slice, job, self.port_reported)

    # -- the session card ----------------------------------------------------

    def ended_info(self):
        """How the last session ended when neither the user nor the hub
        stopped it (or the idle culler did), for the home page
        (``spawners.card``), or None."""
        if self.job_id or not self.last_end:
            return None
        return ended_info(self.last_end)

    def session_info(self):
        """What the home page's session card shows (no Slurm call)."""
        if not self.job_id:
            return None
        job = self.poller.job(self.job_id)
        return session_info(
            self.job_id,
            job,
            ip=self.ip,
            gpu_indices=self.gpu_indices,
            profile=self.profile,
            job_slice=self.job_slice,
            unknown=self.poller.unknown,
            log=self.job_log,
            extend=self._extend_info(job),
            image=self.session_image(),
        ) | {"gpu_advice": self.gpu_advice()}

    def gpu_advice(self):
        """What the user's last ended sessions' sampled GPU use says of their
        slices ("Your last 5 sessions used 1 of their 4 GPUs..."), or ""
        (``portal.usage.slice_advice``; ``spawners.gpu_use`` samples)."""
        store = getattr(self.profile_source, "store", None)
        if store is None:
            return ""
        running = [s.job_id for s in self.user.spawners.values() if getattr(s, "job_id", "")]
        try:
            return slice_advice(store.session_gpu_use(user=self.user.name, exclude=running))
        except Exception as e:  # noqa: BLE001 (the card shows the rest)
            self.log.error("The GPU use of %s's last sessions was not read: %s", self.user.name, e)
            return ""

    def _extend_info(self, job):
        """The card's time limit and how many more hours the profile, as the
        store has it now, allows (``spawners.extend_info``)."""
        profile = self.profile
        if profile is not None:
            current = [p for p in self.profiles() if p.name == profile.name]
            profile = current[0] if current else profile
        unavailable = ExtensionCheck.shared(self.slurm_timeout, self.job_name).last_verdict()
        return extend_info(job, self.job_slice, profile, unavailable)
