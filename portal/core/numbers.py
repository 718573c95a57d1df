"""The one whole-number parser of every numeric field: the spawn form, spawn
links, the REST API, the profile form and API, revisions; and the one
refusal of JSON's non-standard constants (``no_constant``).

ASCII digits only: ``str.isdigit`` and ``\\d`` take "²" or "٣", which ``int``
refuses or reads as another number; at most 9 of them, so a number never
outgrows what the store's INTEGER columns hold (32 bits in PostgreSQL).
"""

import re

DIGITS_RE = re.compile(r"[0-9]{1,9}", re.ASCII)


def whole_number(value):
    """``value`` as an int: an int (not a bool), or text of 1 to 9 ASCII digits
    with optional surrounding spaces. None for anything else.

    >>> whole_number(" 12 "), whole_number(3), whole_number("²"), whole_number(True)
    (12, 3, None, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and DIGITS_RE.fullmatch(value.strip(" \t")):
        return int(value.strip(" \t"))
    return None


def no_constant(name):
    """``json.loads``'s ``parse_constant``: NaN and Infinity are not JSON, and
    no answer of the portal's may hold them (``json.dumps(allow_nan=False)``).

    >>> import json
    >>> json.loads('{"x": NaN}', parse_constant=no_constant)
    Traceback (most recent call last):
    ...
    ValueError: NaN is not JSON
    """
    raise ValueError(f"{name} is not JSON")
