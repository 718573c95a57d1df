"""The admin service's tornado application: pages, the JSON API, and what they share.

Every write goes through ``ProfileOperations``: the same validation (the
profile's own rules, then the live cluster's), the same audit and the same
optimistic locking for the pages and the API.
"""

import json
import logging
import os
import pwd
import re
import signal
from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode, urlparse

import jinja2
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import httpclient, ioloop, web
from tornado.httpserver import HTTPServer

from portal import hub_config
from portal import settings as site_settings
from portal.cluster import ClusterSource, check_profile, resource_lines
from portal.hub_config import HSTS
from portal.store import Conflict, NotFound, ProfileStore, fields_of
from spawners.profiles import ProfileError, profile_from_dict, unix_groups
from spawners.slice import FieldError

from . import ADMIN_SCOPE

log = logging.getLogger("portal.service")

TEMPLATES = Path(__file__).parent / "templates"
INT_FIELDS = (
    "max_gpus",
    "cores_per_gpu",
    "mem_per_gpu_gb",
    "default_hours",
    "max_hours",
    "revision",
)
TEXT_FIELDS = ("name", "display_name", "description", "environment", "partition")
MAX_BODY = 64 * 1024  # bytes of a JSON body
MAX_REVISION = 2**31  # as spawners.profiles checks a profile's revision
RESERVED_NAMES = frozenset({"new"})  # page paths under profiles/


class InUse(FieldError):
    """A profile that running sessions use: it may be disabled, not deleted."""


def whole_number(text):
    """``text`` (a form or query argument) as an int, or None unless it is 1 to 9 digits.

    ASCII digits only: ``str.isdigit`` takes "²", which ``int`` refuses; and
    at most 9 of them, so a number never outgrows what SQLite stores and compares.
    """
    text = text.strip()
    return int(text) if re.fullmatch(r"[0-9]{1,9}", text) else None


def form_to_dict(arguments):
    """A profile form's fields (lists of bytes) -> a dict for ``profile_from_dict``.

    Whole numbers stay text when they are not digits, so the validation says
    which field is wrong; nothing is dropped silently.
    """

    def value(key):
        raw = arguments.get(key)
        return raw[-1].decode("utf-8", "replace") if raw else None

    data = {}
    for key in TEXT_FIELDS:
        if value(key) is not None:
            data[key] = value(key)
    for key in INT_FIELDS:
        text = value(key)
        if text is not None:
            number = whole_number(text)
            data[key] = text.strip() if number is None else number
    if value("groups") is not None:
        data["groups"] = [g for g in re.split(r"[\s,]+", value("groups")) if g]
    data["enabled"] = value("enabled") in ("on", "true", "1")
    return data


def environments(prefix):
    """The environments installed under ``[envs] prefix`` that sessions can use."""
    envs = Path(prefix) / "envs"
    try:
        return sorted(p.name for p in envs.iterdir() if (p / "bin" / "python").exists())
    except OSError:
        return []


class ProfileOperations:
    """Validated, audited writes of profiles; used by the pages and the API."""

    def __init__(self, store, cluster, settings, hub_api):
        self.store = store
        self.cluster = cluster
        self.settings = settings
        self.hub_api = hub_api
        slurm = settings["slurm"]
        self.defaults = {
            "partition": slurm["partition"],
            "cores_per_gpu": slurm["cores_per_gpu"],
            "mem_per_gpu_gb": slurm["mem_per_gpu_gb"],
            "default_hours": slurm["default_hours"],
            "max_hours": slurm["max_hours"],
        }

    async def validate(self, data):
        """A Profile from ``data``, checked on its own and against the live cluster."""
        profile = profile_from_dict(data)
        installed = environments(self.settings["envs"]["prefix"])
        if installed and profile.environment not in [e for e in installed if e != "hub"]:
            choices = ", ".join(e for e in installed if e != "hub")
            raise ProfileError(
                f"Environment {profile.environment!r} is not installed (environments: {choices})",
                "environment",
            )
        view = await self.cluster.view()
        check_profile(profile, view.partitions)
        return profile

    async def create(self, data, author):
        data = {**self.defaults, **data}
        data.pop("revision", None)
        if isinstance(data.get("name"), str) and data["name"] in RESERVED_NAMES:
            # profiles/new is the form for a new profile: such a profile's page would be lost
            raise ProfileError(f"name {data['name']!r} is reserved by the editor's pages", "name")
        return self.store.create(await self.validate(data), author)

    def _revision(self, data):
        revision = data.pop("revision", None)
        if (
            isinstance(revision, bool)
            or not isinstance(revision, int)
            or not 0 <= revision <= MAX_REVISION
        ):
            raise ProfileError(
                "revision (the revision you edit, a whole number) is required", "revision"
            )
        return revision

    async def save(self, name, data, author, action="update"):
        """Store ``data`` over profile ``name``; fields not given keep their values."""
        current = self.store.get(name)
        data = dict(data)
        if data.get("name", name) != name:
            raise ProfileError("A profile cannot be renamed; duplicate it instead", "name")
        revision = self._revision(data)
        merged = {**fields_of(current), **data, "name": name}
        return self.store.update(await self.validate(merged), revision, author, action)

    async def set_enabled(self, name, enabled, revision, author):
        data = {"enabled": enabled, "revision": revision}
        return await self.save(name, data, author, "enable" if enabled else "disable")

    async def revert(self, name, to_revision, revision, author):
        old = self.store.revision(name, to_revision)
        return await self.save(name, {**old, "revision": revision}, author, "revert")

    async def delete(self, name, revision, author):
        self.store.get(name)
        users = [s["user"] for s in await self.sessions() if s["profile"] == name]
        if users:
            raise InUse(
                f"Profile {name!r} is in use by running sessions ({', '.join(sorted(users))}); "
                "disable it instead, or delete it when they have ended",
                "name",
            )
        self.store.delete(name, revision, author)

    async def sessions(self):
        """The hub's active servers: [{"user", "profile", "gpus", "hours", "started", ...}]."""
        users = await self.hub_api("users?state=active")
        sessions = []
        for user in users:
            for server in user.get("servers", {}).values():
                options = server.get("user_options") or {}
                sessions.append(
                    {
                        "user": user["name"],
                        "profile": options.get("profile", ""),
                        "gpus": options.get("gpus"),
                        "hours": options.get("hours"),
                        "started": server.get("started"),
                        "ready": server.get("ready"),
                        "pending": server.get("pending"),
                    }
                )
        return sessions


def profile_json(profile):
    d = profile.to_dict()
    return {k: d[k] for k in ("name", *fields_of(profile), "revision")}


class BaseHandler(HubOAuthenticated, web.RequestHandler):
    def set_default_headers(self):
        # Served over HTTPS (the hub says so through JUPYTERHUB_COOKIE_OPTIONS,
        # which also makes the login cookie Secure): browsers keep to HTTPS.
        if self.hub_auth.cookie_options.get("secure"):
            self.set_header("Strict-Transport-Security", HSTS)

    @property
    def ops(self):
        return self.settings["operations"]

    @property
    def store(self):
        return self.ops.store

    @property
    def is_admin(self):
        user = self.current_user or {}
        return bool(user.get("admin")) or ADMIN_SCOPE in user.get("scopes", ())

    @property
    def author(self):
        return self.current_user["name"]

    @property
    def groups(self):
        """The user's Unix groups (LDAP through NSS), as the spawner matches them."""
        try:
            return unix_groups(pwd.getpwnam(self.current_user["name"]))
        except (KeyError, TypeError):
            return []

    def offered(self):
        return [p for p in self.store.profiles() if self.is_admin or p.allows(self.groups)]

    def profile_or_404(self, name):
        try:
            return self.store.get(name)
        except NotFound as e:
            raise web.HTTPError(404, str(e)) from None

    def require_admin(self):
        if not self.is_admin:
            raise web.HTTPError(403, "Only portal admins may change profiles")

    def render_page(self, template_name, **context):
        prefix = self.settings["service_prefix"]
        hub = self.settings["hub_prefix"]
        template = self.settings["jinja"].get_template(template_name)
        self.write(
            template.render(
                user=self.current_user,
                is_admin=self.is_admin,
                prefix=prefix,
                hub_prefix=hub,
                static=url_path_join(hub, "static/"),
                logout_url=url_path_join(hub, "logout"),
                xsrf_token=self.xsrf_token.decode(),
                **{"active": "", **context},
            )
        )

    def write_error(self, status_code, **kwargs):
        message = self._reason
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        self.render_page("error.html", status_code=status_code, message=message)


class APIHandler(BaseHandler):
    def check_referer(self):
        return True

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None))[1]
        message = self._reason
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"error": message, "field": None}))

    def fail(self, status, message, field=None):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": str(message), "field": field}))

    def send(self, data, status=200):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def body(self):
        if len(self.request.body) > MAX_BODY:
            raise FieldError(f"The request body is larger than {MAX_BODY} bytes")
        try:
            data = json.loads(self.request.body or b"null")
            # \u escapes can spell half a surrogate pair: not text, and no database stores it
            json.dumps(data, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise FieldError(
                "The request body has text that is not valid Unicode (an unpaired surrogate)"
            ) from None
        except RecursionError:
            raise FieldError("The request body is nested too deeply") from None
        except ValueError:
            raise FieldError("The request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise FieldError("The request body must be a JSON object")
        return data

    async def run(self, operation, success_status=200):
        """Run a write; its errors as JSON with the field they concern."""
        try:
            result = await operation()
        except NotFound as e:
            return self.fail(404, e)
        except Conflict as e:
            self.set_status(409)
            self.set_header("Content-Type", "application/json")
            changes = {k: list(v) for k, v in e.changes.items()}
            return self.finish(
                json.dumps(
                    {
                        "error": str(e),
                        "field": "revision",
                        "current": profile_json(e.current),
                        "changes": changes,
                    }
                )
            )
        except InUse as e:
            return self.fail(409, e, e.field)
        except FieldError as e:
            return self.fail(400, e, e.field)
        if result is None:
            self.set_status(204)
            return self.finish()
        self.send(profile_json(result), success_status)


# -- pages -------------------------------------------------------------------


class RootHandler(BaseHandler):
    @web.authenticated
    def get(self):
        self.redirect(url_path_join(self.settings["service_prefix"], "profiles"))


class ProfilesPage(BaseHandler):
    @web.authenticated
    def get(self):
        profiles = self.offered()
        self.render_page(
            "profiles.html",
            profiles=profiles,
            lines={p.name: resource_lines(p) for p in profiles},
            message=self.get_argument("message", ""),
        )


class ProfileEditPage(BaseHandler):
    """GET: the form (``profiles/new``, ``profiles/new?from=NAME``, ``profiles/NAME``);
    POST: save it (create or update)."""

    @web.authenticated
    def get(self, name):
        self.require_admin()
        if name == "new":
            source = self.get_argument("from", "")
            if source:
                base = fields_of(self.profile_or_404(source))
                data = {**base, "name": f"{source}-copy"[:32], "enabled": False}
            else:
                data = {"enabled": True, "max_gpus": 1}  # form() fills in the rest
            return self.form(data, new=True)
        profile = self.profile_or_404(name)
        self.form(profile_json(profile), new=False)

    def form(self, data, new, error=None, field=None, status=200):
        blank = {**self.ops.defaults, "name": "", "display_name": "", "description": ""}
        blank.update(environment="", groups=[], enabled=False, max_gpus="", revision=0)
        data = {**blank, **data}
        lines = {}
        try:
            lines = resource_lines(profile_from_dict({**self.ops.defaults, **data, "revision": 0}))
        except FieldError:
            pass
        self.set_status(status)
        self.render_page(
            "profile_form.html",
            data=data,
            new=new,
            error=error,
            field=field,
            lines=lines,
            environments=[
                e for e in environments(self.ops.settings["envs"]["prefix"]) if e != "hub"
            ],
        )

    @web.authenticated
    async def post(self, name):
        self.require_admin()
        data = form_to_dict(self.request.arguments)
        new = name == "new"
        try:
            if new:
                profile = await self.ops.create(data, self.author)
                message = f"Created profile {profile.name} (revision {profile.revision})"
            else:
                profile = await self.ops.save(name, data, self.author)
                message = f"Saved profile {profile.name} (revision {profile.revision})"
        except Conflict as e:
            # keep what the admin typed; the next save is over the current revision
            shown = {**data, "name": name, "revision": e.current.revision}
            return self.form(shown, new, str(e), "revision", 409)
        except NotFound as e:
            raise web.HTTPError(404, str(e)) from None
        except FieldError as e:
            return self.form({**data, "name": data.get("name", name)}, new, str(e), e.field, 400)
        self.redirect(self.page_url("profiles", message=message))

    def page_url(self, path, **query):
        url = url_path_join(self.settings["service_prefix"], path)
        return f"{url}?{urlencode(query)}" if query else url


class ProfileActionPage(ProfileEditPage):
    """POST profiles/NAME/{enable,disable,delete,revert}."""

    @web.authenticated
    async def post(self, name, action):
        self.require_admin()
        revision = whole_number(self.get_argument("revision", ""))
        try:
            if action in ("enable", "disable"):
                p = await self.ops.set_enabled(name, action == "enable", revision, self.author)
                message = f"Profile {name} {action}d (revision {p.revision})"
            elif action == "delete":
                await self.ops.delete(name, revision, self.author)
                message = f"Deleted profile {name}"
            else:  # revert
                to = whole_number(self.get_argument("to", ""))
                to = -1 if to is None else to
                p = await self.ops.revert(name, to, revision, self.author)
                message = f"Profile {name} reverted to revision {to}: now revision {p.revision}"
        except NotFound as e:
            raise web.HTTPError(404, str(e)) from None
        except (Conflict, FieldError) as e:
            return self.redirect(self.page_url("profiles", message=f"Not done: {e}"))
        self.redirect(self.page_url("profiles", message=message))


class HistoryPage(BaseHandler):
    @web.authenticated
    def get(self, name):
        self.require_admin()
        history = self.store.history(name)
        if not history:
            raise web.HTTPError(404, f"No profile named {name[:40]!r} was ever stored")
        try:
            current = self.store.get(name)
        except NotFound:
            current = None
        self.render_page("history.html", name=name, history=history, current=current)


class ClusterPage(BaseHandler):
    @web.authenticated
    async def get(self):
        view = await self.ops.cluster.view()
        sessions = []
        if self.is_admin:
            try:
                sessions = await self.ops.sessions()
            except Exception as e:  # the page still shows the cluster
                log.warning("could not list sessions from the hub: %s", e)
            by_user = {j.user: j for j in view.jobs.values()}
            now = datetime.now()
            for s in sessions:
                job = by_user.get(s["user"])
                s["job"] = job
                left = (job.end - now).total_seconds() if job and job.end and job.running else None
                s["time_left"] = format_left(left)
        partitions = sorted(view.partitions.values(), key=lambda p: p.name)
        self.render_page("cluster.html", view=view, partitions=partitions, sessions=sessions)


def format_left(seconds):
    if seconds is None:
        return ""
    seconds = max(int(seconds), 0)
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


# -- the JSON API ------------------------------------------------------------


class ProfilesAPI(APIHandler):
    @web.authenticated
    def get(self):
        self.send([profile_json(p) for p in self.offered()])

    @web.authenticated
    async def post(self):
        self.require_admin()
        await self.run(lambda: self._create(), 201)

    async def _create(self):
        return await self.ops.create(self.body(), self.author)


class ProfileAPI(APIHandler):
    @web.authenticated
    def get(self, name):
        try:
            profile = self.store.get(name)
        except NotFound as e:
            return self.fail(404, e)
        if not (self.is_admin or profile.allows(self.groups)):
            return self.fail(404, f"No profile named {name[:40]!r}")
        self.send(profile_json(profile))

    @web.authenticated
    async def put(self, name):
        self.require_admin()
        await self.run(lambda: self._save(name))

    async def _save(self, name):
        return await self.ops.save(name, self.body(), self.author)

    @web.authenticated
    async def delete(self, name):
        self.require_admin()
        revision = whole_number(self.get_argument("revision", ""))

        async def delete():
            if revision is None:
                raise ProfileError(
                    "?revision= (the revision you delete, a whole number) is required", "revision"
                )
            await self.ops.delete(name, revision, self.author)

        await self.run(delete)


class CheckAPI(APIHandler):
    """POST a profile: the validation's verdict and the sbatch lines, nothing stored."""

    @web.authenticated
    async def post(self):
        self.require_admin()
        try:
            data = {**self.ops.defaults, **self.body(), "revision": 0}
            profile = await self.ops.validate(data)
        except FieldError as e:
            return self.send({"error": str(e), "field": e.field})
        self.send({"error": None, "field": None, "lines": resource_lines(profile)})


# -- the application -----------------------------------------------------------


def create_application(settings=None, store=None):
    settings = settings or site_settings.load()
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/portal/")
    hub_prefix = url_path_join(os.environ.get("JUPYTERHUB_BASE_URL", "/"), "hub/")
    hub_auth = HubOAuth(api_token=os.environ["JUPYTERHUB_API_TOKEN"], cache_max_age=60)
    if store is None:
        store = ProfileStore(hub_config.store_url(settings))
        store.upgrade()  # the hub has done it already, unless the service runs alone
    cluster = ClusterSource(
        hub_config.cluster_snapshot(settings),
        max_age=max(3 * settings["slurm"]["cluster_interval"], 60),
        timeout=settings["slurm"]["command_timeout"],
    )
    client = httpclient.AsyncHTTPClient()

    async def hub_api(path):
        response = await client.fetch(
            url_path_join(hub_auth.api_url, path),
            headers={"Authorization": f"token {hub_auth.api_token}"},
            request_timeout=20,
        )
        return json.loads(response.body)

    operations = ProfileOperations(store, cluster, settings, hub_api)
    jinja = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )

    def route(path):
        return url_path_join(prefix, path)

    name = r"([a-z][a-z0-9-]{0,31}|new)"
    handlers = [
        (prefix, RootHandler),
        (route("oauth_callback"), HubOAuthCallbackHandler),
        (route("profiles"), ProfilesPage),
        (route(f"profiles/{name}"), ProfileEditPage),
        (route(f"profiles/{name}/(enable|disable|delete|revert)"), ProfileActionPage),
        (route(f"profiles/{name}/history"), HistoryPage),
        (route("cluster"), ClusterPage),
        (route("api/profiles"), ProfilesAPI),
        (route("api/profiles/([^/]+)"), ProfileAPI),
        (route("api/check"), CheckAPI),
    ]
    return web.Application(
        handlers,
        hub_auth=hub_auth,
        operations=operations,
        jinja=jinja,
        service_prefix=prefix,
        hub_prefix=hub_prefix,
        cookie_secret=os.urandom(32),
        login_url=hub_auth.login_url,
        xsrf_cookies=False,  # HubOAuth checks XSRF for cookie-authenticated writes
    )


def main():
    logging.basicConfig(
        level=logging.INFO, format="[%(levelname).1s %(asctime)s %(name)s] %(message)s"
    )
    app = create_application()
    url = os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")
    parsed = urlparse(url)
    # No X-Forwarded-* trust: the proxy and any local user alike connect from
    # loopback, so such headers could be forged by a direct connection.
    server = HTTPServer(app, xheaders=False)
    server.listen(parsed.port, parsed.hostname)
    log.info("portal admin service on %s", url)
    # The hub starts and stops this service; if the hub dies without stopping
    # it, it goes too (a new hub starts its own, with a new token).
    parent = os.getppid()

    def exit_with_the_hub():
        if os.getppid() != parent:
            log.warning("the hub (pid %d) is gone; stopping", parent)
            ioloop.IOLoop.current().stop()

    ioloop.PeriodicCallback(exit_with_the_hub, 1000).start()
    loop = ioloop.IOLoop.current()
    # The hub stops its services with SIGINT (then SIGTERM after 10 s). Set
    # explicitly: a hub started in the background (hub.sh) passes SIGINT on
    # ignored, Python then installs no handler, and the hub's stop waited its
    # full 10 s for this service.
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.asyncio_loop.add_signal_handler(signum, loop.stop)
    loop.start()
    log.info("stopped")
