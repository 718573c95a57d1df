"""Saved presets on the hub (issue 38): save the spawn page's choice under a
name, start it from the home page in one click, edit it, delete it.

A preset is the spawn form's options (``spawners.form``: its keys are
``form.OPTION_KEYS``, checked by ``form.check_options``) with a name and the
session it starts; the store keeps them (``portal.store``, ``portal.presets``).

Pages (forms posted with the page's XSRF token):

- ``POST /hub/portal/presets``: the spawn page's "Save as preset" (the spawn
  form's own fields, with ``preset_name``, ``preset_server``, ``preset_id``
  to change one, ``preset_publish`` for an admin's preset for everyone);
- ``GET /hub/portal/presets/ID/edit``: the spawn page filled with the preset;
- ``POST /hub/portal/presets/ID/start`` (``reset``: fields to reset to the
  profile's defaults): the preset's options are resolved as the spawn's
  would be (``PortalSpawner.resolve_options``); one that no longer fits
  sends the user home with the message, which names the field, and an offer
  to start it with that field reset; one that fits is spawned through
  JupyterHub's own path (``SpawnHandler``: the named-server checks, the
  pending page), and ``load_user_options`` validates it again at start;
- ``POST /hub/portal/presets/ID/delete``.

API (JSON; a user's token or the page's cookie with its XSRF token, holding
the scope to start the user's servers): ``GET``/``POST /hub/api/portal/presets``
(``{"name", "options", "server_name", "published"}``), ``GET``/``PUT``/
``DELETE /hub/api/portal/presets/ID``. Each preset comes with its fit:
``"fits"``, and when false ``"error"``, ``"field"`` and ``"reset_options"``
(the options with that field reset). A preset starts through JupyterHub's
own API, ``POST /hub/api/users/NAME/server[s/SESSION]`` with its options.

A user sees and changes their own presets and uses the published ones; a
portal admin (``portal.roles``) also publishes and changes published ones
(here, or in the admin service's Presets page, ``portal.service.presets``).
"""

import json
from urllib.parse import urlencode

from jupyterhub.handlers.base import BaseHandler
from jupyterhub.utils import url_path_join
from tornado import web

from portal import presets
from portal.core.numbers import no_constant
from portal.core.slice import FieldError
from portal.presets import PUBLISHED, PresetError
from portal.roles import is_portal_admin
from portal.store import NotFound

from . import form, metrics
from .handlers import NOTICE_COOKIE, PortalAPIHandler, PortalSpawnHandler

SAVE_ROUTE = r"/portal/presets"
EDIT_ROUTE = r"/portal/presets/(\d{1,12})/edit"
ACTION_ROUTE = r"/portal/presets/(\d{1,12})/(start|delete)"
API_ROUTE = r"/api/portal/presets"
API_ITEM_ROUTE = r"/api/portal/presets/(\d{1,12})"
MAX_BODY = 64 * 1024


# -- what the handlers share ---------------------------------------------------


def checked(data, allow_named=True):
    """``(name, options, server_name)`` of a preset's ``data`` (``name``,
    ``options``, ``server_name``), the same for the form and the API;
    FieldError naming the field."""
    name = presets.check_name(data.get("name"))
    server_name = presets.check_server_name(data.get("server_name"))
    if server_name and not allow_named:
        raise PresetError(
            "This hub runs one session per user: leave the session's name empty", "server_name"
        )
    options = data.get("options")
    form.check_options(options)  # an unknown key, control characters: named
    return name, presets.clean_values(options), server_name


async def fit(spawner, options):
    """None when ``options`` start a session for ``spawner``'s user now, else
    the FieldError that says why (its ``field`` names the field): the
    profiles and the slice (``resolve_options``), then the site's Slurm
    (``check_site_choices``: an account removed, a reservation over), as
    ``load_user_options`` checks them at start."""
    try:
        await resolved(spawner, options)
    except FieldError as e:
        return e
    return None


async def resolved(spawner, options):
    """``(profile, slice)`` of ``options`` for ``spawner``'s user, checked as
    at start; FieldError naming the field."""
    profile, job_slice = spawner.resolve_options(dict(options))
    await spawner.check_site_choices(profile, job_slice)
    return profile, job_slice


async def fit_json(spawner, preset):
    """The preset with its fit, as the API and the home page give it."""
    problem = await fit(spawner, preset["options"])
    shown = {**preset, "summary": presets.summary(preset["options"]), "fits": problem is None}
    if problem is not None:
        shown["error"], shown["field"] = str(problem), problem.field
        if problem.field in preset["options"]:
            shown["reset_options"] = presets.reset(preset["options"], [problem.field])
    return shown


def may_change(preset, user_name, admin):
    """Whether ``user_name`` may change or delete ``preset``: their own, or a
    published one for a portal admin."""
    return preset["owner"] == user_name or (preset["published"] and admin)


def visible(store, preset_id, user_name):
    """The preset ``preset_id`` when ``user_name`` may use it (their own, or a
    published one), else 404: another user's is as one that does not exist."""
    try:
        preset = store.preset(int(preset_id))
    except NotFound:
        preset = None
    if preset is None or preset["owner"] not in (user_name, PUBLISHED):
        raise web.HTTPError(404, f"No preset {preset_id} of yours")
    return preset


def posted(body_arguments):
    """A form's fields as ``{key: [text]}`` (JupyterHub's spawn form's way)."""
    return {k: [b.decode("utf8", "replace") for b in v] for k, v in body_arguments.items()}


def edit_url(base_url, preset):
    """The page that edits ``preset``: the spawn page filled with it."""
    return url_path_join(base_url, "portal/presets", str(preset["id"]), "edit")


class PresetHandler(BaseHandler):
    def initialize(self, store):
        self.store = store

    @property
    def admin(self):
        return is_portal_admin(self.expanded_scopes)

    def notice(self, ok, text, **more):
        """Home, with ``text`` shown once (the card's notice, ``take_notice``)."""
        self._set_cookie(
            NOTICE_COOKIE,
            json.dumps({"ok": ok, "text": text, **more}),
            path=self.hub.base_url,
            expires_days=None,
        )
        self.redirect(url_path_join(self.hub.base_url, "home"), status=303)


# -- the pages ----------------------------------------------------------------


class PresetSaveHandler(PresetHandler):
    """``POST /hub/portal/presets``: the spawn page's fields as a preset."""

    @web.authenticated
    async def post(self):
        user = self.current_user
        fields = form.form_fields(posted(self.request.body_arguments))
        data = {
            "name": self.get_body_argument("preset_name", ""),
            "server_name": self.get_body_argument("preset_server", "").strip(),
            "options": {k: v for k, v in fields.items() if v != ""},
        }
        publish = self.get_body_argument("preset_publish", "") == "on"
        preset_id = self.get_body_argument("preset_id", "").strip()
        try:
            if publish and not self.admin:
                raise PresetError("Only portal admins publish presets for everyone", "published")
            name, options, server_name = checked(data, self.allow_named_servers)
            problem = await fit(user.spawner, options)
            if problem is not None:
                raise problem
            owner = PUBLISHED if publish else user.name
            if preset_id:
                old = visible(self.store, preset_id, user.name)
                if not may_change(old, user.name, self.admin) or old["owner"] != owner:
                    raise PresetError("You may not change this preset", "published")
            saved = self.store.save_preset(
                owner, name, options, server_name, user.name, int(preset_id) if preset_id else None
            )
        except (FieldError, NotFound) as e:
            self.log.info("Preset of %s not saved: %s", user.name, e)
            return self.notice(False, f"Preset not saved: {e}")
        self.log.info("%s saved preset %s (%s)", user.name, saved["id"], saved["name"])
        whose = " for everyone" if saved["published"] else ""
        self.notice(True, f"Saved preset {saved['name']!r}{whose}.")


class PresetEditHandler(PresetHandler, PortalSpawnHandler):
    """``GET /hub/portal/presets/ID/edit``: the spawn page, filled with the
    preset (as a spawn link fills it, with notes on what no longer fits),
    whose "Save preset" changes it."""

    @web.authenticated
    async def get(self, preset_id):
        user = self.current_user
        preset = visible(self.store, preset_id, user.name)
        if not may_change(preset, user.name, self.admin):
            raise web.HTTPError(403, "Only portal admins change published presets")
        spawner = user.spawner
        query = {k: [str(v)] for k, v in preset["options"].items()}
        spawner._link_options = form.link_fields(query)  # the spawn link's way
        options_form = await spawner.get_options_form()
        html = await self.render_template(
            "spawn.html",
            for_user=user,
            spawner_options_form=options_form,
            error_message="",
            url=url_concat_xsrf(url_path_join(self.hub.base_url, "spawn"), self.xsrf_token),
            spawner=spawner,
            portal_preset=preset,
        )
        self.finish(html)

    def post(self, *args):
        raise web.HTTPError(405)


def url_concat_xsrf(url, token):
    return f"{url}?{urlencode({'_xsrf': token.decode('ascii')})}"


class PresetActionHandler(PresetHandler, PortalSpawnHandler):
    """``POST /hub/portal/presets/ID/start`` and ``.../delete``."""

    def get(self, *args):
        raise web.HTTPError(405)

    @web.authenticated
    async def post(self, preset_id, action):
        user = self.current_user
        preset = visible(self.store, preset_id, user.name)
        if action == "delete":
            return self.delete_preset(preset)
        resets = [f for f in self.get_body_arguments("reset") if f in preset["options"]]
        options = presets.reset(preset["options"], resets)
        name = preset["name"]
        try:
            profile, job_slice = await resolved(user.spawner, options)
        except FieldError as e:
            self.log.info("Preset %s of %s does not fit: %s", preset["id"], user.name, e)
            metrics.refused("options")  # as the spawn form's refusal: nothing submitted
            more = {}
            if e.field in options:
                more = {"preset": preset["id"], "reset": [*resets, e.field], "field": e.field}
            return self.notice(False, f"Preset {name!r} was not started: {e}", **more)
        options = form.valid_options(profile, job_slice, options)  # as options_from_form's
        self.log.info("%s starts preset %s (%s): %s", user.name, preset["id"], name, options)
        await self.spawn_preset(user, preset["server_name"], options)

    def delete_preset(self, preset):
        user = self.current_user
        if not may_change(preset, user.name, self.admin):
            return self.notice(False, "Only portal admins delete published presets.")
        try:
            self.store.delete_preset(preset["id"], preset["owner"])
        except NotFound as e:
            return self.notice(False, f"Not deleted: {e}")
        self.log.info("%s deleted preset %s (%s)", user.name, preset["id"], preset["name"])
        self.notice(True, f"Deleted preset {preset['name']!r}.")

    async def spawn_preset(self, user, server_name, options):
        """As ``SpawnHandler._post`` does with a form's options (JupyterHub
        6.1.1: its named-server checks, its pending page)."""
        if server_name:
            await self._check_named_server_request(user, server_name, server_name)
        spawner = user.get_or_create_spawner(server_name, server_name, replace_failed=True)
        if spawner.ready or spawner.pending:
            which = f"Your session {server_name}" if server_name else "Your session"
            state = "is running already" if spawner.ready else f"is {spawner.pending}ing"
            return self.notice(False, f"{which} {state}: stop it first, then start the preset.")
        pending_url = self._get_pending_url(user, server_name)
        await self._wrap_spawn_single_user(
            user, server_name, server_name, spawner, pending_url, options
        )


# -- the API ------------------------------------------------------------------


class PresetsAPIHandler(PortalAPIHandler):
    def initialize(self, store):
        self.store = store

    def username(self):
        """The token's owner, a user whose token may start their servers; else 403."""
        user = self.current_user
        if user is None or getattr(user, "kind", "") != "user":
            raise web.HTTPError(403, "Presets are a user's: log in or use a user's token")
        scopes = self.expanded_scopes
        if "servers" not in scopes and f"servers!user={user.name}" not in scopes:
            raise web.HTTPError(403, "This token may not start your servers")
        return user.name

    @property
    def admin(self):
        return is_portal_admin(self.expanded_scopes)

    def send(self, data, status=200):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data, allow_nan=False))

    def refuse(self, error, status=400):
        self.send({"error": str(error), "field": getattr(error, "field", None)}, status)

    def body(self):
        if len(self.request.body) > MAX_BODY:
            raise PresetError(f"The request body is larger than {MAX_BODY} bytes")
        try:
            data = json.loads(self.request.body or b"{}", parse_constant=no_constant)
        except (ValueError, RecursionError) as e:
            raise PresetError(f"The request body is not JSON: {str(e)[:80]}") from None
        if not isinstance(data, dict):
            raise PresetError("The request body must be a JSON object")
        return data

    async def save(self, data, owner, preset_id=None):
        name, options, server_name = checked(data, self.allow_named_servers)
        problem = await fit(self.current_user.spawner, options)
        if problem is not None:
            raise problem
        return self.store.save_preset(
            owner, name, options, server_name, self.current_user.name, preset_id
        )


class PresetsAPI(PresetsAPIHandler):
    async def get(self):
        name = self.username()
        spawner = self.current_user.spawner
        self.send([await fit_json(spawner, p) for p in self.store.presets(name)])

    async def post(self):
        name = self.username()
        try:
            data = self.body()
            unknown = sorted(set(data) - {"name", "options", "server_name", "published"})
            if unknown:
                raise PresetError(f"Unknown field(s): {', '.join(unknown)[:80]}", unknown[0][:40])
            publish = data.get("published", False)
            if not isinstance(publish, bool):
                raise PresetError("published must be true or false", "published")
            if publish and not self.admin:
                raise PresetError("Only portal admins publish presets for everyone", "published")
            saved = await self.save(data, PUBLISHED if publish else name)
        except FieldError as e:
            return self.refuse(e)
        self.log.info("%s saved preset %s (%s) by the API", name, saved["id"], saved["name"])
        self.send(await fit_json(self.current_user.spawner, saved), 201)


class PresetAPI(PresetsAPIHandler):
    async def get(self, preset_id):
        name = self.username()
        preset = visible(self.store, preset_id, name)
        self.send(await fit_json(self.current_user.spawner, preset))

    def changeable(self, preset_id):
        name = self.username()
        preset = visible(self.store, preset_id, name)
        if not may_change(preset, name, self.admin):
            raise web.HTTPError(403, "Only portal admins change published presets")
        return preset

    async def put(self, preset_id):
        preset = self.changeable(preset_id)
        try:
            data = self.body()
            unknown = sorted(set(data) - {"name", "options", "server_name"})
            if unknown:
                raise PresetError(f"Unknown field(s): {', '.join(unknown)[:80]}", unknown[0][:40])
            merged = {k: data.get(k, preset[k]) for k in ("name", "options", "server_name")}
            saved = await self.save(merged, preset["owner"], preset["id"])
        except FieldError as e:
            return self.refuse(e)
        except NotFound as e:  # deleted meanwhile
            raise web.HTTPError(404, str(e)) from None
        self.send(await fit_json(self.current_user.spawner, saved))

    def delete(self, preset_id):
        preset = self.changeable(preset_id)
        try:
            self.store.delete_preset(preset["id"], preset["owner"])
        except NotFound as e:
            raise web.HTTPError(404, str(e)) from None
        self.set_status(204)
        self.finish()


def page_routes(store):
    """The pages' routes (under /hub) with their handler and its arguments."""
    return [
        (SAVE_ROUTE, PresetSaveHandler, {"store": store}),
        (EDIT_ROUTE, PresetEditHandler, {"store": store}),
        (ACTION_ROUTE, PresetActionHandler, {"store": store}),
    ]


def api_routes(store):
    """The API's routes (under /hub/api) with their handler and its arguments."""
    return [
        (API_ROUTE, PresetsAPI, {"store": store}),
        (API_ITEM_ROUTE, PresetAPI, {"store": store}),
    ]
