"""How long a session may idle before the culler stops it.

The site's ``[culling] idle_minutes`` is the idle culler's one timeout
(jupyterhub-idle-culler has one for every server). A profile may let its
sessions idle longer (``Profile.idle_minutes``; 0 takes the site's): such a
session's own activity reporter (``portal.session.activity``) reports its
last activity that much later, up to the present, so the culler's one
timeout ends it after the profile's. A profile cannot shorten the site's
timeout: the culler has already stopped every session idle that long.
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


def describe_idle(seconds):
    """A short phrase for an idle time, as the home page writes it.

    >>> describe_idle(7200), describe_idle(5400), describe_idle(2700), describe_idle(30)
    ('2 h', '1 h 30 min', '45 min', '30 s')
    """
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    hours, minutes = divmod(minutes, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


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
