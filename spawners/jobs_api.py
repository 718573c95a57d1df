"""Notebook jobs on the hub's API, for JupyterLab's scheduler in a session
(``portal.session.scheduler``), which reaches the hub's API from its node
(the admin service listens on the login node's loopback alone):

- ``GET /hub/api/portal/jobs``, ``POST /hub/api/portal/jobs`` (201),
  ``GET /hub/api/portal/jobs/ID``, ``POST /hub/api/portal/jobs/ID/cancel``;
- ``GET /hub/api/portal/notebooks/parameters?path=P``;
- ``GET /hub/api/portal/job-profiles``: the profiles the user may run
  notebook jobs with.

The same operation as the service's ``api/jobs`` (``portal.notebookjobs``),
as the token's owner, for a token that holds ``JOBS_SCOPE`` (users' own
tokens and their sessions' servers' tokens: ``hub_config.configure_jobs``).
Another user's job is 404, as one that does not exist.
"""

import json

from tornado import web

from portal.core.numbers import no_constant
from portal.core.slice import FieldError
from portal.roles import JOBS_SCOPE, is_portal_admin

from . import metrics
from .handlers import PortalAPIHandler

ROUTES = {
    r"/api/portal/jobs": "JobsHandler",
    r"/api/portal/jobs/(\d{1,12})": "JobHandler",
    r"/api/portal/jobs/(\d{1,12})/cancel": "CancelHandler",
    r"/api/portal/notebooks/parameters": "ParametersHandler",
    r"/api/portal/job-profiles": "ProfilesHandler",
}
MAX_BODY = 64 * 1024


class NotebookJobsHandler(PortalAPIHandler):
    def initialize(self, jobs):
        self.jobs = jobs  # portal.notebookjobs.NotebookJobs

    def username(self):
        """The token's owner, a user holding JOBS_SCOPE; else 403."""
        user = self.current_user
        if user is None or getattr(user, "kind", "") != "user":
            raise web.HTTPError(403, "Notebook jobs are a user's: log in or use a user's token")
        if JOBS_SCOPE not in self.expanded_scopes:
            raise web.HTTPError(403, f"This token does not hold the scope {JOBS_SCOPE}")
        return user.name

    def send(self, data, status=200):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data, allow_nan=False))

    def refuse(self, error):
        self.send({"error": str(error), "field": error.field}, 400)

    def record(self, job_id):
        name = self.username()
        record = self.jobs.visible(job_id, name, is_portal_admin(self.expanded_scopes))
        if record is None:
            raise web.HTTPError(404, f"No notebook job {job_id} of yours")
        return record


class JobsHandler(NotebookJobsHandler):
    async def get(self):
        name = self.username()
        self.send(await self.jobs.with_states(self.jobs.store.notebook_jobs(user=name, limit=100)))

    async def post(self):
        name = self.username()
        if len(self.request.body) > MAX_BODY:
            metrics.refused("notebook_job")
            raise web.HTTPError(400, f"The request body is larger than {MAX_BODY} bytes")
        try:
            body = json.loads(self.request.body or b"{}", parse_constant=no_constant)
        except (ValueError, RecursionError) as e:
            metrics.refused("notebook_job")  # a refused submission (submit counts the rest)
            return self.refuse(FieldError(f"The request body is not JSON: {str(e)[:80]}"))
        try:
            record = await self.jobs.submit(name, body, name)
        except FieldError as e:
            return self.refuse(e)
        self.send((await self.jobs.with_states([record]))[0], 201)


class JobHandler(NotebookJobsHandler):
    async def get(self, job_id):
        job = (await self.jobs.with_states([self.record(job_id)], max_age=0))[0]
        self.send(await self.jobs.gpu_use(job))


class CancelHandler(NotebookJobsHandler):
    async def post(self, job_id):
        record = self.record(job_id)
        await self.jobs.cancel(record)
        self.send((await self.jobs.with_states([record], max_age=0))[0])


class ParametersHandler(NotebookJobsHandler):
    async def get(self):
        name = self.username()
        try:
            path, kernel, declared = await self.jobs.declared(name, self.get_argument("path", ""))
        except FieldError as e:
            return self.refuse(e)
        self.send({"path": path, "kernel": kernel, "parameters": [p.to_dict() for p in declared]})


class ProfilesHandler(NotebookJobsHandler):
    def get(self):
        name = self.username()
        try:
            offered = self.jobs.offered(name)
        except FieldError as e:
            return self.refuse(e)
        self.send([p.to_dict() for p in offered])


def routes(jobs):
    """The API routes (under /hub/api) with their handler and its arguments."""
    return [(route, globals()[name], {"jobs": jobs}) for route, name in ROUTES.items()]
