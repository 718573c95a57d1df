"""The admin service's JSON API: ``api/profiles``, ``api/profiles/NAME``,
``api/check``; the site's container images: ``api/images`` (each with its
checks) and ``api/images/NAME/check``; and the sessions' time:
``api/sessions/NAME`` (how much longer it may run),
``api/sessions/NAME/extend`` and ``api/sessions/extensions`` (the audit).

Errors are JSON too: ``{"error": message, "field": the field it concerns or
null}``; a save refused by its image's check adds ``"check"``, the recorded
check with its output ``lines``.
"""

import json

from tornado import web

from portal.core.numbers import no_constant, whole_number
from portal.core.profiles import ProfileError
from portal.core.slice import FieldError
from portal.core.timelimit import ExtendError, parse_hours
from portal.extend import may_extend
from portal.service.cluster import resource_lines
from portal.store import Conflict, NotFound

from .handlers import BaseHandler
from .images import ImageCheckFailed
from .operations import InUse, profile_json

MAX_BODY = 64 * 1024  # bytes of a JSON body


UNAUTHENTICATED = (
    "This API call has no login: send a JupyterHub token (Authorization: token TOKEN), "
    "or the login cookie with its X-XSRFToken header"
)


class APIHandler(BaseHandler):
    """The base of the JSON API: every answer JSON, errors included; a call
    without a login or token is answered 401, never the login page's redirect."""

    def check_referer(self):
        return True

    def prepare(self):
        if self.current_user is None:
            self.set_header("WWW-Authenticate", 'token realm="portal"')
            raise web.HTTPError(401, UNAUTHENTICATED)

    def write_error(self, status_code, **kwargs):
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"error": self.error_message(kwargs), "field": None}))

    def fail(self, status, message, field=None):
        self.send({"error": str(message), "field": field}, status)

    def send(self, data, status=200):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data, allow_nan=False))

    def body(self):
        if len(self.request.body) > MAX_BODY:
            raise FieldError(f"The request body is larger than {MAX_BODY} bytes")
        try:
            data = json.loads(self.request.body or b"null", parse_constant=no_constant)
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
            changes = {k: list(v) for k, v in e.changes.items()}
            current = profile_json(e.current)
            body = {"error": str(e), "field": "revision", "current": current, "changes": changes}
            return self.send(body, 409)
        except InUse as e:
            return self.fail(409, e, e.field)
        except ImageCheckFailed as e:
            return self.send({"error": str(e), "field": e.field, "check": e.check}, 400)
        except FieldError as e:
            return self.fail(400, e, e.field)
        if result is None:
            self.set_status(204)
            return self.finish()
        self.send(profile_json(result), success_status)


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
    """POST a profile: the validation's verdict and the sbatch lines, nothing
    stored; ``image``: why its image is not offered yet ("" when it is). The
    image's check itself runs when the profile is saved."""

    @web.authenticated
    async def post(self):
        self.require_admin()
        try:
            data = {**self.ops.defaults, **self.body(), "revision": 0}
            profile = await self.ops.validate(data)
        except FieldError as e:
            return self.send({"error": str(e), "field": e.field})
        image = self.ops.images.problems([profile]).get(profile.name, "")
        self.send({"error": None, "field": None, "lines": resource_lines(profile), "image": image})


class ImagesAPI(APIHandler):
    """``GET api/images``: the site's images, each with its info, its latest
    check per framework (``current``: made at the image's present stamp) and
    the profiles that name it (admins)."""

    @web.authenticated
    def get(self):
        self.require_admin("Only portal admins may see the site's images and their checks")
        self.send(self.ops.images.overview(self.store.profiles()))


class ImageCheckAPI(APIHandler):
    """``POST api/images/NAME/check``: check the image now, with its own
    framework and every profile's environment that names it; the checks."""

    @web.authenticated
    async def post(self, name):
        self.require_admin("Only portal admins may check images")
        try:
            checks = await self.ops.images.check_all(name, self.store.profiles(), self.author)
        except FieldError as e:
            return self.fail(404, e, e.field)
        self.send(checks)


class SessionHandler(APIHandler):
    """A user's session, for its owner and portal admins only: 403 for anyone
    else, before anything about the session is told."""

    @property
    def sessions(self):
        return self.settings["sessions"]

    async def answer(self, name, operation):
        if not may_extend(self.current_user["name"], name, self.is_admin):
            return self.fail(403, "Only the session's owner or a portal admin may see or extend it")
        try:
            result = await operation()
        except ExtendError as e:
            return self.fail(e.status, e, e.field)
        except FieldError as e:
            return self.fail(400, e, e.field)
        self.send(result)


class SessionAPI(SessionHandler):
    """``GET api/sessions/NAME``: the session's job, time limit and end, and how
    many more hours its profile allows (``hours_left``)."""

    @web.authenticated
    async def get(self, name):
        await self.answer(name, lambda: self.sessions.allowed(name))


class SessionExtendAPI(SessionHandler):
    """``POST api/sessions/NAME/extend`` ``{"hours": N}``: N more hours, within
    the profile's ``max_hours``; answers with the new limit."""

    @web.authenticated
    async def post(self, name):
        await self.answer(name, lambda: self._extend(name))

    async def _extend(self, name):
        hours = parse_hours(self.body().get("hours"))
        return await self.sessions.extend(name, hours, self.author)


class ExtensionsAPI(APIHandler):
    """``GET api/sessions/extensions``: the latest extensions, newest first (admins)."""

    @web.authenticated
    def get(self):
        if not self.is_admin:
            return self.fail(403, "Only portal admins may read the extensions of every session")
        user = self.get_argument("user", None)
        self.send(self.store.extensions(user=user))
