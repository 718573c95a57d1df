"""The admin service's HTML pages: the profiles, their editor and history,
the site's container images and their checks, the cluster."""

import json
import logging
import re
from datetime import datetime

from jupyterhub.utils import url_path_join
from tornado import web

from portal.core.durations import time_left
from portal.core.numbers import whole_number
from portal.core.profiles import profile_from_dict
from portal.core.slice import FieldError
from portal.service.cluster import resource_lines
from portal.store import Conflict, NotFound, fields_of

from .handlers import BaseHandler
from .images import ImageCheckFailed
from .operations import environments, form_to_dict, profile_json

log = logging.getLogger("portal.service")

API_PATH = re.compile(r"^api(/|$)")  # under the service's prefix
NO_ROUTE = "The portal's API has no such route (docs/api/service.yaml describes them)"


class APINotFound(web.HTTPError):
    """A path under ``api/`` with no route: answered as the API answers, in JSON."""


class RootHandler(BaseHandler):
    @web.authenticated
    def get(self):
        self.redirect(url_path_join(self.settings["service_prefix"], "profiles"))


class NotFoundPage(BaseHandler):
    """A path the service has no route for: its own error page, in the
    site's theme (tornado's default is a bare text page); after a login."""

    def prepare(self):
        if API_PATH.match(self.request.path[len(self.settings["service_prefix"]) :]):
            raise APINotFound(404, NO_ROUTE)  # an API client's: JSON, with or without a login
        self.page_not_found()

    @web.authenticated
    def page_not_found(self):
        raise web.HTTPError(404, "The portal has no such page.")

    def write_error(self, status_code, **kwargs):
        if isinstance(kwargs.get("exc_info", (None, None))[1], APINotFound):
            self.set_header("Content-Type", "application/json")
            return self.finish(json.dumps({"error": NO_ROUTE, "field": None}))
        super().write_error(status_code, **kwargs)


class ProfilesPage(BaseHandler):
    @web.authenticated
    def get(self):
        profiles = self.offered()
        self.render_page(
            "profiles.html",
            profiles=profiles,
            lines={p.name: resource_lines(p) for p in profiles},
            problems=self.ops.images.problems(profiles),
            runtime=self.ops.images.runtime(),
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

    def form(self, data, new, error=None, field=None, status=200, check=None):
        """The form with ``data``; ``check``: the image check that refused
        it, else the latest of the profile's image with its environment."""
        blank = {**self.ops.defaults, "name": "", "display_name": "", "description": ""}
        blank.update(environment="", groups=[], enabled=False, max_gpus="", max_nodes=1, revision=0)
        blank.update(idle_minutes=0, max_array=16, image="", user_images=False)
        blank.update(partitions=[], gpu_types=[], choose=[], features=[], max_cores=0, max_mem_gb=0)
        data = {**blank, **data}
        images = self.ops.images
        if check is None and data["image"]:
            check = self.store.latest_image_checks().get((data["image"], data["environment"]))
        if check is not None:
            check = {**check, "current": images.current(check)}
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
            images=images.names(),
            images_dir=images.images_dir,
            check=check,
            runtime=images.runtime(),
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
            shown = {**data, "name": data.get("name", name)}
            check = e.check if isinstance(e, ImageCheckFailed) else None
            return self.form(shown, new, str(e), e.field, 400, check)
        self.redirect(self.page_url("profiles", message=message))


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


class ImagesPage(BaseHandler):
    """GET images: the site's images, what each is, its checks and the
    profiles that name it (admins)."""

    @web.authenticated
    def get(self):
        self.require_admin("Only portal admins may see the site's images and their checks")
        images = self.ops.images
        self.render_page(
            "images.html",
            images=images.overview(self.store.profiles()),
            images_dir=images.images_dir,
            history=self.store.image_checks(limit=50),
            runtime=images.runtime(),
            message=self.get_argument("message", ""),
        )


class ImageCheckPage(BaseHandler):
    """POST images/NAME/check: check the image now with its own framework and
    every profile's environment that names it (admins)."""

    @web.authenticated
    async def post(self, name):
        self.require_admin("Only portal admins may check images")
        try:
            checks = await self.ops.images.check_all(name, self.store.profiles(), self.author)
        except FieldError as e:
            return self.redirect(self.page_url("images", message=f"Not done: {e}"))
        verdicts = "; ".join(
            f"{c['framework'] or 'no framework'}: {'ok' if c['ok'] else 'FAILED'}" for c in checks
        )
        self.redirect(self.page_url("images", message=f"Checked image {name}: {verdicts}"))


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
        sessions, extensions = [], []
        if self.is_admin:
            extensions = self.store.extensions(limit=50)
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
        self.render_page(
            "cluster.html",
            view=view,
            partitions=partitions,
            sessions=sessions,
            extensions=extensions,
        )


def format_left(seconds):
    if seconds is None:
        return ""
    return time_left(max(int(seconds), 0) // 60)
