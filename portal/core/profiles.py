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
from .slice import CHOICE_LABELS, PARTITION_RE, SLURM_NAME_RE, FieldError, SliceError, make_slice

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
# What a profile may let its users choose of the site's Slurm (issue 38); the
# GPU model is offered wherever the partitions have typed GRES.
CHOOSABLE = ("account", "qos", "reservation", "feature")
TUPLE_FIELDS = ("groups", "partitions", "gpu_types", "choose", "features")


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
    # The site's Slurm on the spawn page (issue 38, ``portal.slurm.choices``):
    partitions: tuple = field(default_factory=tuple)  # more partitions to choose from
    gpu_types: tuple = field(default_factory=tuple)  # the GPU models offered (none: every one)
    choose: tuple = field(default_factory=tuple)  # which of CHOOSABLE the user chooses
    features: tuple = field(default_factory=tuple)  # the node features offered (none: every one)
    max_cores: int = 0  # a session without GPUs: up to this many cores (0: none)
    max_mem_gb: int = 0  # ... and this much memory

    @property
    def all_partitions(self):
        """The partitions its sessions may run on, its own (the default) first."""
        return (self.partition, *(p for p in self.partitions if p != self.partition))

    @property
    def cpu_sessions(self):
        """Whether a session may have no GPU (then cores and memory are chosen)."""
        return self.max_cores > 0

    @property
    def in_container(self):
        return bool(self.image or self.user_images)

    def allows(self, user_groups):
        """Whether a member of ``user_groups`` may use this profile."""
        return self.enabled and (not self.groups or bool(set(self.groups) & set(user_groups)))

    def make_slice(self, gpus, hours=None, nodes=None, partition=None, **chosen):
        """The slice for ``gpus`` per node, ``hours`` (default: the profile's)
        and ``nodes`` (default 1) on ``partition`` (default: its own; one of
        ``all_partitions``), with the site's ``chosen`` names (``gpu_type``,
        ``account``, ``qos``, ``reservation``, ``feature``: those the
        profile lets the user choose) and, without GPUs, ``cores`` and
        ``mem_gb``; or SliceError naming the field."""
        partition = self.partition if partition in (None, "") else partition
        if partition not in self.all_partitions:
            raise SliceError(
                f"{self.display_name} runs on partition "
                f"{' or '.join(self.all_partitions)}, not {str(partition)[:40]!r}",
                "partition",
            )
        cores, mem_gb = chosen.pop("cores", None), chosen.pop("mem_gb", None)
        for key, value in chosen.items():
            if value in (None, ""):
                continue
            if key == "gpu_type":
                allowed = not self.gpu_types or value in self.gpu_types
            else:
                allowed = key in self.choose and (key != "feature" or not self.features
                                                  or value in self.features)  # fmt: skip
            if not allowed:
                raise SliceError(
                    f"{self.display_name} does not offer {CHOICE_LABELS.get(key, key)} "
                    f"{str(value)[:40]!r}",
                    key,
                )
        return make_slice(
            gpus,
            self.default_hours if hours in (None, "") else hours,
            nodes=1 if nodes in (None, "") else nodes,
            partition=partition,
            max_gpus=self.max_gpus,
            max_nodes=self.max_nodes,
            cores_per_gpu=self.cores_per_gpu,
            mem_per_gpu_gb=self.mem_per_gpu_gb,
            max_hours=self.max_hours,
            choices=chosen,
            cores=cores,
            mem_gb=mem_gb,
            max_cores=self.max_cores,
            max_mem_gb=self.max_mem_gb,
        )

    def to_dict(self):
        d = asdict(self)
        for key in TUPLE_FIELDS:
            d[key] = list(getattr(self, key))
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
    groups = _names(data, "groups", GROUP_RE, "group names")
    lists = {
        "partitions": _names(data, "partitions", PARTITION_RE, "partition names"),
        "gpu_types": _names(data, "gpu_types", SLURM_NAME_RE, "GPU models (GRES types)"),
        "choose": _names(data, "choose", None, f"choices of {', '.join(CHOOSABLE)}"),
        "features": _names(data, "features", SLURM_NAME_RE, "node features"),
    }
    for choice in lists["choose"]:
        if choice not in CHOOSABLE:
            raise ProfileError(
                f"choose: {choice[:40]!r} is not one of {', '.join(CHOOSABLE)}", "choose"
            )
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
        partitions=tuple(dict.fromkeys(lists["partitions"])),
        gpu_types=tuple(dict.fromkeys(lists["gpu_types"])),
        choose=tuple(c for c in CHOOSABLE if c in lists["choose"]),
        features=tuple(dict.fromkeys(lists["features"])),
        max_cores=_int(data, "max_cores", 0, 1024),
        max_mem_gb=_int(data, "max_mem_gb", 0, 65536),
        enabled=data.get("enabled", True),
        image=_text(data, "image", IMAGE_RE, 64, required=False),
        user_images=data.get("user_images", False),
        revision=_int({"revision": data.get("revision", 0)}, "revision", 0, MAX_REVISION),
    )
    if bool(profile.max_cores) != bool(profile.max_mem_gb):
        raise ProfileError(
            "max_cores and max_mem_gb go together: both 0 (no sessions without GPUs) or both set",
            "max_mem_gb" if profile.max_cores else "max_cores",
        )
    if profile.default_hours > profile.max_hours:
        raise ProfileError(
            f"default_hours ({profile.default_hours}) is more than max_hours ({profile.max_hours})",
            "default_hours",
        )
    return profile


def _names(data, key, pattern, what):
    """The list ``data[key]`` of names, each matching ``pattern`` (or any
    text without markup), or ProfileError naming ``key``."""
    names = data.get(key, [])
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ProfileError(f"{key} must be a list of {what}", key)
    for name in names:
        if (pattern and not pattern.match(name)) or not name or re.search(r"[<>\s]", name):
            singular = what.split(" (")[0].removesuffix("s")
            raise ProfileError(f"{key}: {name[:40]!r} is not a valid {singular}", key)
    return list(names)


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
