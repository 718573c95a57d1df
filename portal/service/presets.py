"""The admin service's presets (issue 38): the presets published for
everyone, and publishing one.

A portal admin saves a preset as any user does (the hub's spawn page,
``spawners.presets``, which checks its options as the spawn form's), then
publishes it here: a copy of it, owned by no one (``portal.presets.PUBLISHED``),
which every user's home page lists and starts where their profiles allow.

- ``GET presets``: the published presets and (admins) their own, each with
  "Publish"; ``POST presets/ID/publish``, ``POST presets/ID/unpublish``;
- ``GET api/presets``: the published presets; ``POST api/presets/ID/publish``
  (201, the published copy); ``DELETE api/presets/ID`` (a published one).
"""

from tornado import web

from portal import presets
from portal.core.slice import FieldError
from portal.presets import PUBLISHED
from portal.store import NotFound

from .api import APIHandler
from .handlers import BaseHandler

ADMINS_ONLY = "Only portal admins publish presets for everyone"


def publish(store, preset_id, admin):
    """A published copy of ``admin``'s own preset ``preset_id`` (NotFound
    if not theirs; PresetError when a published one has its name)."""
    try:
        preset = store.preset(preset_id)
    except NotFound:
        preset = None
    if preset is None or preset["owner"] != admin:
        raise NotFound(f"No preset {preset_id} of yours")
    return store.save_preset(
        PUBLISHED, preset["name"], preset["options"], preset["server_name"], admin
    )


def unpublish(store, preset_id):
    """Delete the published preset ``preset_id``; its name."""
    preset = store.preset(preset_id)
    if not preset["published"]:
        raise NotFound(f"No published preset {preset_id}")
    store.delete_preset(preset_id, PUBLISHED)
    return preset["name"]


def shown(preset):
    return {**preset, "summary": presets.summary(preset["options"])}


class PresetsPage(BaseHandler):
    @web.authenticated
    def get(self):
        own = [p for p in self.store.presets(self.author) if not p["published"]]
        self.render_page(
            "presets.html",
            active="presets",
            published=[shown(p) for p in self.store.published_presets()],
            own=[shown(p) for p in own] if self.is_admin else [],
            message=self.get_argument("message", ""),
        )


class PresetActionPage(BaseHandler):
    @web.authenticated
    def post(self, preset_id, action):
        self.require_admin(ADMINS_ONLY)
        try:
            if action == "publish":
                p = publish(self.store, int(preset_id), self.author)
                message = f"Published preset {p['name']!r} for everyone"
            else:
                message = f"Unpublished preset {unpublish(self.store, int(preset_id))!r}"
        except NotFound as e:
            raise web.HTTPError(404, str(e)) from None
        except FieldError as e:
            return self.redirect(self.page_url("presets", message=f"Not done: {e}"))
        self.redirect(self.page_url("presets", message=message))


class PresetsAPI(APIHandler):
    @web.authenticated
    def get(self):
        self.send([shown(p) for p in self.store.published_presets()])


class PresetPublishAPI(APIHandler):
    @web.authenticated
    def post(self, preset_id):
        self.require_admin(ADMINS_ONLY)
        try:
            self.send(shown(publish(self.store, int(preset_id), self.author)), 201)
        except NotFound as e:
            self.fail(404, e)
        except FieldError as e:
            self.fail(400, e, e.field)


class PresetAPI(APIHandler):
    @web.authenticated
    def delete(self, preset_id):
        self.require_admin(ADMINS_ONLY)
        try:
            unpublish(self.store, int(preset_id))
        except NotFound as e:
            return self.fail(404, e)
        self.set_status(204)
        self.finish()


def routes(route):
    return [
        (route("presets"), PresetsPage),
        (route(r"presets/(\d{1,12})/(publish|unpublish)"), PresetActionPage),
        (route("api/presets"), PresetsAPI),
        (route(r"api/presets/(\d{1,12})/publish"), PresetPublishAPI),
        (route(r"api/presets/(\d{1,12})"), PresetAPI),
    ]
