"""Every way the portal writes a duration, once.

- ``slurm_time``: as Slurm writes and takes a time limit (``05:00:00``);
- ``describe_limit``: a time limit in whole hours and minutes (``1 h 30 min``);
- ``describe_seconds``: an idle time, the largest units first (``45 min``, ``30 s``);
- ``describe_wait``: a wait, rounded up (``4 min``, ``45 s``);
- ``time_left``: the clock of a card or a page (``2 h 05 min``).

(The root helper ``portal.helper.extend`` keeps its own ``slurm_time``: it
is installed alone and imports nothing of the portal;
tests/unit/test_extendhelper.py checks that the two agree.)
"""

import math


def slurm_time(minutes):
    """Minutes as Slurm writes a time limit (``scontrol show job``'s
    ``TimeLimit``), and as ``scontrol update ... TimeLimit=`` takes it.

    >>> slurm_time(300), slurm_time(90), slurm_time(1500)
    ('05:00:00', '01:30:00', '1-01:00:00')
    """
    days, rest = divmod(int(minutes), 1440)
    clock = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{clock}" if days else clock


def describe_limit(minutes):
    """A time limit as people read it.

    >>> describe_limit(300), describe_limit(90), describe_limit(1500)
    ('5 h', '1 h 30 min', '25 h')
    """
    hours, rest = divmod(int(minutes), 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def describe_seconds(seconds):
    """A short phrase for an idle time, as the home page writes it.

    >>> describe_seconds(7200), describe_seconds(5400), describe_seconds(2700)
    ('2 h', '1 h 30 min', '45 min')
    >>> describe_seconds(30)
    '30 s'
    """
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def describe_wait(seconds):
    """A wait as a refusal states it, rounded up.

    >>> describe_wait(230), describe_wait(300), describe_wait(44.2), describe_wait(0.3)
    ('4 min', '5 min', '45 s', '1 s')
    """
    seconds = max(math.ceil(seconds), 1)
    return f"{seconds} s" if seconds < 60 else f"{math.ceil(seconds / 60)} min"


def time_left(minutes, pad=True):
    """Hours and minutes of a clock (``pad``: minutes in two digits).

    >>> time_left(125), time_left(125, pad=False), time_left(0)
    ('2 h 05 min', '2 h 5 min', '0 h 00 min')
    """
    minutes = max(int(minutes), 0)
    return (
        f"{minutes // 60} h {minutes % 60:02d} min"
        if pad
        else f"{minutes // 60} h {minutes % 60} min"
    )
