"""The admin service's writes of profiles, and the parsing of what admins type.

Every write goes through ``ProfileOperations``: the same validation (the
profile's own rules, then the live cluster's, then its image's check), the
same audit and the same optimistic locking for the pages and the API.
"""

import re
from pathlib import Path

from tornado.httpclient import HTTPClientError

from portal.core import usernames
from portal.core.idle import check_profile_idle
from portal.core.numbers import whole_number
from portal.core.profiles import MAX_REVISION, ProfileError, profile_from_dict, slice_defaults
from portal.core.slice import FieldError
from portal.extend import no_session
from portal.service.cluster import check_profile
from portal.store import fields_of

from .images import ImageChecks

INT_FIELDS = (
    "max_gpus",
    "max_nodes",
    "cores_per_gpu",
    "mem_per_gpu_gb",
    "default_hours",
    "max_hours",
    "idle_minutes",
    "max_array",
    "max_cores",
    "max_mem_gb",
    "revision",
)
LIST_FIELDS = ("groups", "partitions", "gpu_types", "choose", "features")  # typed as "a, b"
TEXT_FIELDS = ("name", "display_name", "description", "environment", "partition", "image")
BOOL_FIELDS = ("enabled", "user_images")  # checkboxes: absent from a form is false
RESERVED_NAMES = frozenset({"new"})  # page paths under profiles/


class InUse(FieldError):
    """A profile that running sessions use: it may be disabled, not deleted."""


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
            text = text.strip()
            number = whole_number(text)
            data[key] = text if number is None else number
    for key in LIST_FIELDS:
        if value(key) is not None:
            data[key] = [g for g in re.split(r"[\s,]+", value(key)) if g]
    for key in BOOL_FIELDS:
        data[key] = value(key) in ("on", "true", "1")
    return data


def environments(prefix):
    """The environments installed under ``[envs] prefix`` that sessions can use."""
    envs = Path(prefix) / "envs"
    try:
        return sorted(p.name for p in envs.iterdir() if (p / "bin" / "python").exists())
    except OSError:
        return []


def profile_json(profile):
    d = profile.to_dict()
    return {k: d[k] for k in ("name", *fields_of(profile), "revision")}


class ProfileOperations:
    """Validated, audited writes of profiles; used by the pages and the API."""

    def __init__(self, store, cluster, settings, hub_api, images=None):
        self.store = store
        self.cluster = cluster
        self.settings = settings
        self.hub_api = hub_api
        self.images = images or ImageChecks(store, settings)
        self.defaults = slice_defaults(settings)

    async def validate(self, data):
        """A Profile from ``data``, checked on its own and against the live cluster."""
        profile = profile_from_dict(data)
        check_profile_idle(profile, self.settings["culling"])
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

    async def checked(self, data, author):
        """``validate``, then, for an enabled profile of a site image, the
        image's check with the profile's environment (``ImageChecks.ensure``:
        the store's ok check at the image's stamp, or a new one, run for
        ``author``); ImageCheckFailed when it fails. A disabled profile is
        not offered: it is checked when it is enabled."""
        profile = await self.validate(data)
        if profile.image and profile.enabled:
            await self.images.ensure(profile.image, profile.environment, author)
        return profile

    async def create(self, data, author):
        data = {**self.defaults, **data}
        data.pop("revision", None)
        if isinstance(data.get("name"), str) and data["name"] in RESERVED_NAMES:
            # profiles/new is the form for a new profile: such a profile's page would be lost
            raise ProfileError(f"name {data['name']!r} is reserved by the editor's pages", "name")
        return self.store.create(await self.checked(data, author), author)

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
        return self.store.update(await self.checked(merged, author), revision, author, action)

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
        """The hub's active servers: [{"user", "profile", "gpus", "nodes", "hours", ...}]."""
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
                        "nodes": options.get("nodes") or 1,
                        "hours": options.get("hours"),
                        "started": server.get("started"),
                        "ready": server.get("ready"),
                        "pending": server.get("pending"),
                    }
                )
        return sessions


class SessionOperations:
    """A user's running session as the hub knows it (its job and profile,
    from the hub's REST API), and its extension (``portal.extend``)."""

    def __init__(self, extender, hub_api):
        self.extender = extender
        self.hub_api = hub_api

    async def session(self, name):
        """``(job_id, profile_name)`` of ``name``'s server; ExtendError 404 when none."""
        if not usernames.is_safe(name):
            raise no_session(name)
        try:
            user = await self.hub_api(f"users/{name}")
        except HTTPClientError as e:
            if e.code == 404:
                raise no_session(name) from None
            raise
        server = (user.get("servers") or {}).get("")
        state = (server or {}).get("state") or {}  # the service's admin:server_state
        options = (server or {}).get("user_options") or {}
        if not server or server.get("stopped") or not state.get("job_id"):
            raise no_session(name)
        return str(state["job_id"]), options.get("profile", "")

    async def allowed(self, name):
        job_id, profile = await self.session(name)
        return await self.extender.allowed(name, job_id, profile)

    async def extend(self, name, hours, actor):
        job_id, profile = await self.session(name)
        return await self.extender.extend(name, job_id, profile, hours, actor)
