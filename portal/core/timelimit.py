"""A running session's time limit: how many more hours its profile allows, and
whether an extension fits. Pure; ``portal.extend`` asks Slurm and applies it.

Limits are whole minutes, as Slurm keeps them; an extension adds whole hours
and the total never passes the profile's ``max_hours``.
"""

from .durations import describe_limit
from .numbers import whole_number
from .slice import FieldError


class ExtendError(FieldError):
    """An extension refused or failed; nothing changed. ``status`` is the HTTP
    status the API answers with, the message is shown to the user."""

    status = 400

    def __init__(self, message, field=None, status=None):
        super().__init__(message, field)
        if status is not None:
            self.status = status


def parse_hours(value):
    """The hours of an extension request: a whole number, at least 1.

    >>> parse_hours("3"), parse_hours(2)
    (3, 2)
    >>> parse_hours("1.5")
    Traceback (most recent call last):
    ...
    portal.core.timelimit.ExtendError: hours must be a whole number of hours (1 or more), not '1.5'
    """
    hours = whole_number(value)
    if hours is None or hours < 1:
        shown = value[:20] if isinstance(value, str) else value
        raise ExtendError(
            f"hours must be a whole number of hours (1 or more), not {shown!r}", "hours"
        )
    return hours


def hours_left(limit_minutes, max_hours):
    """The most whole hours that may still be added to a limit of
    ``limit_minutes`` under a profile's ``max_hours``; 0 when none.

    >>> hours_left(120, 4), hours_left(240, 4), hours_left(150, 4), hours_left(300, 4)
    (2, 0, 1, 0)
    """
    return max(max_hours * 60 - limit_minutes, 0) // 60


def extended_limit(limit_minutes, hours, max_hours, profile_name):
    """The new limit, in minutes, of a session whose limit is ``limit_minutes``
    once ``hours`` (already parsed) are added; ExtendError (400) when it would
    pass the profile's ``max_hours``, saying how many more hours are allowed.

    >>> extended_limit(120, 3, 24, "PyTorch")
    300
    >>> try:
    ...     extended_limit(120, 3, 4, "PyTorch")
    ... except ExtendError as e:
    ...     print(e)
    3 more hours would make 5 h; profile PyTorch allows 4 h: at most 2 more
    """
    new = limit_minutes + hours * 60
    if new <= max_hours * 60:
        return new
    left = hours_left(limit_minutes, max_hours)
    more = "hour" if hours == 1 else "hours"
    allows = f"profile {profile_name} allows {max_hours} h"
    if left == 0:
        raise ExtendError(
            f"{hours} more {more} would make {describe_limit(new)}; {allows}, "
            f"and the session has {describe_limit(limit_minutes)} already: "
            "it cannot be extended",
            "hours",
        )
    raise ExtendError(
        f"{hours} more {more} would make {describe_limit(new)}; {allows}: at most {left} more",
        "hours",
    )
