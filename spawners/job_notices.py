"""Notices of notebook jobs (``portal.notebookjobs``), as of sessions
(``spawners.notices``): when a job that queued starts, and when it ends
(completed, failed, cancelled, out of time), in the browser (the hub's
pages, ``GET /hub/portal/notices``) and by mail when its request asked
(``"notify": true``), to the user's LDAP ``mail``.

A loop of its own, started with the hub (``hub_config.configure_spawner``),
runs ``check`` every ``CHECK_SECONDS``: one sacct and one squeue for the
jobs of the last ``KEEP_DAYS`` days not known to have ended (none: no
query). Its notices join the sessions' (the shared poll's ``Notices``).
Jobs that had ended before the hub started are not told again (what was
sent is kept in memory only: a job that ends while the hub is down gets no
notice; its page still says).
"""

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

from portal.slurm.model import Job

from .notices import Followed

log = logging.getLogger("portal.notices")

CHECK_SECONDS = 15.0
KEEP_DAYS = 7
WAITING = {"PENDING", "SUBMITTED"}
RUNNING = {"RUNNING", "COMPLETING"}


def as_job(job):
    """The portal's job (``NotebookJobs.with_states``) as the poll's Job."""
    first = job["task_states"][0] if job["task_states"] else {}
    when = {k: datetime.fromisoformat(first[k]) if first.get(k) else None for k in ("start", "end")}
    return Job(
        id=job["id"], user=job["user"], state=job["state"],
        nodes=(first["nodes"],) if first.get("nodes") else (), reason=first.get("reason", ""),
        start=when["start"], end=when["end"], gres="", partition="",
    )  # fmt: skip


def seen_counts(jobs):
    """``{"counts": {(state, profile): n}, "gpus": GPUs held, "gpus_by":
    {(GPU model, account): GPUs held}}`` of the jobs not ended (the model and
    account the job asked for, "" for Slurm's default: ``spawners.metrics``)."""
    counts, gpus, gpus_by = {}, 0, {}
    for job in jobs:
        if job["ended"]:
            continue
        key = (job["state"], job["profile"])
        counts[key] = counts.get(key, 0) + 1
        running = sum(1 for t in job["task_states"] if t["state"] in RUNNING)
        held = running * job["gpus"] * job["nodes"]
        gpus += held
        if held:
            chosen = (job.get("gpu_type", ""), job.get("account", ""))
            gpus_by[chosen] = gpus_by.get(chosen, 0) + held
    return {"counts": counts, "gpus": gpus, "gpus_by": gpus_by}


def ended_phrase(job):
    """``COMPLETED after 00:01:12`` (several tasks: how many of each state)."""
    tasks = job["task_states"]
    if len(tasks) == 1:
        task = tasks[0]
        code = task.get("exit_code")
        phrase = f"{task['state']} after {task.get('elapsed') or '?'}"
        return phrase + (f", exit code {code}" if code and code != "0:0" else "")
    states = [t["state"] for t in tasks]
    return ", ".join(f"{states.count(s)} of {len(states)} tasks {s}" for s in sorted(set(states)))


class JobNotices:
    def __init__(self, jobs, notices, hub_url, lookup_mail=None):
        self.jobs = jobs  # portal.notebookjobs.NotebookJobs
        self.notices = notices  # the poll's spawners.notices.Notices
        self.hub_url = hub_url  # https://HOST:PORT/hub/
        self.lookup_mail = lookup_mail  # the authenticator's: user -> address, "" or None
        self.targets = {}  # job id -> Followed
        self.done = set()  # job ids ended and told (or ended before the hub started)
        self.first = True
        self.checked = -float("inf")
        self.interval = CHECK_SECONDS
        self.seen = {}  # the last check's counts by (state, profile) and GPUs held (metrics)
        self._task = None

    def start(self):
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self.run())

    async def run(self):
        while True:
            try:
                await self.check()
            except Exception:
                log.exception("The notebook jobs' notices failed; they go on")
            await asyncio.sleep(self.interval)

    async def check(self, force=False):
        """The notices due now (at most every ``interval`` seconds)."""
        if not force and time.monotonic() - self.checked < self.interval * 0.9:
            return
        self.checked = time.monotonic()
        since = datetime.now(UTC) - timedelta(days=KEEP_DAYS)
        records = [
            r for r in self.jobs.store.notebook_jobs(limit=500)
            if r["id"] not in self.done
            and datetime.fromisoformat(r["submitted_at"].replace("Z", "+00:00")) > since
        ]  # fmt: skip
        described = await self.jobs.with_states(records, max_age=0) if records else []
        if described and described[0]["error"]:
            log.warning("Notebook jobs' notices wait for Slurm: %s", described[0]["error"])
            return
        self.seen = seen_counts(described)
        for job in described:
            try:
                await self.update(job)
            except Exception:  # one job's trouble never keeps the others' notices
                log.exception("The notices of notebook job %s failed", job["id"])
        self.first = False

    async def update(self, job):
        job_id = job["id"]
        target = self.targets.get(job_id)
        if target is None:
            if self.first and job["ended"]:
                self.done.add(job_id)  # ended before this hub started
                return
            target = self.targets[job_id] = await self.target(job)
        if job["state"] in WAITING:
            target.seen_pending = True
        elif job["state"] in RUNNING and target.seen_pending:
            self.notices.notify("started", as_job(job), target)
        if job["ended"]:
            self.notices.notify("ended", as_job(job), target, f"{job_id}|{ended_phrase(job)}")
            self.done.add(job_id)
            self.targets.pop(job_id, None)

    async def target(self, job):
        """What the notices of ``job`` say, and to whom (its mail, when asked)."""
        address = ""
        if job.get("notify") and self.lookup_mail is not None:
            try:
                address = await asyncio.to_thread(self.lookup_mail, job["user"]) or ""
            except Exception as e:  # noqa: BLE001 (the browser's notices still come)
                log.error("LDAP lookup of %s's mail failed: %s", job["user"], e)
            if not address:
                log.warning(
                    "Notebook job %s of %s asked for mail, but the account has no address "
                    "in the directory: browser notices only", job["id"], job["user"],
                )  # fmt: skip
        slice_ = f"{job['nodes'] * job['gpus']} GPU(s), {job['hours']} h, profile {job['profile']}"
        tasks = len(job["task_states"])
        name = job["notebook"] + (f" ({tasks} tasks)" if tasks > 1 else "")
        service = self.hub_url.rsplit("/hub/", 1)[0] + "/services/portal/"
        return Followed(
            user=job["user"], address=address, session=name,
            link=f"{service}jobs/{job['id']}", home=f"{self.hub_url}home", slice=slice_,
            warn_minutes=0, kind="notebook job",
        )  # fmt: skip


def hub_lookup_mail(username):
    """The user's LDAP mail through the hub's authenticator (``spawners.auth``)."""
    from jupyterhub.app import JupyterHub

    lookup = getattr(JupyterHub.instance().authenticator, "lookup_mail", None)
    return lookup(username) if lookup else None
