"""The usage report on the admin service (``portal.usage`` does the work):
``usage`` (the page, its charts drawn here as SVG, its tables by user,
group, profile, GPU model and account, ``?format=csv``) and
``api/usage?since=YYYY-MM-DD&until=YYYY-MM-DD`` (JSON). A portal admin sees
every user, group and profile; a user, their own jobs alone."""

import json
import pwd
import time

from tornado import web

from portal import usage
from portal.core.notebooks import result_base
from portal.core.profiles import unix_groups
from portal.core.slice import FieldError
from portal.settings import portal_groups
from portal.slurm.parse import SlurmError
from portal.store import NotFound

from .api import APIHandler
from .handlers import BaseHandler

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
MAX_BUSY_READS = 100  # notebook jobs whose GPU samples a report reads


def groups_of(user, portal_groups=(), _cache={}):  # noqa: B006 (the process's cache)
    """``user``'s groups, the portal's first (the day chart stacks a user's
    GPU-hours on the first), kept a minute."""
    seen = _cache.get(user)
    if seen and time.monotonic() - seen[0] < 60:
        return seen[1]
    try:
        groups = unix_groups(pwd.getpwnam(user))
    except KeyError:
        groups = ["(unknown)"]
    ordered = tuple(sorted(groups, key=lambda g: (g not in portal_groups, g)))
    _cache[user] = (time.monotonic(), ordered)
    return ordered


class UsageMixin:
    async def report(self):
        try:
            since, until = usage.period(
                self.get_argument("since", ""), self.get_argument("until", "")
            )
        except usage.UsageError as e:
            raise FieldError(str(e), e.field) from None
        name = self.current_user["name"]
        jobs = self.settings["notebook_jobs"]
        try:
            rows = await usage.accounted(
                jobs.job_name[: -len("-notebook")], since, until,
                user=None if self.is_admin else name,
            )  # fmt: skip
        except SlurmError as e:
            raise web.HTTPError(503, f"Slurm's accounting did not answer: {e}") from None
        if not self.is_admin:
            rows = [r for r in rows if r.user == name]
        known = self.store.job_profiles([r.job_id for r in rows])
        sampled = self.store.session_gpu_use(
            job_ids=[r.job_id for r in rows if r.kind == "session"]
        )
        reads = 0
        for row in rows:
            row.profile, row.idle_seconds = known.get(row.job_id, ("", 0))
            use = sampled.get(row.job_id)
            if use and use["gpu_samples"]:  # the hub's samples (spawners.gpu_use)
                row.gpu_busy = round(use["gpu_busy"], 1)
                row.extra["gpus_used"] = use["gpus_used"]
            if row.kind != "session" and row.start and reads < MAX_BUSY_READS:
                reads += 1
                row.gpu_busy = await self.gpu_busy(jobs, row)
        portal = tuple(portal_groups(self.settings["site_settings"]))
        report = usage.summary(rows, since, until, lambda user: groups_of(user, portal))
        # the viewer's own last ended sessions, whatever the period
        running = [r.job_id for r in rows if r.user == name and not r.end]
        report["advice"] = usage.slice_advice(
            self.store.session_gpu_use(user=name, exclude=running)
        )
        return report

    async def gpu_busy(self, jobs, row):
        """A notebook job's mean GPU busy share from its runner's samples, or None."""
        base, _, task = row.job_id.partition("_")
        try:
            record = self.store.notebook_job(base)
            path = result_base(record["notebook"], base, int(task) if task else None)
            sample = json.loads(await jobs.read(row.user, "gpus", f"{path}.gpus.json"))
        except (NotFound, FieldError, ValueError, RecursionError):
            return None
        return busy_share(sample)


def busy_share(sample):
    """A runner's mean busy share, when the sample (a file the job's user
    can write) is one: a number from 0 to 100 beside a list of GPUs; else None.

    >>> busy_share({"gpus": [{}], "mean_utilization": 42.5}), busy_share({"gpus": []})
    (42.5, None)
    >>> busy_share({"gpus": [1], "mean_utilization": "x"}), busy_share([1])
    (None, None)
    """
    if not isinstance(sample, dict) or not isinstance(sample.get("gpus"), list):
        return None
    value = sample.get("mean_utilization")
    if not sample["gpus"] or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value <= 100 else None


class UsageAPI(UsageMixin, APIHandler):
    @web.authenticated
    async def get(self):
        try:
            self.send(await self.report())
        except FieldError as e:
            self.fail(400, e, e.field)


def bars(items, width=560, bar=18, gap=6):
    """Horizontal bars of ``[(label, value, text)]``, scaled to the largest."""
    top = max((v for _, v, _ in items), default=0) or 1
    return {
        "width": width, "height": len(items) * (bar + gap) + gap,
        "bars": [{"label": label, "text": text, "y": gap + i * (bar + gap), "h": bar,
                  "w": max(1, round(value / top * (width - 290)))}
                 for i, (label, value, text) in enumerate(items)],
    }  # fmt: skip


def stacked_days(days, width=560, height=200):
    """Columns of GPU-hours per day, stacked by group."""
    by_day, groups = {}, []
    for d in days:
        by_day.setdefault(d["day"], {})[d["group"]] = d["gpu_hours"]
        if d["group"] not in groups:
            groups.append(d["group"])
    top = max((sum(v.values()) for v in by_day.values()), default=0) or 1
    step = (width - 60) / max(1, len(by_day))
    columns = []
    for i, (day, values) in enumerate(sorted(by_day.items())):
        y, segments = height - 30, []
        for g in groups:
            h = values.get(g, 0) / top * (height - 50)
            y -= h
            segments.append({"y": round(y, 1), "h": round(h, 1), "colour": colour(groups, g),
                             "title": f"{day} {g}: {values.get(g, 0):.2f} GPU-hours"})  # fmt: skip
        columns.append({"x": round(50 + i * step, 1), "w": round(step * 0.7, 1),
                        "day": day[5:], "segments": segments})  # fmt: skip
    legend = [{"group": g, "colour": colour(groups, g)} for g in groups]
    return {"width": width, "height": height, "columns": columns, "legend": legend,
            "top": round(top, 2)}  # fmt: skip


def colour(groups, group):
    return COLOURS[groups.index(group) % len(COLOURS)]


class UsagePage(UsageMixin, BaseHandler):
    @web.authenticated
    async def get(self):
        try:
            report = await self.report()
        except FieldError as e:
            raise web.HTTPError(400, str(e)) from None
        if self.get_argument("format", "") == "csv":
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.set_header("Content-Disposition", 'attachment; filename="portal-usage.csv"')
            return self.finish(usage.as_csv(report))
        efficiency = [
            (u["username"], u["cpu_efficiency"] or 0,
             "no CPU time" if u["cpu_efficiency"] is None else f"{u['cpu_efficiency']:.0%}")
            for u in report["users"]
        ]  # fmt: skip
        self.render_page(
            "usage.html", active="usage", report=report,
            since=report["since"][:10], until=self.get_argument("until", "") or "",
            days_chart=stacked_days(report["days"]), efficiency_chart=bars(efficiency),
            profiles_chart=bars(hours_bars(report["profiles"], "profile")),
            models_chart=bars(hours_bars(report["models"], "gpu_model")),
            accounts_chart=bars(hours_bars(report["accounts"], "account")),
        )  # fmt: skip


def hours_bars(rows, key):
    """``bars``' items of a table's GPU-hours (by profile, GPU model, account)."""
    return [(r[key], r["gpu_hours"], f"{r['gpu_hours']:.2f} GPU-hours") for r in rows]


def routes(route):
    return [(route("usage"), UsagePage), (route("api/usage"), UsageAPI)]
