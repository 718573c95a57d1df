"""How long a session may idle before the culler stops it.

The site's ``[culling] idle_minutes`` is the idle culler's timeout
(jupyterhub-idle-culler's ``--timeout``). A profile may let its sessions idle
longer (``Profile.idle_minutes``; 0 takes the site's): the spawner keeps the
session's own limit in the server's state (``idle_seconds``), and the
culler's documented hook, ``cull_arbiter_hook``, is ``cull_arbiter`` below
(spawners/idle_culler_config.py), which holds each session to its own
limit. Every session reports its real last activity
(``portal.session.activity``). A profile cannot shorten the site's timeout:
the culler's own timeout is the least.
"""

from .profiles import ProfileError

# The hub service that runs jupyterhub-idle-culler; its stops are idle stops.
CULLER_SERVICE = "idle-culler"


def site_idle_seconds(culling):
    """The culler's timeout in whole seconds, from the ``[culling]`` settings."""
    return int(round(culling["idle_minutes"] * 60))


def session_idle_seconds(site_seconds, profile_minutes):
    """The idle seconds after which a session of a profile with
    ``profile_minutes`` (0: the site's) is stopped: never less than the site's.

    >>> session_idle_seconds(7200, 0), session_idle_seconds(7200, 240)
    (7200, 14400)
    >>> session_idle_seconds(7200, 30)
    7200
    """
    return max(site_seconds, (profile_minutes or 0) * 60)


def cull_arbiter(*, inactive, inactive_limit, server, **kwargs):
    """jupyterhub-idle-culler's ``cull_arbiter_hook``: whether a server idle
    for ``inactive`` (a timedelta) is culled: past its session's own limit
    (the ``idle_seconds`` of its state, which the culler reads with the scope
    ``admin:server_state``), never before the culler's ``inactive_limit``.

    >>> from datetime import timedelta as td
    >>> long = {"state": {"idle_seconds": 14400}}
    >>> cull_arbiter(inactive=td(hours=3), inactive_limit=7200, server=long)
    False
    >>> cull_arbiter(inactive=td(hours=4), inactive_limit=7200, server=long)
    True
    >>> cull_arbiter(inactive=td(hours=2), inactive_limit=7200, server={"state": {}})
    True
    >>> short = {"state": {"idle_seconds": 60}}
    >>> cull_arbiter(inactive=td(hours=1), inactive_limit=7200, server=short)
    False
    """
    state = server.get("state") or {}
    own = state.get("idle_seconds") if isinstance(state, dict) else None
    if isinstance(own, bool) or not isinstance(own, (int, float)):
        own = 0
    return inactive.total_seconds() >= max(inactive_limit, own)


def check_culling(culling):
    """Refuse, with a ValueError that names the fix, ``[culling]`` settings
    that cannot work together (checked when the hub starts)."""
    idle = culling["idle_minutes"] * 60
    if culling["enabled"] and idle < 1:
        raise ValueError(
            f"[culling] idle_minutes = {culling['idle_minutes']} is less than a second: "
            "set it to the minutes a session may idle, or enabled = false"
        )
    if culling["every_seconds"] < 1:
        raise ValueError("[culling] every_seconds must be at least 1")
    if culling["activity_seconds"] < 1:
        raise ValueError("[culling] activity_seconds must be at least 1")
    if culling["enabled"] and culling["activity_seconds"] >= idle:
        raise ValueError(
            f"[culling] activity_seconds ({culling['activity_seconds']}) must be less than "
            f"idle_minutes ({culling['idle_minutes']} min): a session reports its activity "
            "that often, and would be stopped between two reports"
        )
    if not 0 <= culling["gpu_busy_percent"] <= 100:
        raise ValueError(
            f"[culling] gpu_busy_percent must be between 0 and 100, "
            f"not {culling['gpu_busy_percent']}"
        )


def check_profile_idle(profile, culling):
    """Refuse, with ProfileError on ``idle_minutes``, a profile whose sessions
    would have to be stopped sooner than the site's idle timeout allows."""
    if not culling["enabled"] or not profile.idle_minutes:
        return
    site = culling["idle_minutes"]
    if profile.idle_minutes * 60 < site_idle_seconds(culling):
        raise ProfileError(
            f"idle_minutes {profile.idle_minutes} is less than the site's {site:g} "
            "([culling] idle_minutes), after which every idle session is stopped: "
            f"set 0 (the site's) or at least {site:g}",
            "idle_minutes",
        )
