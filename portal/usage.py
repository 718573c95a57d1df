"""Usage and efficiency over a period (issue 28): the admin service's report
(``/services/portal/usage``, its CSV, ``GET api/usage``) for admins, every
user, group and profile; for a user, their own.

From Slurm's accounting (one ``sacct`` of the portal's jobs, sessions and
notebook jobs, that ran in the period): GPU-hours held (the allocation's
``gres/gpu`` × its elapsed time, clipped to the period), CPU efficiency
(``TotalCPU`` of its steps over its cores × elapsed), queue waits (submit
to start); GPU-hours by GPU model (the allocation's typed
``gres/gpu:MODEL``, ``UNTYPED`` for GPUs Slurm gave no model) and by
account (sacct's ``Account``), and each job's reservation. From the
portal's store: each job's profile (the sessions' and
the notebook jobs' records), the hours sessions idled before the culler
stopped them. GPU busy share where NVML data exists (a notebook job's
runner's samples, read as its user; a session's, the hub's samples of its
NVML figures, ``spawners.gpu_use``, with the most GPUs busy at once as
``gpus_used``); ``None`` otherwise, which the report says as "no GPU data",
never as 0. ``slice_advice``: the plain sentence of a user's last sessions'
GPU use, for their report and their session card.
"""

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from portal.core.durations import slurm_time
from portal.slurm.commands import accounted_jobs
from portal.slurm.model import parse_time

FIELDS = (
    "JobID,User,JobName,State,Submit,Start,End,ElapsedRaw,AllocTRES,TotalCPU,AllocCPUS,"
    "Account,Reservation"
)
UNTYPED = "(untyped)"  # GPUs of an allocation that names no model (a cluster of untyped GRES)
MAX_DAYS = 366


class UsageError(ValueError):
    def __init__(self, message, field=None):
        super().__init__(message)
        self.field = field


def period(since, until, now=None):
    """``(since, until)`` as datetimes from ``YYYY-MM-DD`` texts (``until``
    inclusive: to the end of that day); the last 7 days by default.

    >>> [d.isoformat() for d in period("2026-11-01", "2026-11-02")]
    ['2026-11-01T00:00:00', '2026-11-03T00:00:00']
    >>> for since, until in [("", "9999-12-31"), ("", "0001-01-01"), ("2026-13-01", "")]:
    ...     try:
    ...         period(since, until)
    ...     except UsageError as e:
    ...         print(e.field, "-", e)
    until - until is a date, YYYY-MM-DD, from 0001-01-08 to 9999-12-30
    until - until is a date, YYYY-MM-DD, from 0001-01-08 to 9999-12-30
    since - since is a date, YYYY-MM-DD
    """
    now = now or datetime.now()
    try:
        end = day_start(until) + timedelta(days=1) if until else now
        start = None if since else end - timedelta(days=7)
    except (TypeError, ValueError, OverflowError):  # 9999-12-31's next day, 0001-01-01's week
        message = "until is a date, YYYY-MM-DD, from 0001-01-08 to 9999-12-30"
        raise UsageError(message, "until") from None
    try:
        start = start or day_start(since)
    except (TypeError, ValueError):
        raise UsageError("since is a date, YYYY-MM-DD", "since") from None
    if start >= end:
        raise UsageError("since must be before until", "since")
    if end - start > timedelta(days=MAX_DAYS):
        raise UsageError(f"a report covers at most {MAX_DAYS} days", "since")
    return start, end


def day_start(text):
    """Midnight of the date ``YYYY-MM-DD`` (a date alone: no time, no zone)."""
    return datetime.combine(date.fromisoformat(text), datetime.min.time())


def cpu_seconds(text):
    """sacct's ``TotalCPU`` (``[D-]HH:MM:SS[.mmm]`` or ``MM:SS.mmm``) in seconds.

    >>> cpu_seconds("01:02.500"), cpu_seconds("1-00:00:01"), cpu_seconds("")
    (62.5, 86401.0, 0.0)
    """
    if not text:
        return 0.0
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return float(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def tres_gpus(tres):
    """``gres/gpu=N`` of an AllocTRES text (or its typed GPUs', when only those are there).

    >>> tres_gpus("cpu=8,gres/gpu:v100-sxm2=2,gres/gpu=2,mem=96G"), tres_gpus("cpu=8")
    (2, 0)
    """
    return sum(tres_gpu_models(tres).values())


def tres_gpu_models(tres):
    """``{model: GPUs}`` of an AllocTRES text: its typed ``gres/gpu:MODEL=N``
    (Slurm accounts a model where ``AccountingStorageTRES`` lists it), the
    rest of ``gres/gpu=N`` as ``UNTYPED``.

    >>> tres_gpu_models("billing=16,cpu=16,gres/gpu:v100-sxm2=2,gres/gpu=2,mem=96G,node=1")
    {'v100-sxm2': 2}
    >>> tres_gpu_models("cpu=8,gres/gpu=1,mem=48G"), tres_gpu_models("cpu=4,mem=16G")
    ({'(untyped)': 1}, {})
    >>> tres_gpu_models("gres/gpu:v100-pcie=1,gres/gpu:v100-sxm2=1,gres/gpu=3")
    {'v100-pcie': 1, 'v100-sxm2': 1, '(untyped)': 1}
    """
    total, models = 0, {}
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if not value.isdigit():
            continue
        if key == "gres/gpu":
            total = int(value)
        elif key.startswith("gres/gpu:") and int(value):
            model = key[len("gres/gpu:") :]
            models[model] = models.get(model, 0) + int(value)
    if total > sum(models.values()):
        models[UNTYPED] = total - sum(models.values())
    return models


@dataclass
class Row:
    job_id: str
    user: str
    kind: str  # "session" or "notebook job"
    state: str
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    gpus: int
    cpus: int
    elapsed: int  # seconds
    cpu_seconds: float = 0.0
    profile: str = ""
    idle_seconds: int = 0
    gpu_busy: float | None = None
    extra: dict = field(default_factory=dict)
    account: str = ""
    reservation: str = ""
    gpu_models: dict = field(default_factory=dict)  # {model: GPUs}, ``tres_gpu_models``

    def held(self, since, until):
        """Seconds the job held its allocation within [since, until)."""
        if not self.start:
            return 0.0
        end = self.end or (self.start + timedelta(seconds=self.elapsed))
        return max(0.0, (min(end, until) - max(self.start, since)).total_seconds())


def parse_rows(text, session_name):
    """sacct's lines (``FIELDS``, steps included) -> one Row per job or array
    task, its steps' CPU time summed into it."""
    rows, steps = {}, defaultdict(float)
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != FIELDS.count(",") + 1:
            continue
        job_id, user, name, state, submit, start, end, elapsed, tres, total, cpus = parts[:11]
        account, reservation = parts[11:]
        if "." in job_id:
            steps[job_id.split(".")[0]] += cpu_seconds(total)
            continue
        if not elapsed.isdigit():
            continue
        rows[job_id] = Row(
            job_id=job_id, user=user,
            kind="session" if name == session_name else "notebook job",
            state=state.split()[0] if state else "", submit=parse_time(submit),
            start=parse_time(start), end=parse_time(end), gpus=tres_gpus(tres),
            cpus=int(cpus) if cpus.isdigit() else 0, elapsed=int(elapsed),
            cpu_seconds=cpu_seconds(total), account=account, reservation=reservation,
            gpu_models=tres_gpu_models(tres),
        )  # fmt: skip
    for job_id, row in rows.items():
        row.cpu_seconds = max(row.cpu_seconds, steps.get(job_id, 0.0))
    return list(rows.values())


async def accounted(job_name, since, until, user=None, timeout=60):
    """Every job of the portal (sessions and notebook jobs) that ran in the period."""
    names = [job_name, f"{job_name}-notebook"]
    text = await accounted_jobs(names, since, until, FIELDS, user=user, timeout=timeout)
    return parse_rows(text, job_name)


def summary(rows, since, until, groups_of):
    """The report: per user, group, profile, GPU model, account and day
    (GPU-hours by group); each user's GPU-hours by model and by account."""

    def totals(selected, gpus=lambda r: r.gpus):
        held = sum(r.held(since, until) * gpus(r) for r in selected) / 3600
        # a running job's CPU time is accounted at its end: the ended ones only
        ended = [r for r in selected if r.state not in ("RUNNING", "PENDING", "REQUEUED")]
        core_seconds = sum(r.cpus * r.elapsed for r in ended)
        waits = [(r.start - r.submit).total_seconds() for r in selected if r.start and r.submit]
        busy = [r.gpu_busy for r in selected if r.gpu_busy is not None]
        asked = sum(gpus(r) for r in selected)
        return {
            "sessions": sum(1 for r in selected if r.kind == "session"),
            "notebook_jobs": sum(1 for r in selected if r.kind != "session"),
            "gpu_hours": round(held, 3),
            "cpu_efficiency": round(sum(r.cpu_seconds for r in ended) / core_seconds, 3)
            if core_seconds
            else None,
            "gpu_busy": round(statistics.mean(busy), 1) if busy else None,
            "idle_hours_before_cull": round(sum(r.idle_seconds for r in selected) / 3600, 2),
            "queue_wait_median_s": round(statistics.median(waits), 1) if waits else None,
            "gpus_asked": asked,
        }

    by_user, by_group, by_profile = defaultdict(list), defaultdict(list), defaultdict(list)
    by_model, by_account = defaultdict(list), defaultdict(list)
    days = defaultdict(float)
    for r in rows:
        by_user[r.user].append(r)
        by_profile[r.profile or "(unknown)"].append(r)
        by_account[r.account or "(none)"].append(r)
        for model in r.gpu_models:
            by_model[model].append(r)
        groups = groups_of(r.user)
        for group in groups:  # a user counts in each of their groups
            by_group[group].append(r)
        for day, seconds in split_days(r, since, until):  # on their first group alone
            days[(day, groups[0] if groups else "(none)")] += seconds * r.gpus / 3600
    return {
        "since": since.isoformat(timespec="seconds"),
        "until": until.isoformat(timespec="seconds"),
        "users": [
            {"username": u, **totals(rs), **held_by(rs, since, until)}
            for u, rs in sorted(by_user.items())
        ],
        "groups": [{"group": g, **totals(rs)} for g, rs in sorted(by_group.items())],
        "profiles": [{"profile": p, **totals(rs)} for p, rs in sorted(by_profile.items())],
        "models": [
            {"gpu_model": m, **totals(rs, lambda r, m=m: r.gpu_models[m])}
            for m, rs in sorted(by_model.items())
        ],
        "accounts": [{"account": a, **totals(rs)} for a, rs in sorted(by_account.items())],
        "days": [
            {"day": d, "group": g, "gpu_hours": round(h, 3)} for (d, g), h in sorted(days.items())
        ],  # fmt: skip
        "jobs": [job_json(r) for r in sorted(rows, key=lambda r: r.submit or since)],
    }


def held_by(rows, since, until):
    """``{"gpu_hours_by_model": {model: GPU-hours}, "gpu_hours_by_account":
    {account: GPU-hours}}`` of ``rows`` within the period."""
    models, accounts = defaultdict(float), defaultdict(float)
    for r in rows:
        hours = r.held(since, until) / 3600
        for model, gpus in r.gpu_models.items():
            models[model] += hours * gpus
        if r.gpus:
            accounts[r.account or "(none)"] += hours * r.gpus
    return {
        "gpu_hours_by_model": {m: round(h, 3) for m, h in sorted(models.items())},
        "gpu_hours_by_account": {a: round(h, 3) for a, h in sorted(accounts.items())},
    }


def split_days(row, since, until):
    """``[(YYYY-MM-DD, seconds held that day)]`` within the period."""
    if not row.start:
        return []
    start = max(row.start, since)
    end = min(row.end or (row.start + timedelta(seconds=row.elapsed)), until)
    out = []
    while start < end:
        midnight = datetime.combine(start.date() + timedelta(days=1), datetime.min.time())
        part_end = min(midnight, end)
        out.append((start.date().isoformat(), (part_end - start).total_seconds()))
        start = part_end
    return out


def job_json(r):
    return {
        "id": r.job_id, "user": r.user, "kind": r.kind, "profile": r.profile, "state": r.state,
        "gpus": r.gpus, "gpu_models": dict(r.gpu_models), "account": r.account,
        "reservation": r.reservation, "cores": r.cpus, "elapsed": slurm_time(r.elapsed // 60),
        "submit": r.submit.isoformat() if r.submit else None,
        "start": r.start.isoformat() if r.start else None,
        "cpu_efficiency": round(r.cpu_seconds / (r.cpus * r.elapsed), 3)
        if r.cpus and r.elapsed else None,
        "gpu_busy": r.gpu_busy, "gpus_used": r.extra.get("gpus_used"),
    }  # fmt: skip


def gpu_sample(figures, threshold, held):
    """``(busy GPUs, mean utilisation)`` of a session's answer of its GPU
    figures (``portal.session.nvml``'s model), a GPU busy above ``threshold``
    percent; None when it reports no GPU with a utilisation (no driver, MIG,
    no answer). At most ``held`` GPUs count: the session's job's
    (``spawners.gpu_use`` samples; ``bench.gpu_check`` on a GPU).

    >>> gpu_sample({"gpus": [{"utilization": 90}, {"utilization": 2}]}, 10, 2)
    (1, 46.0)
    >>> gpu_sample({"gpus": [{"utilization": 90}] * 3}, 10, 2)
    (2, 90.0)
    >>> gpu_sample({"gpus": [], "reason": "no driver"}, 10, 1), gpu_sample({"gpus": [{}]}, 10, 1)
    (None, None)
    >>> gpu_sample({"gpus": [{"utilization": True}, {"utilization": 400}]}, 10, 2)
    """
    known = []
    for gpu in figures.get("gpus", [])[:held]:
        value = gpu.get("utilization")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if 0 <= value <= 100:
            known.append(float(value))
    if not known:
        return None
    return sum(1 for u in known if u > threshold), round(sum(known) / len(known), 1)


MIN_SAMPLES = 3  # a session's samples before its use says anything (3 minutes by default)


def slice_advice(sessions):
    """What a user's latest ended sessions (``ProfileStore.session_gpu_use``,
    newest first, those with the hub's GPU samples) say of their slices: a
    plain sentence when every one that can say (``MIN_SAMPLES`` samples or
    more, more than one GPU, one node: the hub reads the server's node)
    used fewer GPUs than it held, else "".

    >>> s = lambda held, used, n=3, nodes=1: {"gpus": held, "gpus_used": used,
    ...                                       "gpu_samples": n, "nodes": nodes}
    >>> slice_advice([s(4, 1)] * 5)
    'Your last 5 sessions used 1 of their 4 GPUs: fewer would start sooner.'
    >>> slice_advice([s(4, 1), s(2, 0)])
    'Your last 2 sessions used at most 1 of their 2 to 4 GPUs: fewer would start sooner.'
    >>> slice_advice([s(4, 0), s(1, 0), s(2, 1, nodes=2)])
    '1 of your last 3 sessions used none of its 4 GPUs: fewer would start sooner.'
    >>> slice_advice([s(4, 1), s(4, 4)]), slice_advice([s(1, 0)]), slice_advice([s(4, 0, n=2)])
    ('', '', '')
    """
    sessions = [s for s in sessions if s.get("gpu_samples") and s.get("gpus")]
    told = [s for s in sessions if s["gpu_samples"] >= MIN_SAMPLES and s["gpus"] > 1
            and s.get("nodes", 1) == 1]  # fmt: skip
    if not told or any((s["gpus_used"] or 0) >= s["gpus"] for s in told):
        return ""
    used = [s["gpus_used"] or 0 for s in told]
    held = sorted({s["gpus"] for s in told})
    n, m = len(told), len(sessions)
    plural = "its" if n == 1 else "their"
    if n == m:
        whose = "Your last session" if n == 1 else f"Your last {n} sessions"
    else:
        whose = f"{n} of your last {m} sessions"
    held_text = f"{held[0]}" if len(held) == 1 else f"{held[0]} to {held[-1]}"
    if max(used) == 0:
        what = f"used none of {plural} {held_text} GPUs"
    elif len(set(used)) == 1 and len(held) == 1:
        what = f"used {used[0]} of {plural} {held_text} GPUs"
    else:
        what = f"used at most {max(used)} of {plural} {held_text} GPUs"
    return f"{whose} {what}: fewer would start sooner."


def cell(value):
    """A CSV cell no spreadsheet takes for a formula.

    >>> cell(None), cell(1.5), cell("=cmd|' /C calc'!A0"), cell("alice")
    ('', 1.5, "'=cmd|' /C calc'!A0", 'alice')
    """
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def as_csv(report):
    """The users' table as CSV text: a row per user, then a column of
    GPU-hours for each GPU model (``gpu_hours_model_MODEL``) and each
    account (``gpu_hours_account_ACCOUNT``) of the report."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out)
    columns = [
        "username", "sessions", "notebook_jobs", "gpu_hours", "cpu_efficiency", "gpu_busy",
        "idle_hours_before_cull", "queue_wait_median_s", "gpus_asked",
    ]  # fmt: skip
    models = [m["gpu_model"] for m in report.get("models", [])]
    accounts = [a["account"] for a in report.get("accounts", [])]
    writer.writerow(
        [*columns, *(cell(f"gpu_hours_model_{m}") for m in models),
         *(cell(f"gpu_hours_account_{a}") for a in accounts)]
    )  # fmt: skip
    for user in report["users"]:
        by_model = user.get("gpu_hours_by_model", {})
        by_account = user.get("gpu_hours_by_account", {})
        writer.writerow(
            [*(cell(user[c]) for c in columns), *(by_model.get(m, 0) for m in models),
             *(by_account.get(a, 0) for a in accounts)]
        )  # fmt: skip
    return out.getvalue()
