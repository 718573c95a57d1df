"""The GPUs Slurm's QOS lets each user hold at once, as the hub reads them.

A QOS with ``MaxTRESPerUser=gres/gpu=N`` (the embedded cluster's ``portal``,
``[cluster] qos_max_gpus_per_user``) counts every running job of a user,
portal sessions and batch jobs alike; a request past it is accepted by
sbatch and then pends with ``QOSMaxGRESPerUser`` until others end. The
spawn page says what a user holds and may still ask for, and the spawner
refuses a request past it at once, before anything is submitted.

What a user holds comes from slurmctld's own count (``scontrol show
assoc_mgr flags=qos``, one query for everyone, beside the shared poll's
sinfo, and once more just before a submission); the QOS's limits and each
user's QOS (the association's usual one, or the one the session names)
from the shared poll's catalog (before its first read, the default
account's from sacctmgr, kept for ``KEEP_SECONDS``). What cannot be read is logged and
checks nothing: Slurm itself still enforces the limit.
"""

import asyncio
import dataclasses
import logging
import time

from tornado import web

from portal.slurm import commands as slurm
from portal.slurm.model import GpuQuota

from . import metrics

log = logging.getLogger("portal.poller")

KEEP_SECONDS = 300.0  # how long a QOS's limits and a user's QOS are kept


class Quotas:
    """The QOS usage and limits of one hub (its poller holds one)."""

    def __init__(self, poller):
        self.poller = poller  # its ``timeout``: each Slurm command's
        self.usage = {}  # qos -> {uid: GPUs held}
        self.limits = {}  # qos -> GPUs per user (None: no limit)
        self.error = ""  # the last failure, while the latest query failed
        self.read = False  # whether a query has answered
        self._limits_at = -float("inf")
        self._user_qos = {}  # (user, partition) -> (qos, monotonic time read)
        self._asking = {}  # (user, partition) -> the sacctmgr under way (a Task)

    async def refresh(self):
        """Everyone's usage (one scontrol), and the limits when older than
        ``KEEP_SECONDS``; True when it answered."""
        began = time.monotonic()
        try:
            usage = await slurm.qos_usage(timeout=self.poller.timeout)
            if began - self._limits_at > KEEP_SECONDS:
                self.limits = await slurm.qos_gpu_limits(timeout=self.poller.timeout)
                self._limits_at = began
        except slurm.SlurmError as e:
            self.error = str(e)
            log.warning("The QOS's GPUs per user could not be read; not checked ahead: %s", e)
            return False
        self.usage, self.error, self.read = usage, "", True
        return True

    def catalog_qos(self, username, partition, account="", qos=""):
        """The QOS a session of ``username`` on ``partition`` (in ``account``,
        under ``qos`` where they are named) runs under, from the shared
        poll's catalog of the site's accounts (issue 38: no sacctmgr per
        user); None when there is no catalog yet, "" when none is known."""
        catalog = getattr(self.poller, "catalog", None)
        if catalog is None:
            return None
        if qos:
            return qos
        account = account or catalog.default_accounts.get(username, "")
        assoc = catalog.association(username, account, partition) if account else None
        return assoc.usual_qos if assoc else ""

    async def user_qos(self, username, partition, account="", qos=""):
        """The QOS ``username``'s sessions on ``partition`` run under ("": none
        known): the catalog's (``catalog_qos``), or, before it was read, the
        default account's from sacctmgr. One kept for less than
        ``KEEP_SECONDS`` is answered at once; an older one is answered too,
        and read anew meanwhile for the next page; one never read waits for
        its read (shared by concurrent callers)."""
        known = self.catalog_qos(username, partition, account, qos)
        if known is not None:
            return known
        key = (username, partition)
        known = self._user_qos.get(key)
        if known is not None:
            if time.monotonic() - known[1] >= KEEP_SECONDS:
                self._ask_qos(key)
            return known[0]
        return await asyncio.shield(self._ask_qos(key))

    def warm(self, username, partitions):
        """Start reading ``username``'s QOS on each of ``partitions`` that is
        not known yet (at login: their first spawn page then waits for none);
        none once the shared poll holds the catalog, which knows them all."""
        if getattr(self.poller, "catalog", None) is not None:
            return
        for partition in partitions:
            if (username, partition) not in self._user_qos:
                self._ask_qos((username, partition))

    def _ask_qos(self, key):
        """The Task reading ``key``'s QOS: the one under way, or a new one."""
        task = self._asking.get(key)
        if task is None or task.done():
            task = self._asking[key] = asyncio.ensure_future(self._read_qos(*key))
            task.add_done_callback(_retrieved)  # a read nobody awaits still says it failed
        return task

    async def _read_qos(self, username, partition):
        try:
            qos = await slurm.default_qos(username, partition, timeout=self.poller.timeout)
        finally:
            self._asking.pop((username, partition), None)
        if not qos:
            log.warning(
                "No QOS is known for %s's jobs on partition %s (sacctmgr shows no default "
                "QOS): their GPUs per user are not checked ahead", username, partition,
            )  # fmt: skip
        self._user_qos[(username, partition)] = (qos, time.monotonic())
        return qos

    async def quota(self, username, uid, partition, fresh=False, account="", qos=""):
        """``username``'s GpuQuota for a session on ``partition`` (in
        ``account``, under ``qos``, where named), read anew when ``fresh``
        (else as the last refresh saw it); None when it is not known (the
        reason is logged)."""
        try:
            qos = await self.user_qos(username, partition, account, qos)
            if qos and (fresh or not self.read):
                await self.refresh()
        except slurm.SlurmError as e:
            log.warning("The QOS of %s could not be read; not checked ahead: %s", username, e)
            return None
        if not qos or self.error or qos not in self.limits:
            return None
        return GpuQuota(qos, self.limits[qos], self.usage.get(qos, {}).get(uid, 0))


def _retrieved(task):
    """A QOS read's failure, logged (read ahead, nobody else may see it)."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("A QOS read ahead of a spawn page failed: %s", task.exception())


def read_ahead_at_login(job_name, profiles):
    """JupyterHub's ``Authenticator.post_auth_hook``: at each login, the
    user's QOS on the partitions of the enabled ``profiles()`` starts being
    read (``Quotas.warm``), so that their first spawn page waits for none."""
    from .poller import SlurmPoller

    def hook(authenticator, handler, authentication):
        if authentication and authentication.get("name"):
            partitions = {p.partition for p in profiles() if p.enabled}
            SlurmPoller.instance(job_name).quotas.warm(authentication["name"], sorted(partitions))
        return authentication

    return hook


# -- what the spawner asks ---------------------------------------------------

FORM_WAIT = 2.0  # the spawn page waits at most this long for a QOS it never read


async def form_quotas(spawner, partitions):
    """``{partition: GpuQuota or None}`` for the spawn page of ``spawner``'s
    user: what the shared poll's last read saw (a QOS first asked for waits
    at most ``FORM_WAIT`` seconds; the page then goes without it)."""
    found = {}
    for partition in sorted(set(partitions)):
        try:
            found[partition] = await asyncio.wait_for(user_quota(spawner, partition), FORM_WAIT)
        except TimeoutError:
            found[partition] = None
    return found


async def user_quota(spawner, partition, fresh=False, account="", qos=""):
    """The GpuQuota of ``spawner``'s user on ``partition`` (in ``account``,
    under ``qos``, where named; the usage read anew when ``fresh``), with the
    GPUs of their sessions starting; None when it is not known."""
    quota = await spawner.poller.quotas.quota(
        spawner.user.name, spawner.account().pw_uid, partition, fresh, account, qos
    )
    if quota is None:
        return None
    return dataclasses.replace(quota, waiting=starting_gpus(spawner, partition))


def starting_gpus(spawner, partition):
    """The GPUs of the user's other sessions on ``partition`` whose jobs do
    not run yet (being submitted, or pending): Slurm's count of what the
    user holds has none of them, and each will hold its GPUs once it runs
    (``partition`` None: on any partition).
    (Two requests at once each count the other: both may be refused, never
    both let through to pend.)"""
    total = 0
    for other in running_sessions(spawner):
        other_slice = getattr(other, "job_slice", None)
        if other_slice is None or partition not in (None, other_slice.partition):
            continue
        job = spawner.poller.job(other.job_id) if getattr(other, "job_id", "") else None
        if job is None or not job.running:
            total += other_slice.gpus * other_slice.nodes
    return total


def page_quotas(spawner, names):
    """``{qos: {"text", "room"}}``: for the spawn page's site choices, what
    each QOS of ``names`` lets the user ask for still (``GpuQuota``), as
    the shared poll's last read of the usage saw it (no Slurm call), with
    the GPUs of their sessions starting; only QOS whose limits are read."""
    quotas = spawner.poller.quotas
    if not quotas.read or quotas.error or not names:
        return {}
    try:
        uid = spawner.account().pw_uid
    except web.HTTPError:  # no such Unix account: the page says why elsewhere
        return {}
    waiting = starting_gpus(spawner, None)
    found = {}
    for qos in sorted(names):
        if qos in quotas.limits:
            held = quotas.usage.get(qos, {}).get(uid, 0)
            quota = GpuQuota(qos, quotas.limits[qos], held, waiting)
            found[qos] = {"text": quota.describe(), "room": quota.room}
    return found


async def check(spawner, job_slice):
    """Refuse (HTTP 400, nothing submitted) a slice whose GPUs, with those
    the user holds now and those of their sessions starting, are more than
    their QOS lets them hold at once."""
    quota = await user_quota(spawner, job_slice.partition, True, job_slice.account, job_slice.qos)
    refusal = quota.refusal(job_slice.gpus * job_slice.nodes) if quota else None
    if refusal:
        spawner.log.warning("Spawn of %s refused by the QOS: %s", spawner.user.name, refusal)
        metrics.refused("qos")
        raise web.HTTPError(400, refusal)


def running_sessions(spawner):
    """The user's other sessions that run or start now (the default one and
    named ones: ``user.spawners``, every active one of which the hub holds)."""
    others = getattr(spawner.user, "spawners", {}) or {}
    return [s for s in others.values() if s is not spawner and s.active]


def check_sessions(spawner):
    """Refuse (HTTP 400, nothing submitted) a session past the user's
    ``sessions_per_user``, with the names of those that run."""
    others = running_sessions(spawner)
    if len(others) >= spawner.sessions_per_user:
        metrics.refused("sessions")
        names = ", ".join(sorted(s.name or "default" for s in others))
        raise web.HTTPError(
            400, f"You run {len(others)} sessions ({names}), the most the portal allows "
            f"at once: stop one first.",
        )  # fmt: skip
