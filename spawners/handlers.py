"""The hub's own request handlers: JupyterHub's subclassed, and the card's routes.

- ``PortReportHandler`` (``/hub/api/batchspawner``): the port report of
  batchspawner-singleuser, made safe. batchspawner's handler sets every
  spawner attribute named in the JSON it gets, checked only by the server's
  own token: a user could set, say, the command the hub runs next. This one
  accepts ``{"port": N}`` and nothing else, with N a valid unprivileged port,
  once per spawn, for the spawner that owns the token, while that spawner is
  starting (a repeat of the same port is answered 200 and changes nothing).
- ``PortalUserServerAPIHandler``, ``PortalSpawnHandler``: a stop during a
  spawn answered as a stop. JupyterHub's stop (``DELETE
  /hub/api/users/NAME/server``) cancels a pending spawn; the request that
  started it waits up to ``slow_spawn_timeout`` and gets its CancelledError:
  Tornado answered 500. Here the POST answers 202, and the form goes on to
  the spawn page, which shows the server stopped. A stop asked by the idle
  culler marks the spawner first (``stop_reason = "idle"``), so the home page
  says the session was stopped after so long idle.
- ``PortalHomeHandler``, ``SessionExtendHandler``, ``SessionGPUsHandler``: the
  session card's actions on the home page. The card's form posts (with the
  page's XSRF token) to ``POST /hub/portal/sessions/NAME/extend`` with
  ``hours``; the extension itself is ``portal.extend``'s, the same as the
  admin service's API. The hub then waits for the shared poll to see the
  job's new end and sends the browser back to ``/hub/home``, which shows the
  new time left and, once, what happened (a signed cookie).

Where they go in JupyterHub's route lists is ``spawners.jupyterhub_patches``.
"""

import asyncio
import json
import math
import time

from jupyterhub.apihandlers import APIHandler
from jupyterhub.apihandlers.users import UserServerAPIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.handlers.pages import HomeHandler, SpawnHandler
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from portal.core.idle import CULLER_SERVICE
from portal.core.slice import FieldError
from portal.core.timelimit import ExtendError, parse_hours
from portal.extend import SessionExtender, may_extend, no_session
from portal.roles import is_portal_admin

from . import expected, form, jupyterhub_patches
from .internal_tls import hub_client_context

PORT_ROUTE = r"/api/batchspawner"
# a user's default session (NAME) or a named one (NAME/SESSION)
EXTEND_ROUTE = r"/portal/sessions/([^/]+)(?:/([^/]+))?/extend"
GPUS_ROUTE = r"/portal/sessions/([^/]+)(?:/([^/]+))?/gpus"
NOTICES_ROUTE = r"/portal/notices"
EXPECTED_ROUTE = r"/portal/expected-start"
# Seconds the card's GPU figures may take to come from the session.
GPUS_TIMEOUT = 5.0
NOTICE_COOKIE = "portal-notice"
# Seconds the redirect waits for a squeue that shows the new end.
REFRESH_TIMEOUT = 10.0


NO_LOGIN = "This call has no login: log in, or send a token (Authorization: token TOKEN)"


class NoLoginMessageMixin:
    """A JupyterHub API handler whose refusal of a call without a login says
    so: JupyterHub's own answers 403 with ``"message": null``."""

    def get_login_url(self):
        raise web.HTTPError(403, NO_LOGIN)

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None))[1]
        if status_code == 403 and isinstance(exc, web.HTTPError) and not exc.get_message():
            if self.current_user is None:
                exc.jupyterhub_message = NO_LOGIN  # what JupyterHub's write_error sends
        super().write_error(status_code, **kwargs)


class PortalAPIHandler(NoLoginMessageMixin, APIHandler):
    """The base of the portal's routes on the hub's API."""


# -- the port report ----------------------------------------------------------


class PortReportHandler(PortalAPIHandler):
    @web.authenticated
    def post(self):
        token = self.get_auth_token()
        user = self.current_user
        spawner = next(
            (s for s in getattr(user, "spawners", {}).values() if s.api_token == token), None
        )
        if spawner is None or not hasattr(spawner, "report_port"):
            raise web.HTTPError(403, "This token belongs to no starting portal server")
        try:
            port = reported_port(self.request.body)
        except web.HTTPError as e:
            self.log.warning("Refused port report for %s: %s", user.name, e.log_message)
            raise
        if spawner.port_reported and spawner.port == port:
            # a report repeated because its answer was lost: taken, and nothing changes
            self.finish(json.dumps({"message": "port already recorded"}))
            return
        if spawner.pending != "spawn" or spawner.port_reported:
            raise web.HTTPError(409, "The port of this server was already reported")
        spawner.report_port(port)
        self.log.info("Server of %s reported port %s", user.name, port)
        self.set_status(201)
        self.finish(json.dumps({"message": "port recorded"}))


def reported_port(body):
    """The port of a report's body (bytes): ``{"port": N}`` and nothing else,
    N an unprivileged port; HTTPError 400 with the reason otherwise."""
    try:
        data = json.loads(body or b"")
    except ValueError:
        raise web.HTTPError(400, "The body must be JSON") from None
    if not isinstance(data, dict) or set(data) != {"port"}:
        raise web.HTTPError(400, 'Only {"port": N} is accepted')
    port = data["port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535:
        raise web.HTTPError(400, "port must be a whole number from 1024 to 65535")
    return port


# -- a stop during a spawn ----------------------------------------------------


class StoppableSpawnMixin:
    """``spawn_single_user`` that returns, rather than raises, when a stop
    cancelled the spawn it waits for."""

    spawn_stopped = False

    async def spawn_single_user(self, user, server_name="", *args, **kwargs):
        try:
            return await super().spawn_single_user(user, server_name, *args, **kwargs)
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                raise  # this request itself is cancelled (the hub is shutting down)
            self.spawn_stopped = True
            name = f"{user.name}/{server_name}" if server_name else user.name
            self.log.info("The spawn of %s was stopped before it finished", name)


class PortalUserServerAPIHandler(NoLoginMessageMixin, StoppableSpawnMixin, UserServerAPIHandler):
    async def post(self, user_name, server_name=""):
        await super().post(user_name, server_name)
        if self.spawn_stopped:
            self.set_status(202)  # accepted, then stopped: the user model shows no server

    async def delete(self, user_name, server_name=""):
        spawner = None
        caller = self.current_user
        if getattr(caller, "kind", "") == "service" and caller.name == CULLER_SERVICE:
            user = self.find_user(user_name)
            if user is not None and server_name in user.orm_spawners:
                spawner = user.spawners[server_name]
                spawner.stop_reason = "idle"  # read (and cleared) by PortalSpawner.stop
        try:
            await super().delete(user_name, server_name)
        finally:
            # PortalSpawner.stop takes the mark as it starts; a DELETE that
            # started no stop (refused, the server already stopped or
            # stopping) leaves it for nobody: a later stop is not the culler's
            if spawner is not None and not jupyterhub_patches.stop_pending(spawner):
                spawner.stop_reason = ""


class PortalSpawnHandler(StoppableSpawnMixin, SpawnHandler):
    async def get(self, user_name=None, server_name=""):
        """The spawn page; for a name the user has no session of yet, a
        form that leaves none behind. JupyterHub's GET stores a new named
        server to render its form, and each counts against the user's named
        servers: links from elsewhere could fill them (a review did, with
        three GETs). The form's POST stores it when it starts."""
        owner = self.find_user(user_name) if user_name else self.current_user
        new = bool(server_name) and owner is not None and server_name not in owner.orm_spawners
        try:
            await super().get(user_name, server_name)
        finally:
            if new:
                await jupyterhub_patches.forget_unstarted(self.db, owner, server_name)


# -- the JSON routes on the pages' side ----------------------------------------


class JSONRouteMixin:
    """A route under /hub/portal that a page's script or an API client calls:
    every error is JSON ``{"error": message, "field": the field or null}``,
    and a call without a login is refused (403, as JupyterHub's own API
    refuses it), never sent the login page's redirect. As every page of
    JupyterHub's, it takes the login cookie, no token (``_accept_token_auth``)."""

    def get_login_url(self):
        raise web.HTTPError(403, NO_LOGIN)

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None))[1]
        message = (exc.get_message() if isinstance(exc, web.HTTPError) else None) or self._reason
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps({"error": message, "field": getattr(exc, "field", None)}))


# -- the session card ---------------------------------------------------------


class PortalHomeHandler(HomeHandler):
    """The home page, with the notice the card's last action left (shown
    once), the user's latest notebook jobs (``portal.notebookjobs``,
    their states from Slurm) and their presets (``spawners.presets``)."""

    def initialize(self, jobs=None, store=None):
        self.jobs = jobs  # portal.notebookjobs.NotebookJobs
        self.store = store  # portal.store.ProfileStore: the presets

    def render_template(self, name, sync=False, **ns):
        if name == "home.html":
            ns.setdefault("portal_notice", self.take_notice())
            if not sync:
                return self._render_home(name, ns)
        return super().render_template(name, sync, **ns)

    async def _render_home(self, name, ns):
        ns.setdefault("portal_jobs", await self.notebook_jobs())
        ns.setdefault("portal_presets", await self.presets())
        return await super().render_template(name, False, **ns)

    async def presets(self):
        """The user's presets and the published ones, each with whether it
        fits now (``spawners.presets``: from memory, no database read while
        nothing changed; the site's choices from the shared poll's catalog)."""
        from . import presets  # it imports this module

        user = self.current_user
        if self.store is None or user is None:
            return []
        admin = is_portal_admin(self.expanded_scopes)
        return [
            {
                **await presets.fit_json(user.spawner, p),
                "may_change": presets.may_change(p, user.name, admin),
                "edit_url": presets.edit_url(self.hub.base_url, p),
            }
            for p in self.store.presets(user.name)
        ]

    async def notebook_jobs(self, limit=5):
        """The user's latest notebook jobs with their states; [] when none
        (or the store is not known: the page still shows the sessions)."""
        user = self.current_user
        if self.jobs is None or user is None:
            return []
        records = self.jobs.store.notebook_jobs(user=user.name, limit=limit)
        jobs = await self.jobs.with_states(records) if records else []
        return [await self.jobs.gpu_use(j) if j["state"] == "RUNNING" else j for j in jobs]

    def take_notice(self):
        raw = self.get_secure_cookie(NOTICE_COOKIE, max_age_days=1)
        if not raw:
            return None
        self.clear_cookie(NOTICE_COOKIE, path=self.hub.base_url)
        try:
            notice = json.loads(raw)
            taken = {"ok": bool(notice["ok"]), "text": str(notice["text"])}
            # a preset that did not fit: the offer to start it with fields reset
            if isinstance(notice.get("preset"), int) and isinstance(notice.get("reset"), list):
                taken["preset"] = notice["preset"]
                taken["reset"] = [str(f)[:40] for f in notice["reset"][:20]]
            return taken
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def session_of(handler, user_name, server_name):
    """The spawner of ``user_name``'s session ``server_name`` (None or "":
    the default one), or None when the user or that session has none (never
    one made for the asking: ``user.spawners`` would)."""
    user = handler.find_user(user_name)
    name = server_name or ""
    if user is None or name not in user.orm_spawners:
        return None
    return user.spawners[name]


def may_act_on(handler, user_name):
    """Whether the request's user may extend ``user_name``'s session or see
    its GPUs: its owner, or a portal admin (the scope of the ``portal-admin``
    role; a JupyterHub admin does not hold it)."""
    actor = handler.current_user
    return may_extend(actor.name, user_name, is_portal_admin(handler.expanded_scopes))


class SessionExtendHandler(JSONRouteMixin, BaseHandler):
    """``POST /hub/portal/sessions/NAME[/SESSION]/extend`` (form field
    ``hours``): the session's owner, or a portal admin, adds hours within the
    profile's limit."""

    def initialize(self, store):
        self.store = store

    @web.authenticated
    async def post(self, user_name, server_name=None):
        actor = self.current_user
        if not may_act_on(self, user_name):
            raise web.HTTPError(403, "Only the session's owner or a portal admin may extend it")
        spawner = session_of(self, user_name, server_name)
        try:
            hours = parse_hours(self.get_body_argument("hours", ""))
            if spawner is None or not spawner.active or not getattr(spawner, "job_id", ""):
                raise no_session(user_name)
            profile = spawner.profile.name if spawner.profile else ""
            extender = SessionExtender(self.store, spawner.job_name, spawner.slurm_timeout)
            result = await extender.extend(user_name, spawner.job_id, profile, hours, actor.name)
        except ExtendError as e:
            self.log.warning(
                "Extension of %s's session for %s refused: %s", user_name, actor.name, e
            )
            notice = {"ok": False, "text": f"Not extended: {e}"}
        else:
            self.log.info(
                "%s extended the session of %s (job %s) from %s to %s",
                actor.name, user_name, result["job_id"], result["previous_time_limit"],
                result["time_limit"],
            )  # fmt: skip
            await self.refresh(spawner)
            more = "hour" if hours == 1 else "hours"
            notice = {
                "ok": True,
                "text": f"Extended by {hours} {more}: the time limit is now "
                f"{result['time_limit_text']}.",
            }
        self._set_cookie(
            NOTICE_COOKIE, json.dumps(notice), path=self.hub.base_url, expires_days=None
        )
        self.redirect(url_path_join(self.hub.base_url, "home"), status=303)

    @staticmethod
    async def refresh(spawner):
        """Wait (a little) for a squeue begun after the extension, so the home
        page shows the new end rather than the last poll's."""
        poller = spawner.poller
        since = time.monotonic()
        try:
            for _ in range(2):  # a query under way began before: one more
                await asyncio.wait_for(poller.snapshot_since(since), REFRESH_TIMEOUT)
                if poller.snapshot.started >= since:
                    return
        except TimeoutError:
            pass


class NoticesHandler(JSONRouteMixin, BaseHandler):
    """``GET /hub/portal/notices?since=N``: the user's own notices after id
    N (a queued session started, one ends soon, one ended), as JSON, for
    the desktop notifications of the hub's pages (templates/page.html). From
    the hub's memory (``spawners.notices``, fed by the shared poll): no Slurm
    query, whatever the number of open pages."""

    @web.authenticated
    def get(self):
        try:
            since = int(self.get_argument("since", "-1"))
        except ValueError:
            raise web.HTTPError(400, "since must be a whole number") from None
        user = self.current_user
        poller = getattr(user.spawner, "poller", None)
        events, last = poller.notices.events_for(user.name, since) if poller else ([], 0)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps({"events": events, "last": last}))


class ExpectedStartHandler(JSONRouteMixin, BaseHandler):
    """``GET /hub/portal/expected-start?profile=...&gpus=...``: when Slurm
    would start the spawn page's exact choice (the spawn form's fields, as a
    spawn link gives them), as JSON: ``{"start": "Sat 14:00" | null,
    "slice": ...}``, or HTTP 400 ``{"error", "field"}`` for a choice the
    page would refuse. ``sbatch --test-only`` as the user with the
    submission's own resources (``expected.start_for``, kept for
    ``expected.KEPT_SECONDS``): the page asks only for a choice that no node
    can take now."""

    @web.authenticated
    async def get(self):
        user = self.current_user
        spawner = user.spawner
        options = {
            key: values[0].decode("utf8", "replace")
            for key, values in self.request.query_arguments.items()
        }
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        try:
            form.check_options(options)
            profile, job_slice = spawner.resolve_options(form.link_fields(
                {k: [v] for k, v in options.items()}
            ))  # fmt: skip
            await spawner.check_site_choices(profile, job_slice)
        except FieldError as e:
            self.set_status(400)
            self.finish(json.dumps({"error": str(e), "field": e.field}))
            return
        start, error = await expected.start_for(user.name, job_slice, spawner.slurm_timeout)
        self.finish(json.dumps({
            "start": start.strftime("%a %H:%M") if start else None,
            "slice": job_slice.describe(),
            "error": error,
        }))  # fmt: skip


class SessionGPUsHandler(JSONRouteMixin, BaseHandler):
    """``GET /hub/portal/sessions/NAME[/SESSION]/gpus``: the session's own GPU figures
    (``/user/NAME/portal/api/gpus``, asked with the server's own token) for
    the card on the hub's page, to the owner or an admin. The browser cannot
    ask the session itself from the hub's page: the session's API wants the
    XSRF token of its own path for a script's request."""

    @web.authenticated
    async def get(self, user_name, server_name=None):
        if not may_act_on(self, user_name):
            raise web.HTTPError(403, "Only the session's owner or a portal admin may see its GPUs")
        spawner = session_of(self, user_name, server_name)
        self.set_header("Content-Type", "application/json")
        if spawner is None or not spawner.ready or not spawner.server:
            raise web.HTTPError(404, f"{user_name[:40]} has no running session by that name")
        figures = await session_gpus(spawner, hub_client_context(self.settings))
        self.finish(json.dumps(figures, allow_nan=False))


async def session_gpus(spawner, ssl_options):
    """A running session's answer of its GPU figures (``/user/NAME/portal/api/gpus``,
    asked with its server's own token), as ``gpu_figures`` keeps it. The
    session's own report, which its owner could change: for the card and the
    usage report (``spawners.gpu_use``), never for a decision about others."""
    url = url_path_join(spawner.server.url, "portal/api/gpus")
    try:
        # the session's own answer only: no redirect followed (the user's
        # server could send the hub anywhere), a small body
        r = await _relay_client().fetch(
            url,
            headers={"Authorization": f"token {spawner.api_token}"},
            request_timeout=GPUS_TIMEOUT,
            follow_redirects=False,
            raise_error=False,
            ssl_options=ssl_options,  # internal_ssl
        )
        data = json.loads(r.body) if r.code == 200 else None
    except (OSError, HTTPClientError, ValueError, RecursionError) as e:
        spawner.log.warning("GPU figures of %s's session: %s", spawner.user.name, e)
        data = None
    return gpu_figures(data)


UNANSWERED = "the session did not answer with its GPU figures"
GPU_KEYS = {"index", "uuid", "name", "utilization", "memory_used_mb", "memory_total_mb"}
MAX_GPUS = 64
MAX_RELAY_BYTES = 64 * 1024


def _relay_client():
    return AsyncHTTPClient(force_instance=True, max_body_size=MAX_RELAY_BYTES)


def gpu_figures(data):
    """What the card may show of a session's answer: at most MAX_GPUS GPUs of
    numbers and short texts under the known keys, and a short reason.

    >>> gpu_figures({"gpus": [{"index": 0, "utilization": 5, "x": "y"}], "reason": ""})
    {'gpus': [{'index': 0, 'utilization': 5}], 'reason': ''}
    >>> gpu_figures("junk")["gpus"]
    []
    >>> gpu_figures({"gpus": [{"index": 0, "utilization": float("nan")}]})["gpus"]
    [{'index': 0}]
    >>> gpu_figures({"gpus": [{"index": None, "utilization": True, "name": "A100"}]})["gpus"]
    [{'name': 'A100'}]
    """
    unanswered = {"gpus": [], "reason": UNANSWERED}
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        return unanswered
    gpus = []
    for gpu in data["gpus"][:MAX_GPUS]:
        if not isinstance(gpu, dict):
            return unanswered
        gpus.append(
            {
                key: value if isinstance(value, (int, float)) else str(value)[:80]
                for key, value in gpu.items()
                if key in GPU_KEYS  # None (NVML's for a MIG instance): not shown
                and isinstance(value, (int, float, str))
                and not isinstance(value, bool)
                and (not isinstance(value, float) or math.isfinite(value))  # JSON has no NaN
            }
        )
    return {"gpus": gpus, "reason": str(data.get("reason") or "")[:300]}
