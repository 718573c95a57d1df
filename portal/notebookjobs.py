"""Notebooks run as Slurm jobs (issue 27): the one submission operation
behind the service's API (``POST /services/portal/api/jobs``), its page
("Run a notebook as a job", linked from the hub's home page) and
JupyterLab's scheduler (``portal.session.scheduler``, which calls that API);
and what the hub's home page and the API show of a user's jobs.

A submission is checked as a session is, before anything runs as the user:
the account (uid range, the portal's groups), the profile (enabled, the
user's groups), the slice (``Profile.make_slice``), the QOS (a job whose
GPUs its QOS never lets the user hold at once is refused); then the
notebook, read as the user (``portal.helper.notebook`` through its sudoers
rule): inside the home, no link out, a notebook with a kernel this site
has, and its ``parameters`` cell, against which the request's parameters
and sweep are checked and typed (``portal.core.notebooks``). Only then is
one Slurm job submitted as the user (the sudoers rule of sessions,
``--no-requeue``), an array for a sweep. A refusal raises FieldError (a
``NotebookError``, ``ProfileError`` or ``SliceError``) and submits nothing.

The job's state is Slurm's (sacct, and squeue for a queued one's expected
start); the portal keeps what was asked (``portal.store.NotebookJob``).
"""

import copy
import json
import logging
import os
import posixpath
import pwd
import time
from datetime import UTC, datetime

from portal.core.containers import Binds, ContainerError, runtime
from portal.core.notebooks import (
    NotebookError,
    notebook_path,
    parameters_of,
    result_base,
    task_parameters,
)
from portal.core.numbers import no_constant
from portal.core.profiles import check_account, choose, unix_groups
from portal.core.script import render_batch_script
from portal.core.slice import FieldError
from portal.helper import notebook as reader
from portal.helper.imagecheck import ImageError, offer_problem, site_image
from portal.settings import portal_groups
from portal.slurm import choices
from portal.slurm import commands as slurm
from portal.slurm.commands import as_user, job_path, run
from portal.slurm.parse import SlurmError
from portal.store import JOB_CHOICES, NotFound

log = logging.getLogger("portal.notebookjobs")

SCRIPT = "notebook-job.sh.j2"
# The site's choices a job may name, as a session's (portal.slurm.choices).
SITE_FIELDS = (
    "partition",
    "gpu_type",
    "account",
    "qos",
    "reservation",
    "feature",
    "cores",
    "mem_gb",
)
REQUEST_FIELDS = {
    "notebook", "profile", "gpus", "nodes", "hours", "parameters", "sweep", "notify",
    *SITE_FIELDS,
}  # fmt: skip
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE"}  # fmt: skip


class ReadError(FieldError):
    """A file of the user's that the reader refused or could not read."""


def job_name(settings):
    """The Slurm name of this hub's notebook jobs: its sessions' and ``-notebook``
    (never the sessions' own: the shared poll and the extend helper take those)."""
    return f"{settings['slurm']['job_name']}-notebook"


# How long Slurm's view of a job that has not ended serves the pages that
# list jobs before Slurm is asked again (the hub's notices ask every 15 s;
# one job's own page asks each time), and a running task's GPU sample (its
# runner writes one every 15 s).
FRESH_SECONDS = 10.0
GPU_FRESH_SECONDS = 15.0
KEEP_SEEN = 5000  # jobs whose last view is kept


class NotebookJobs:
    def __init__(self, store, settings, profiles=None):
        self.store = store
        self._seen = {}  # job id -> (monotonic time, its record, described): with_states
        self._gpu_seen = {}  # (job id, task) -> (monotonic time, gpu_use): gpu_use
        self._cancelled = {}  # job id -> monotonic time of its last cancel
        self.settings = settings
        self.profiles = profiles or store.profiles  # the enabled profiles, now
        self.job_name = job_name(settings)
        self.timeout = settings["slurm"]["command_timeout"]
        self.environment = settings["envs"]["jupyter"]
        self.shared_data = settings["data"]["shared_data"]
        self.images_dir = settings["containers"]["images"]
        self.runtime = settings["containers"]["runtime"]
        # ``async () -> (partitions, catalog)``: what the site's Slurm offers
        # now (the hub's shared poll); None: read here, at each submission
        self.site_view = None

    # -- reading the user's files, as the user ------------------------------

    async def read(self, username, command, path):
        """``portal-notebook COMMAND PATH`` as ``username``: its output (bytes
        decoded) or ReadError with the reader's reason."""
        argv = as_user(username, [reader.INSTALLED_AT, command, path])
        try:
            return await run(argv, timeout=self.timeout)
        except SlurmError as e:
            _, said, reason = str(e).partition(reader.PREFIX)
            if said:
                raise ReadError(f"notebook: {reason.strip()}", "notebook") from None
            log.error("portal-notebook as %s failed: %s", username, e)
            raise ReadError(f"The notebook could not be read: {e}", "notebook") from None

    def kernel_exists(self, name):
        spec = os.path.join(self.environment, "share", "jupyter", "kernels", name, "kernel.json")
        return bool(name) and "/" not in name and os.path.isfile(spec)

    # -- submitting ---------------------------------------------------------

    def account(self, username):
        """(passwd entry, groups) of ``username``, who may run jobs; else ProfileError."""
        try:
            entry = pwd.getpwnam(username)
        except KeyError:
            raise NotebookError(f"The account {username} is not known here", "user") from None
        hub = self.settings["hub"]
        groups = unix_groups(entry)
        check_account(
            username, entry, groups, uid_min=hub["uid_min"], uid_max=hub["uid_max"],
            allowed_groups=portal_groups(self.settings),
        )  # fmt: skip
        return entry, groups

    async def check(self, username, request):
        """Everything about ``request`` that can be checked before a
        submission; a dict of what to submit, or FieldError."""
        if not isinstance(request, dict):
            raise NotebookError("The request must be a JSON object")
        unknown = sorted(set(request) - REQUEST_FIELDS)
        if unknown:
            raise NotebookError(
                f"unknown field(s): {', '.join(unknown)} "
                f"(known: {', '.join(sorted(REQUEST_FIELDS))})",
                unknown[0],
            )
        if not isinstance(request.get("notify", False), bool):
            raise NotebookError("notify must be true or false", "notify")
        entry, groups = self.account(username)
        profile = choose(self.profiles(), request.get("profile"), groups)
        why = self.not_runnable(profile)
        if why:
            raise NotebookError(f"Profile {profile.name!r}: {why}", "profile")
        gpus = request.get("gpus", 1)
        site = {key: request.get(key) for key in SITE_FIELDS if key != "partition"}
        for key, value in site.items():
            if isinstance(value, bool) or not isinstance(value, (str, int, type(None))):
                raise NotebookError(f"{key} must be text or a whole number", key)
        job_slice = profile.make_slice(
            gpus, request.get("hours"), request.get("nodes"), request.get("partition"), **site
        )
        job_slice = await self.check_site(username, groups, profile, job_slice)
        path = notebook_path(request.get("notebook"), entry.pw_dir)
        facts = json.loads(await self.read(username, "inspect", path))
        if not self.kernel_exists(facts.get("kernel", "")):
            raise NotebookError(
                f"notebook: its kernel {facts.get('kernel', '')[:40]!r} is not one of this "
                "site's (choose a kernel in JupyterLab and save the notebook)",
                "notebook",
            )
        declared = parameters_of(facts["parameters"]) if facts["parameters"] is not None else []
        tasks = task_parameters(
            declared, request.get("parameters"), request.get("sweep"), profile.max_array
        )
        await self.check_qos(username, job_slice)
        return {
            "entry": entry, "profile": profile, "slice": job_slice, "notebook": path,
            "kernel": facts["kernel"], "tasks": tasks,
            "parameters": dict(request.get("parameters") or {}),
            "sweep": dict(request.get("sweep") or {}),
            "notify": request.get("notify", False),
        }  # fmt: skip

    async def check_site(self, username, groups, profile, job_slice):
        """``job_slice``, its QOS named where Slurm's own would refuse it
        (``choices.complete``); SliceError naming the field for a partition,
        GPU model, account, QOS, reservation or node feature the site's Slurm
        would refuse or never start, as a session's (``choices.check``)."""
        if self.site_view is not None:
            partitions, catalog = await self.site_view()
        else:
            try:
                partitions = await slurm.partitions(timeout=self.timeout)
                catalog = await slurm.site_catalog(timeout=self.timeout)
            except SlurmError as e:
                raise NotebookError(f"The cluster did not answer: {e}", "partition") from None
        job_slice = choices.complete(job_slice, catalog, username)
        choices.check(profile, job_slice, partitions, catalog, username, datetime.now(), groups)
        return job_slice

    async def check_qos(self, username, job_slice):
        """Refuse a job that asks for more GPUs than its QOS ever lets the
        user hold at once (it would pend for good); what cannot be read
        checks nothing (logged: Slurm still enforces its limit)."""
        try:
            qos = await slurm.default_qos(username, job_slice.partition, timeout=self.timeout)
            limits = await slurm.qos_gpu_limits(timeout=self.timeout) if qos else {}
        except SlurmError as e:
            log.warning("The QOS of %s could not be read; not checked ahead: %s", username, e)
            return
        limit = limits.get(qos)
        wanted = job_slice.gpus * job_slice.nodes
        if limit is not None and wanted > limit:
            raise NotebookError(
                f"A job of {wanted} GPUs never runs: your QOS {qos} lets you hold at most "
                f"{limit} GPUs at once",
                "gpus",
            )

    def script(self, checked):
        """The job's batch script (every value shell-quoted)."""
        folder, name = posixpath.split(checked["notebook"])
        home = checked["entry"].pw_dir
        container, env_prefix = self.container(checked["profile"], home)
        return render_batch_script(
            SCRIPT,
            results=posixpath.join(home, folder, "jobs"),
            stem=name[: -len(".ipynb")],
            notebook=checked["notebook"],
            tasks=checked["tasks"],
            environment=self.environment,
            shared_data=self.shared_data,
            env={
                "PORTAL_PROFILE": checked["profile"].name,
                "PORTAL_NOTEBOOK_JOB": "1",
                "PATH": job_path(self.settings["slurm"]["bin_dir"]),
            },
            container=container,
            container_env_prefix=env_prefix,
            image=site_image(self.images_dir, checked["profile"].image) if container else "",
        )

    async def submit(self, username, request, actor, rerun_of=None):
        """Check ``request`` and submit it as ``username``: the job's dict. A
        refused request is counted (``portal_refused_requests_total``)."""
        try:
            checked = await self.check(username, request)
        except FieldError:
            self.store.refused("notebook_job")
            raise
        job_slice, tasks = checked["slice"], checked["tasks"]
        argv = slurm.sbatch_argv(
            job_slice, job_name=self.job_name, chdir=checked["entry"].pw_dir,
            array=len(tasks) if checked["sweep"] else 0,
        )  # fmt: skip
        try:
            job_id = await slurm.submit(username, self.script(checked), argv, self.timeout)
        except SlurmError as e:
            log.error("Notebook job of %s refused by Slurm: %s", username, e)
            raise NotebookError(f"The scheduler did not accept the job: {e}") from None
        log.info(
            "Notebook job %s of %s (by %s): %s, %d task(s), %s",
            job_id, username, actor, checked["notebook"], len(tasks), job_slice.describe(),
        )  # fmt: skip
        try:
            return self.store.record_notebook_job(
                job_id=job_id, user=username, notebook=checked["notebook"],
                profile=checked["profile"].name, gpus=job_slice.gpus, nodes=job_slice.nodes,
                hours=job_slice.hours, parameters=checked["parameters"],
                sweep=checked["sweep"], tasks=tasks, kernel=checked["kernel"],
                submitted_by=actor, rerun_of=rerun_of, notify=checked["notify"],
                **recorded_choices(job_slice),
            )  # fmt: skip
        except Exception:  # a job nobody could see or cancel runs nowhere
            log.exception("Notebook job %s of %s could not be recorded: cancelling it",
                          job_id, username)  # fmt: skip
            await slurm.cancel(username, job_id, self.job_name, timeout=self.timeout)
            raise

    async def rerun(self, record, actor):
        """The same request again (the notebook as it is now)."""
        request = {k: record[k] for k in ("notebook", "profile", "gpus", "nodes", "hours")}
        request.update(
            parameters=record["parameters"], sweep=record["sweep"], notify=record["notify"]
        )
        request.update(rerun_choices(record))
        return await self.submit(record["user"], request, actor, rerun_of=record["id"])

    async def cancel(self, record):
        """scancel the job (every task of an array) as its user; its next
        view is Slurm's. A job slurmctld no longer knows has ended long
        since: nothing to cancel, and no error (its view says how it ended)."""
        self._seen.pop(record["id"], None)
        self._cancelled[record["id"]] = time.monotonic()  # a view asked before is not kept
        trim_times(self._cancelled, KEEP_SEEN)
        try:
            await slurm.cancel(record["user"], record["id"], self.job_name, timeout=self.timeout)
        except SlurmError as e:
            if "Invalid job id" not in str(e):
                raise
            log.info("job %s of %s: ended before its cancel", record["id"], record["user"])

    async def declared(self, username, path):
        """``(path, kernel, [Parameter])`` of the notebook ``path`` of
        ``username``'s, read as them; FieldError otherwise."""
        entry, _ = self.account(username)
        path = notebook_path(path, entry.pw_dir)
        facts = json.loads(await self.read(username, "inspect", path))
        source = facts.get("parameters")
        return path, facts["kernel"], parameters_of(source) if source is not None else []

    def offered(self, username):
        """The profiles ``username`` may run notebook jobs with."""
        _, groups = self.account(username)
        return [p for p in self.profiles() if p.allows(groups) and not self.not_runnable(p)]

    def not_runnable(self, profile):
        """Why a notebook job cannot run with ``profile`` ("" when it can):
        its site image has not passed its check at its present stamp (as
        for sessions); a user's own image is not offered to jobs (its check
        runs as the user before each session, not yet before a job)."""
        if profile.image:
            checks = self.store.latest_image_checks()
            return offer_problem(self.images_dir, profile.image, profile.environment, checks)[1]
        if profile.user_images:
            return "it runs your own image, which notebook jobs do not take yet"
        return ""

    def container(self, profile, home):
        """(the runtime's command line before papermill's, its variables'
        prefix) for ``profile``'s site image; ([], "") for none."""
        if not profile.image:
            return [], ""
        try:
            run = runtime(self.runtime)
            image = site_image(self.images_dir, profile.image)
            binds = Binds.for_session(posixpath.dirname(home.rstrip("/")) or "/", self.shared_data)
            return run.exec_argv(image, [], binds, cwd=home), run.env_prefix
        except (ContainerError, ImageError) as e:
            raise NotebookError(f"The profile's image cannot be run: {e}", "profile") from None

    def visible(self, job_id, username, is_admin):
        """The record of ``job_id`` when ``username`` may see it (their own;
        any, for a portal admin), else None: the same for a job that does
        not exist, so that nobody learns whose a number is."""
        try:
            record = self.store.notebook_job(job_id)
        except NotFound:
            return None
        return record if is_admin or record["user"] == username else None

    async def gpu_use(self, job):
        """The GPU use of ``job``'s tasks that run (their runner's last
        sample, read as the job's user at most every ``GPU_FRESH_SECONDS``), each
        task's dict given ``gpu_use``: ``{"gpus": [...], "mean_utilization",
        "time"}`` or ``{"reason": why there is none}``."""
        now = time.monotonic()
        for task in job["task_states"]:
            if task["state"] not in ("RUNNING", "COMPLETING"):
                continue
            key = (job["id"], task["task"])
            seen = self._gpu_seen.get(key)
            if seen and now - seen[0] <= GPU_FRESH_SECONDS:
                task["gpu_use"] = copy.deepcopy(seen[1])
                continue
            try:
                # the user's own file: plain JSON (no NaN, which no answer may
                # hold), an object, not nested deeper than Python reads
                task["gpu_use"] = json.loads(
                    await self.read(job["user"], "gpus", task["gpus_file"]),
                    parse_constant=no_constant,
                )
                if not isinstance(task["gpu_use"], dict):
                    raise ValueError("not a JSON object")
            except (FieldError, ValueError, RecursionError) as e:
                task["gpu_use"] = {"gpus": [], "reason": f"no sample yet ({str(e)[:120]})"}
            self._gpu_seen[key] = (now, copy.deepcopy(task["gpu_use"]))
        trim(self._gpu_seen, KEEP_SEEN, now - GPU_FRESH_SECONDS)
        return job

    # -- what the user sees -------------------------------------------------

    async def with_states(self, records, max_age=FRESH_SECONDS):
        """``records`` with Slurm's view of each task added (``state``,
        ``tasks_state``: per task, its state, times, output); a query that
        fails leaves them ``UNKNOWN`` with the reason, never "gone".

        Slurm is asked (one sacct and one squeue) only for the jobs whose
        view is older than ``max_age`` seconds (0: every one). A job whose
        tasks have all ended is asked again only with ``max_age=0``, and
        the hub's notices ask for the others every 15 s, so the pages that
        list jobs rarely ask at all. A job's own page asks with
        ``max_age=0``; a view asked for before a cancel is not kept."""
        now = time.monotonic()
        known, ask = {}, []
        for r in records:
            seen = self._seen.get(r["id"])
            if seen and seen[1] == r and (now - seen[0] <= max_age or (max_age and final(seen[2]))):
                known[r["id"]] = still(seen[2])
            else:
                ask.append(r)
        if ask:
            error = ""
            try:
                accounted, queued = await slurm.notebook_tasks(
                    [r["id"] for r in ask], self.job_name, timeout=self.timeout
                )
            except SlurmError as e:
                accounted, queued, error = {}, {}, str(e)
            for r in ask:
                job = describe(r, accounted.get(r["id"], {}), queued.get(r["id"], {}), error)
                known[r["id"]] = job
                if not error and self._cancelled.get(r["id"], -1.0) < now:  # not before a cancel
                    self._seen[r["id"]] = (now, copy.deepcopy(r), copy.deepcopy(job))
            trim(self._seen, KEEP_SEEN)
        return [known[r["id"]] for r in records]


def recorded_choices(job_slice):
    """What the store keeps of a job's slice beside its GPUs, nodes and hours
    (``portal.store.NotebookJob``): its partition and the site's choices
    ("" for Slurm's default), and a job without GPUs' cores and memory.

    >>> from portal.core.slice import Slice
    >>> recorded_choices(Slice(2, 16, 96, 4, "sxm2", gpu_type="v100-sxm2", account="lab-nlp"))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'partition': 'sxm2', 'gpu_type': 'v100-sxm2', 'account': 'lab-nlp', 'qos': '',
     'reservation': '', 'feature': '', 'cores': 0, 'mem_gb': 0}
    >>> recorded_choices(Slice(0, 4, 16, 1, "cpu"))["cores"]
    4
    """
    chosen = {key: getattr(job_slice, key) for key in JOB_CHOICES}
    if job_slice.cpu_only:
        return chosen | {"cores": job_slice.cores, "mem_gb": job_slice.mem_gb}
    return chosen | {"cores": 0, "mem_gb": 0}


def rerun_choices(record):
    """The request's site fields that ask again for what a job's record
    (``recorded_choices``) ran with; none for a job recorded before them.

    >>> rerun_choices({"partition": "cpu", "gpu_type": "", "account": "lab-nlp",
    ...                "cores": 4, "mem_gb": 0})
    {'partition': 'cpu', 'account': 'lab-nlp', 'cores': 4}
    >>> rerun_choices({"profile": "pytorch"})
    {}
    """
    keys = (*JOB_CHOICES, "cores", "mem_gb")
    return {key: record[key] for key in keys if record.get(key)}


def trim(seen, keep, older_than=None):
    """Forget the views older than ``older_than`` (a monotonic time), and the
    oldest past ``keep``."""
    if older_than is not None:
        for key in [k for k, v in seen.items() if v[0] < older_than]:
            del seen[key]
    if len(seen) > keep:
        for key in sorted(seen, key=lambda k: seen[k][0])[: len(seen) - keep]:
            del seen[key]


def final(job):
    """Whether a view of a job can no longer change: every task has ended."""
    return job["ended"] and all(t["state"] in ENDED for t in job["task_states"])


def trim_times(times, keep):
    """Keep the ``keep`` latest of ``{key: monotonic time}``."""
    if len(times) > keep:
        for key in sorted(times, key=times.get)[: len(times) - keep]:
            del times[key]


def still(job):
    """A copy of a job's earlier view, its running tasks' time left as of now."""
    job = copy.deepcopy(job)
    now = datetime.now(UTC)
    for task in job["task_states"]:
        if "seconds_left" in task and task.get("end"):
            end = datetime.fromisoformat(task["end"])
            task["seconds_left"] = max(0, int((end - now).total_seconds()))
    return job


def _iso(value):
    return value.astimezone(UTC).isoformat(timespec="seconds") if value else None


def describe(record, accounted, queued, error=""):
    """A job's record with its tasks' states (sacct's; squeue's start and end
    for those it lists) and outputs; ``state``: the job's overall one."""
    now = datetime.now(UTC)
    array = bool(record["sweep"])
    tasks = []
    for index, values in enumerate(record["tasks"]):
        key = index if array else None
        fields = accounted.get(key) or {}
        listed = queued.get(key) or {}
        state = listed.get("state") or fields.get("state") or ("UNKNOWN" if error else "SUBMITTED")
        start = listed.get("start") or fields.get("start")
        end = listed.get("end") or fields.get("end")
        base = result_base(record["notebook"], record["id"], key)
        task = {
            "task": key,
            "parameters": values,
            "state": state,
            "reason": listed.get("reason") or fields.get("reason", ""),
            "exit_code": fields.get("exit_code", ""),
            "start": _iso(start),
            "end": _iso(end),
            "elapsed": fields.get("elapsed", ""),
            "nodes": fields.get("nodes", ""),
            "output": f"{base}.ipynb",
            "html": f"{base}.html",
            "log": f"{base}.log",
            "gpus_file": f"{base}.gpus.json",
        }
        if state == "RUNNING" and end:
            task["seconds_left"] = max(0, int((end.astimezone(UTC) - now).total_seconds()))
        tasks.append(task)
    states = {t["state"] for t in tasks}
    if len(states) == 1:
        overall = states.pop()
    elif states - ENDED:  # a task goes on (running, queued, suspended, requeued...)
        going = states - ENDED
        if "RUNNING" in going:
            overall = "RUNNING"
        elif going & {"PENDING", "SUBMITTED"}:
            overall = "PENDING"
        else:
            overall = sorted(going)[0]
    else:
        overall = "FAILED" if states - {"COMPLETED"} else "COMPLETED"
    first = tasks[0] if tasks else {}
    return {
        **record,
        "state": overall,
        "ended": overall in ENDED,
        "error": error,
        "output": first.get("output"),
        "html": first.get("html"),
        "log": first.get("log"),
        "task_states": tasks,
    }
