"""Spawner profiles: what a user may ask for.

A profile names an environment (a framework's), or a container image
(``image``: a folder of the site's ``[containers] images``, in which the
session runs with that framework's environment inside it; ``user_images``: a
user may name an image of their own, a folder in their home), a partition,
the most GPUs (per node), nodes and hours a session may have, the slice per
GPU (cores, memory), how long its sessions may idle (``idle_minutes``, 0:
the site's ``[culling]`` value), how many jobs one notebook sweep may
run (``max_array``) and the LDAP groups that may use it. The
spawner reads profiles through a *source* (a callable that returns the
current list) at every form render and every spawn, so an edit applies at
the next spawn without a restart. The hub's source is the admin service's
store (``spawners.hub_config.StoreProfiles``).
"""

import grp
import os
import re
from dataclasses import asdict, dataclass, field, fields

from portal.settings import defaults

from .numbers import whole_number
from .slice import PARTITION_RE, FieldError, SliceError, make_slice

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
GROUP_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
ENV_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # portal.helper.imagecheck's NAME_RE
NODE_MAX_GPUS = 16
MAX_NODES = 64
MAX_HOURS = 24 * 30
MAX_IDLE_MINUTES = MAX_HOURS * 60
MAX_ARRAY = 1000  # jobs of one notebook sweep (a Slurm array); Slurm's MaxArraySize bounds it too
MAX_REVISION = 2**31 - 1  # revisions are stored and compared as INTEGER (PostgreSQL: 32 bits)
# The fields a profile may leave out, whose defaults are the site's [slurm]
# values (deploy/portal.toml declares them).
SLICE_FIELDS = (
    "partition", "max_gpus", "cores_per_gpu", "mem_per_gpu_gb", "default_hours", "max_hours",
)  # fmt: skip
SLICE_DEFAULTS = defaults()["slurm"]


def slice_defaults(settings):
    """The site's [slurm] values that a profile without its own takes (the
    hub's settings profiles and the admin service's new ones alike)."""
    return {key: settings["slurm"][key] for key in SLICE_FIELDS}


class ProfileError(FieldError):
    """An invalid profile, or a profile the user may not use."""


@dataclass(frozen=True)
class Profile:
    name: str
    display_name: str
    partition: str
    environment: str
    description: str = ""
    max_gpus: int = SLICE_DEFAULTS["max_gpus"]
    max_nodes: int = 1
    cores_per_gpu: int = SLICE_DEFAULTS["cores_per_gpu"]
    mem_per_gpu_gb: int = SLICE_DEFAULTS["mem_per_gpu_gb"]
    default_hours: int = SLICE_DEFAULTS["default_hours"]
    max_hours: int = SLICE_DEFAULTS["max_hours"]
    idle_minutes: int = 0  # minutes idle before the culler stops a session; 0: the site's
    max_array: int = 16  # the most jobs of one notebook sweep (portal.core.notebooks)
    groups: tuple = field(default_factory=tuple)
    enabled: bool = True
    revision: int = 0
    image: str = ""  # a site image's name: the session runs in it
    user_images: bool = False  # a user may name an image in their home instead

    @property
    def in_container(self):
        return bool(self.image or self.user_images)

    def allows(self, user_groups):
        """Whether a member of ``user_groups`` may use this profile."""
        return self.enabled and (not self.groups or bool(set(self.groups) & set(user_groups)))

    def make_slice(self, gpus, hours=None, nodes=None):
        """The slice for ``gpus`` per node, ``hours`` (default: the profile's)
        and ``nodes`` (default 1), or SliceError."""
        return make_slice(
            gpus,
            self.default_hours if hours in (None, "") else hours,
            nodes=1 if nodes in (None, "") else nodes,
            partition=self.partition,
            max_gpus=self.max_gpus,
            max_nodes=self.max_nodes,
            cores_per_gpu=self.cores_per_gpu,
            mem_per_gpu_gb=self.mem_per_gpu_gb,
            max_hours=self.max_hours,
        )

    def to_dict(self):
        d = asdict(self)
        d["groups"] = list(self.groups)
        return d


def _int(data, key, low, high):
    value = data.get(key)
    if not isinstance(value, int) or whole_number(value) is None:
        raise ProfileError(f"{key} must be a whole number", key)
    if not low <= value <= high:
        raise ProfileError(f"{key} must be between {low} and {high}, not {value}", key)
    return value


def _text(data, key, pattern=None, max_len=200, required=True):
    value = data.get(key, "")
    if not isinstance(value, str):
        raise ProfileError(f"{key} must be text", key)
    value = value.strip()
    if required and not value:
        raise ProfileError(f"{key} is required", key)
    if len(value) > max_len:
        raise ProfileError(f"{key} is longer than {max_len} characters", key)
    if pattern and value and not pattern.match(value):
        raise ProfileError(f"{key} {value[:40]!r} has characters that are not allowed", key)
    if re.search(r"[<>\x00-\x1f]", value):
        raise ProfileError(f"{key} may not contain markup or control characters", key)
    return value


def profile_from_dict(data, defaults=None):
    """Validate a profile given as a dict (settings, form or JSON).

    ``defaults`` fills missing keys (the site's slice settings). Checks what
    can be checked without the cluster; the admin service adds the checks
    against the live cluster.
    """
    if not isinstance(data, dict):
        raise ProfileError("a profile must be an object")
    builtin = {f.name: f.default for f in fields(Profile) if isinstance(f.default, (int, str))}
    data = {**builtin, **(defaults or {}), **data}
    known = {f.name for f in fields(Profile)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProfileError(f"unknown field(s): {', '.join(unknown)}", unknown[0])
    groups = data.get("groups", [])
    if not isinstance(groups, (list, tuple)) or not all(isinstance(g, str) for g in groups):
        raise ProfileError("groups must be a list of group names", "groups")
    for group in groups:
        if not GROUP_RE.match(group):
            raise ProfileError(f"group {group[:40]!r} is not a valid group name", "groups")
    for key in ("enabled", "user_images"):
        if not isinstance(data.get(key, key == "enabled"), bool):
            raise ProfileError(f"{key} must be true or false", key)
    profile = Profile(
        name=_text(data, "name", NAME_RE, 32),
        display_name=_text(data, "display_name", max_len=80),
        description=_text(data, "description", max_len=500, required=False),
        environment=_text(data, "environment", ENV_RE, 64),
        partition=_text(data, "partition", PARTITION_RE, 64),
        max_gpus=_int(data, "max_gpus", 1, NODE_MAX_GPUS),
        max_nodes=_int(data, "max_nodes", 1, MAX_NODES),
        cores_per_gpu=_int(data, "cores_per_gpu", 1, 256),
        mem_per_gpu_gb=_int(data, "mem_per_gpu_gb", 1, 4096),
        default_hours=_int(data, "default_hours", 1, MAX_HOURS),
        max_hours=_int(data, "max_hours", 1, MAX_HOURS),
        idle_minutes=_int(data, "idle_minutes", 0, MAX_IDLE_MINUTES),
        max_array=_int(data, "max_array", 1, MAX_ARRAY),
        groups=tuple(sorted(set(groups))),
        enabled=data.get("enabled", True),
        image=_text(data, "image", IMAGE_RE, 64, required=False),
        user_images=data.get("user_images", False),
        revision=_int({"revision": data.get("revision", 0)}, "revision", 0, MAX_REVISION),
    )
    if profile.default_hours > profile.max_hours:
        raise ProfileError(
            f"default_hours ({profile.default_hours}) is more than max_hours ({profile.max_hours})",
            "default_hours",
        )
    return profile


def unix_groups(entry):
    """The groups of a passwd entry as the hub's NSS sees them (from LDAP, through
    nslcd): what ``Profile.groups`` is matched against, by the spawner and the
    admin service alike."""
    return sorted(grp.getgrgid(g).gr_name for g in os.getgrouplist(entry.pw_name, entry.pw_gid))


def choose(profiles, name, user_groups):
    """The profile ``name`` if this user may use it, else ProfileError (as the user sees it)."""
    for profile in profiles:
        if profile.name == name and profile.allows(user_groups):
            return profile
    if not isinstance(name, str) or not name:
        raise ProfileError("Choose a profile", "profile")
    raise ProfileError(f"Profile {name[:40]!r} is not available to you", "profile")


def check_account(name, entry, groups, *, uid_min, uid_max, allowed_groups):
    """Refuse, with ProfileError, an account that may not run sessions: a uid
    outside ``uid_min``..``uid_max`` (system accounts) or in none of
    ``allowed_groups`` (none: no group check), or whose name NSS spells
    otherwise than ``name`` (sudo and Slurm run the job as NSS's name for
    it: a hub name ``J.Smith`` where NSS has ``j.smith`` would be one user's
    name to the hub's checks and another's to the job's). Returns ``groups``.

    >>> from types import SimpleNamespace as Entry
    >>> try:
    ...     check_account("J.Smith", Entry(pw_name="j.smith", pw_uid=20001), [],
    ...                   uid_min=1000, uid_max=60000, allowed_groups=[])
    ... except ProfileError as e:
    ...     print(e.args[0])
    The account J.Smith is j.smith on this host: log out and log in again
    """
    if entry.pw_name != name:
        raise ProfileError(
            f"The account {name} is {entry.pw_name} on this host: log out and log in again",
            "user",
        )
    if not uid_min <= entry.pw_uid <= uid_max:
        raise ProfileError(
            f"The account {name} cannot run portal sessions or jobs: its uid "
            f"{entry.pw_uid} is outside the portal's user range "
            f"({uid_min}-{uid_max})",
            "user",
        )
    if allowed_groups and not set(groups) & set(allowed_groups):
        raise ProfileError(
            f"The account {name} cannot run portal sessions or jobs: it is in "
            f"none of the portal's groups ({', '.join(allowed_groups)})",
            "user",
        )
    return groups


__all__ = [
    "Profile",
    "check_account",
    "ProfileError",
    "SliceError",
    "choose",
    "profile_from_dict",
    "unix_groups",
]
