"""Notebook jobs on the admin service (``portal.notebookjobs`` does the work):

- the API: ``GET/POST api/jobs``, ``GET api/jobs/ID``, ``POST
  api/jobs/ID/cancel`` and ``api/jobs/ID/rerun``, ``GET
  api/notebooks/parameters?path=P`` (a notebook's parameters cell);
- the pages: ``jobs`` (the user's jobs and "Run a notebook as a job"),
  ``jobs/ID`` (its tasks, cancel, rerun) and ``jobs/ID/result?task=N``: the
  executed notebook, rendered read-only.

A job is its owner's and the portal admins': anyone else gets 404, the
same answer as for a job that does not exist. The result is the user's
notebook, read as the user, rendered by nbconvert with its HTML sanitized
in a process of its own (``render``), and served with a CSP sandbox: no
script of it runs, on the portal's origin or any other, and it loads
nothing.
"""

import asyncio
import json
import logging

from tornado import web

from portal.core.numbers import whole_number
from portal.core.slice import FieldError
from portal.notebookjobs import FRESH_SECONDS

from .api import APIHandler
from .handlers import BaseHandler
from .render import RenderError, render

log = logging.getLogger("portal.service")

# The executed notebook's page: nothing runs, nothing loads but its own
# styles and inline images (no frame may hold it: ours alone).
RENDERING = {}  # user -> asyncio.Lock: one rendering of theirs at a time
RESULT_CSP = (
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "frame-ancestors 'none'; form-action 'none'; base-uri 'none'"
)


class JobsMixin:
    @property
    def jobs(self):
        return self.settings["notebook_jobs"]

    def job_or_404(self, job_id):
        """The job's record when the user may see it (its owner, an admin); else 404."""
        record = self.jobs.visible(job_id, self.current_user["name"], self.is_admin)
        if record is None:
            raise web.HTTPError(404, f"No notebook job {str(job_id)[:32]} of yours")
        return record

    async def listed(self, everyone=False):
        user = None if (everyone and self.is_admin) else self.current_user["name"]
        return await self.jobs.with_states(self.store.notebook_jobs(user=user, limit=100))

    async def one(self, job_id, max_age=0):
        """The job with its states (Slurm's now; or a view at most ``max_age``
        seconds old), and its running tasks' GPU use."""
        job = (await self.jobs.with_states([self.job_or_404(job_id)], max_age=max_age))[0]
        return await self.jobs.gpu_use(job)


class JobsAPI(JobsMixin, APIHandler):
    @web.authenticated
    async def get(self):
        self.send(await self.listed(everyone=self.get_argument("all", "") == "1"))

    @web.authenticated
    async def post(self):
        try:
            body = self.body()
        except FieldError as e:
            self.store.refused("notebook_job")  # submit counts the rest
            return self.fail(400, e, e.field)
        try:
            record = await self.jobs.submit(self.author, body, self.author)
        except FieldError as e:
            return self.fail(400, e, e.field)
        self.send((await self.jobs.with_states([record]))[0], 201)


class JobAPI(JobsMixin, APIHandler):
    @web.authenticated
    async def get(self, job_id):
        self.send(await self.one(job_id))


class JobActionAPI(JobsMixin, APIHandler):
    """``POST api/jobs/ID/cancel`` (the job, every task of an array) and
    ``api/jobs/ID/rerun`` (a new job of the same request: 201)."""

    @web.authenticated
    async def post(self, job_id, action):
        record = self.job_or_404(job_id)
        try:
            if action == "cancel":
                await self.jobs.cancel(record)
                return self.send(await self.one(job_id))
            new = await self.jobs.rerun(record, self.author)
        except FieldError as e:
            return self.fail(400, e, e.field)
        except Exception as e:  # scancel's own message
            return self.fail(503, f"Slurm did not take it: {e}")
        self.send((await self.jobs.with_states([new]))[0], 201)


class ParametersAPI(JobsMixin, APIHandler):
    """``GET api/notebooks/parameters?path=P``: the notebook's kernel and the
    parameters of its ``parameters`` cell, each with its type and default."""

    @web.authenticated
    async def get(self):
        try:
            path, kernel, declared = await self.jobs.declared(
                self.author, self.get_argument("path", "")
            )
        except FieldError as e:
            return self.fail(400, e, e.field)
        self.send({"path": path, "kernel": kernel, "parameters": [p.to_dict() for p in declared]})


# -- pages ------------------------------------------------------------------


class JobsPage(JobsMixin, BaseHandler):
    """GET: the user's jobs and the form; POST: submit the form."""

    @web.authenticated
    async def get(self):
        await self.page()

    async def page(self, data=None, error=None, field=None, status=200):
        self.set_status(status)
        profiles = [p for p in self.offered() if p.enabled and not self.jobs.not_runnable(p)]
        blank = {
            "profile": "",
            "gpus": 1,
            "hours": "",
            "parameters": "",
            "sweep": "",
            "notify": False,
        }
        blank["notebook"] = self.get_argument("notebook", "")
        everyone = self.is_admin and self.get_argument("all", "") == "1"
        self.render_page(
            "jobs.html",
            active="jobs",
            jobs=await self.listed(everyone=everyone),
            everyone=everyone,
            profiles=profiles,
            data={**blank, **(data or {})},
            error=error,
            field=field,
        )

    @web.authenticated
    async def post(self):
        data = {k: self.get_argument(k, "") for k in
                ("notebook", "profile", "gpus", "hours", "parameters", "sweep")}  # fmt: skip
        try:
            request = {k: data[k] for k in ("notebook", "profile", "gpus", "hours") if data[k]}
            for key in ("parameters", "sweep"):
                if data[key].strip():
                    try:
                        request[key] = json.loads(data[key])
                    except ValueError:
                        self.store.refused("notebook_job")  # submit counts the rest
                        raise FieldError(f"{key}: not valid JSON", key) from None
            request["notify"] = bool(self.get_argument("notify", ""))
            data["notify"] = request["notify"]
            record = await self.jobs.submit(self.author, request, self.author)
        except FieldError as e:
            return await self.page(data, str(e), e.field, 400)
        self.redirect(self.page_url(f"jobs/{record['id']}"))


class JobPage(JobsMixin, BaseHandler):
    @web.authenticated
    async def get(self, job_id):
        # the page's own re-read (portal/web/live.js, every 10 s while shown)
        # takes the shared view of the last 10 s: one sacct per job for all
        # who watch it, not one per open page
        live = self.request.headers.get("X-Portal-Live") == "1"
        job = await self.one(job_id, max_age=FRESH_SECONDS if live else 0)
        # right after the user's own Cancel: a job Slurm has already ended
        # gets no live re-reads, so its state is announced once, here
        cancelled = self.get_argument("cancelled", "") == "1" and job["ended"]
        self.render_page("job.html", active="jobs", job=job, error=None, announce=cancelled)


class JobActionPage(JobsMixin, BaseHandler):
    @web.authenticated
    async def post(self, job_id, action):
        record = self.job_or_404(job_id)
        try:
            if action == "cancel":
                await self.jobs.cancel(record)
                return self.redirect(self.page_url(f"jobs/{job_id}", cancelled="1"))
            new = await self.jobs.rerun(record, self.author)
        except Exception as e:
            job = await self.one(job_id)
            self.set_status(400)
            return self.render_page(
                "job.html", active="jobs", job=job, error=str(e), announce=False
            )
        self.redirect(self.page_url(f"jobs/{new['id']}"))


class JobResultPage(JobsMixin, BaseHandler):
    """The executed notebook of a task (``?task=N``, default the first),
    rendered read-only; ``?log=1``: the end of its log, as text."""

    @web.authenticated
    async def get(self, job_id):
        job = await self.one(job_id)
        index = whole_number(self.get_argument("task", "0"))
        tasks = job["task_states"]
        if index is None or index >= len(tasks):
            asked = self.get_argument("task", "")[:8]
            raise web.HTTPError(404, f"Job {job_id} has no task {asked}")
        task = tasks[index]
        self.set_header("Content-Security-Policy", RESULT_CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "no-referrer")
        try:
            if self.get_argument("log", ""):
                text = await self.jobs.read(job["user"], "log", task["log"])
                self.set_header("Content-Type", "text/plain; charset=utf-8")
                return self.finish(text)
            lock = RENDERING.setdefault(self.author, asyncio.Lock())
            if lock.locked():
                raise web.HTTPError(429, "A notebook of yours is being rendered: try again soon")
            async with lock:
                text = await self.jobs.read(job["user"], "read", task["output"])
                body = await render(text)
        except FieldError as e:
            raise web.HTTPError(404, f"{e} (the job may not have started yet)") from None
        except RenderError as e:
            log.warning("rendering %s of job %s failed: %s", task["output"], job_id, e)
            raise web.HTTPError(500, f"The notebook could not be shown: {e}") from None
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(body)


def routes(route):
    """The service's routes of notebook jobs, ``route(path)`` making each URL."""
    job = r"(\d{1,12})"
    return [
        (route("jobs"), JobsPage),
        (route(f"jobs/{job}"), JobPage),
        (route(f"jobs/{job}/(cancel|rerun)"), JobActionPage),
        (route(f"jobs/{job}/result"), JobResultPage),
        (route("api/jobs"), JobsAPI),
        (route(f"api/jobs/{job}"), JobAPI),
        (route(f"api/jobs/{job}/(cancel|rerun)"), JobActionAPI),
        (route("api/notebooks/parameters"), ParametersAPI),
    ]
