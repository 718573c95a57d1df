"""JupyterLab's scheduler (jupyter-scheduler 2.x: "Create Notebook Job" and
its job list) with the portal as its backend, through the classes it is
made to be replaced by (``deploy/jupyter_server_config.py`` names them):

- ``PortalEnvironments`` (``SchedulerApp.environment_manager_class``): the
  dialog's environments are the portal's profiles the user may run, and
  each profile's "compute types" its slices (``2 GPUs, 8 h``,
  ``portal.core.notebooks.compute_types``);
- ``PortalScheduler`` (``SchedulerApp.scheduler_class``): a job is the
  portal's notebook job, submitted through the hub's API
  (``/hub/api/portal/jobs``, ``spawners.jobs_api``) with the session's own
  token and TLS certificate. It runs as a Slurm job of the user, apart from
  this session: it goes on when the session ends (jupyter-scheduler's own
  executor runs notebooks inside the server, and dies with it).

What does not fit, and why:

- jupyter-scheduler's parameters are text: each is typed from the
  notebook's ``parameters`` cell here (``from_text``) before the portal
  checks it as any other value;
- "Run on a schedule" (job definitions, cron): refused with a message. A
  portal job runs once, now, and Slurm queues it; a schedule would need a
  process that outlives the session, which a session does not have;
- "Delete" cancels a job that runs and hides nothing: the portal keeps
  every job's record (the admin's audit), and the results are the user's
  files beside the notebook (``jobs/``), which JupyterLab opens;
- there are no staging files to download: the outputs already are in the
  user's home, so every job is marked ``downloaded``.
"""

import json
import os
from datetime import datetime
from urllib.parse import urlencode

from jupyter_scheduler.environments import EnvironmentManager
from jupyter_scheduler.exceptions import SchedulerError
from jupyter_scheduler.models import (
    DescribeJob,
    JobFile,
    ListJobDefinitionsResponse,
    ListJobsResponse,
    RuntimeEnvironment,
    Status,
)
from jupyter_scheduler.scheduler import BaseScheduler
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from portal import tlscontext
from portal.core.notebooks import Parameter, compute_types, from_text, parse_compute_type

OUTPUT_FORMATS = {"ipynb": "Notebook", "html": "HTML"}
STATUS = {
    "PENDING": Status.QUEUED,
    "RUNNING": Status.IN_PROGRESS,
    "COMPLETING": Status.IN_PROGRESS,
    "COMPLETED": Status.COMPLETED,
    "CANCELLED": Status.STOPPED,
}
NO_SCHEDULES = (
    "Notebook jobs of the portal run once, now (Slurm queues them until their GPUs are "
    'free): schedules are not offered. Choose "Run now".'
)


async def hub(method, path, body=None, environ=os.environ):
    """The hub's API ``/hub/api/portal/PATH`` with the session's token; its
    JSON answer, or SchedulerError with the portal's message."""
    url = f"{environ['JUPYTERHUB_API_URL'].rstrip('/')}/portal/{path}"
    request = HTTPRequest(
        url,
        method=method,
        headers={
            "Authorization": f"token {environ['JUPYTERHUB_API_TOKEN']}",
            "Content-Type": "application/json",
        },
        body=None if body is None else json.dumps(body),
        request_timeout=60,
        ssl_options=tlscontext.from_environ(environ),
        follow_redirects=False,
    )
    try:
        response = await AsyncHTTPClient().fetch(request)
    except HTTPClientError as e:
        message = str(e)
        if e.response is not None and e.response.body:
            try:
                answer = json.loads(e.response.body)
                message = answer.get("error") or answer.get("message") or message
            except ValueError:
                pass
        raise SchedulerError(message) from None
    return json.loads(response.body)


def millis(text):
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def compute_type(job):
    nodes = "" if job["nodes"] == 1 else f"{job['nodes']} nodes × "
    return f"{nodes}{job['gpus']} GPU{'s' if job['gpus'] > 1 else ''}, {job['hours']} h"


def describe(job, environ=os.environ):
    """The portal's job as jupyter-scheduler's ``DescribeJob``."""
    first = job["task_states"][0] if job["task_states"] else {}
    status = STATUS.get(job["state"], Status.FAILED if job["ended"] else Status.CREATED)
    message = first.get("reason") or ""
    if job["state"] not in STATUS and job["ended"]:
        message = f"{job['state']}, exit code {first.get('exit_code', '')} {message}".strip()
    name = os.path.basename(job["notebook"])[: -len(".ipynb")]
    public = environ.get("JUPYTERHUB_PUBLIC_HUB_URL", "").rstrip("/")
    hub_root = public[: -len("hub")] if public.endswith("hub") else f"{public}/"
    return DescribeJob(
        name=f"{name} ({job['id']})",
        input_filename=os.path.basename(job["notebook"]),
        runtime_environment_name=job["profile"],
        output_formats=list(OUTPUT_FORMATS),
        parameters={
            k: json.dumps(v) if not isinstance(v, str) else v
            for k, v in (first.get("parameters") or {}).items()
        },  # fmt: skip
        compute_type=compute_type(job),
        job_id=str(job["id"]),
        job_files=[
            JobFile(display_name="Notebook", file_format="ipynb", file_path=job["output"]),
            JobFile(display_name="HTML", file_format="html", file_path=job["html"]),
            JobFile(display_name="Input", file_format="input", file_path=job["notebook"]),
        ],
        url=f"{hub_root}services/portal/jobs/{job['id']}",
        create_time=millis(job["submitted_at"]),
        update_time=millis(first.get("end") or first.get("start") or job["submitted_at"]),
        start_time=millis(first["start"]) if first.get("start") else None,
        end_time=millis(first["end"]) if job["ended"] and first.get("end") else None,
        status=status,
        status_message=message or None,
        downloaded=True,
    )


class PortalEnvironments(EnvironmentManager):
    async def list_environments(self):
        profiles = await hub("GET", "job-profiles")
        return [
            RuntimeEnvironment(
                # the label is the name: jupyter-scheduler 2.12's picker takes an
                # item's label as its value and looks environments up by name
                name=p["name"],
                label=p["name"],
                description=f"{p['display_name']}: {p.get('description') or p['name']}",
                file_extensions=["ipynb"],
                output_formats=list(OUTPUT_FORMATS),
                metadata={"partition": p["partition"]},
                compute_types=compute_types(
                    p["max_gpus"], p["max_nodes"], p["default_hours"], p["max_hours"]
                ),
                default_compute_type=compute_types(1, 1, p["default_hours"], p["max_hours"])[0],
                utc_only=False,
            )
            for p in profiles
        ]

    def manage_environments_command(self):
        return ""

    def output_formats_mapping(self):
        return dict(OUTPUT_FORMATS)


class PortalScheduler(BaseScheduler):
    task_runner = None  # no schedules: nothing runs in this server

    def home_path(self, input_uri):
        """The notebook's path relative to the home (the portal's), from the
        dialog's path relative to this server's root."""
        full = os.path.normpath(os.path.join(self.root_dir, input_uri))
        return os.path.relpath(full, os.path.expanduser("~"))

    async def create_job(self, model):
        if model.job_definition_id:
            raise SchedulerError(NO_SCHEDULES)
        notebook = self.home_path(model.input_uri)
        gpus, nodes, hours = parse_compute_type(model.compute_type or "1 GPU, 1 h")
        parameters = {}
        if model.parameters:
            declared = await hub("GET", "notebooks/parameters?" + urlencode({"path": notebook}))
            types = {p["name"]: p for p in declared["parameters"]}
            for name, text in model.parameters.items():
                known = types.get(name)
                if known is None:
                    parameters[name] = text  # the portal says which names there are
                    continue
                parameters[name] = from_text(
                    Parameter(known["name"], known["type"], known["default"]), text
                )
        body = {
            "notebook": notebook, "profile": model.runtime_environment_name,
            "gpus": gpus, "nodes": nodes, "hours": hours, "parameters": parameters,
        }  # fmt: skip
        job = await hub("POST", "jobs", body)
        return str(job["id"])

    async def list_jobs(self, query):
        jobs = [describe(j) for j in await hub("GET", "jobs")]
        if query.status:
            jobs = [j for j in jobs if j.status == query.status]
        if query.name:
            jobs = [j for j in jobs if query.name.lower() in j.name.lower()]
        jobs.sort(key=lambda j: j.create_time, reverse=True)
        return ListJobsResponse(jobs=jobs[: query.max_items or None], total_count=len(jobs))

    async def count_jobs(self, query):
        return len([j for j in await hub("GET", "jobs") if describe(j).status == query.status])

    async def get_job(self, job_id, job_files=True):
        return describe(await hub("GET", f"jobs/{int(job_id)}"))

    async def stop_job(self, job_id):
        await hub("POST", f"jobs/{int(job_id)}/cancel", {})

    async def delete_job(self, job_id):
        job = await hub("GET", f"jobs/{int(job_id)}")
        if not job["ended"]:
            await self.stop_job(job_id)
            return
        raise SchedulerError(
            "The portal keeps every job's record; its results are your files in "
            f"{os.path.dirname(job['output'])}/, which you may delete there."
        )

    async def update_job(self, job_id, model):
        raise SchedulerError("A submitted job cannot be changed: stop it and create another.")

    def create_job_definition(self, model):
        raise SchedulerError(NO_SCHEDULES)

    def update_job_definition(self, job_definition_id, model):
        raise SchedulerError(NO_SCHEDULES)

    def delete_job_definition(self, job_definition_id):
        raise SchedulerError(NO_SCHEDULES)

    def get_job_definition(self, job_definition_id):
        raise SchedulerError(NO_SCHEDULES)

    def list_job_definitions(self, query):
        return ListJobDefinitionsResponse(job_definitions=[], total_count=0)

    def create_job_from_definition(self, job_definition_id, model):
        raise SchedulerError(NO_SCHEDULES)

    def get_staging_paths(self, model):
        return {}
