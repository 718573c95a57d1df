"""Saved presets: a named spawn choice, a user's own or published by an admin
for everyone (issue 38).

A preset IS an options dict as the spawn form posts it (its keys are the
form's: ``spawners.form.OPTION_KEYS``, checked by ``form.check_options``
on the hub's side), with a name and the session it starts ("": the main
one). Plain functions here: what a preset's name, session name and values
may be, and the preset with fields reset to the profile's defaults. The
store keeps them (``portal.store``, ``portal_presets``); the hub's handlers
(``spawners.presets``) save, list, start and delete them; the admin
service publishes them (``portal.service.presets``).
"""

import re

from portal.core.slice import FieldError

NAME_MAX = 80
VALUE_MAX = 4096  # the longest text value (an image's path)
PUBLISHED = ""  # the owner of a published preset
# JupyterHub's rule for a server's name (jupyterhub.slugs.is_valid_safe_slug),
# as the spawn page's script checks it
SERVER_NAME_RE = re.compile(r"^[a-z](?:[a-z0-9-]{0,28}[a-z0-9])?$")
# control characters, and the characters of markup
NAME_BAD_RE = re.compile(r"[\x00-\x1f\x7f-\x9f<>]")


class PresetError(FieldError):
    """A preset that cannot be saved or started; ``field`` names its field."""


def check_name(name):
    """A preset's name, stripped: 1 to NAME_MAX characters, no control
    characters or markup.

    >>> check_name("  ResNet 4×V100 12 h ")
    'ResNet 4×V100 12 h'
    >>> check_name("<b>x</b>")
    Traceback (most recent call last):
    ...
    portal.presets.PresetError: A preset's name must not contain control characters, < or >
    """
    if not isinstance(name, str) or not name.strip():
        raise PresetError("Give the preset a name", "name")
    name = name.strip()
    if len(name) > NAME_MAX:
        raise PresetError(f"A preset's name is at most {NAME_MAX} characters", "name")
    if NAME_BAD_RE.search(name):
        raise PresetError("A preset's name must not contain control characters, < or >", "name")
    return name


def check_server_name(server_name):
    """The session a preset starts: "" (the main one) or a session's name
    as JupyterHub allows it.

    >>> check_server_name(None), check_server_name("train-2")
    ('', 'train-2')
    >>> try:
    ...     check_server_name("Train")
    ... except PresetError as e:
    ...     print(e.field)
    server_name
    """
    if server_name in (None, ""):
        return ""
    if (
        not isinstance(server_name, str)
        or not SERVER_NAME_RE.match(server_name)
        or "--" in server_name
    ):
        raise PresetError(
            "A session's name is up to 30 lower-case letters, digits and single hyphens, "
            "a letter first, no hyphen last",
            "server_name",
        )
    return server_name


def clean_values(options):
    """``options`` (already checked for their keys) as a preset keeps them:
    text (stripped, at most VALUE_MAX characters), whole numbers and
    true/false; an empty value or null is left out (the profile's default).

    >>> clean_values({"profile": " pytorch ", "gpus": 4, "image": "", "notify": True})
    {'gpus': 4, 'notify': True, 'profile': 'pytorch'}
    >>> clean_values({"gpus": [4]})
    Traceback (most recent call last):
    ...
    portal.presets.PresetError: gpus must be text, a whole number or true/false
    """
    kept = {}
    for key in sorted(options):
        value = options[key]
        if isinstance(value, str):
            value = value.strip()
            if len(value) > VALUE_MAX:
                raise PresetError(f"{key} is longer than {VALUE_MAX} characters", key)
        elif not isinstance(value, (bool, int)) and value is not None:
            raise PresetError(f"{key} must be text, a whole number or true/false", key)
        if value not in (None, ""):
            kept[key] = value
    return kept


def reset(options, fields):
    """The preset's ``options`` with ``fields`` reset to the profile's
    defaults: left out, as options the form does not send (a reset profile
    is the first one the user may run).

    >>> reset({"profile": "old", "gpus": 4, "hours": 12}, ["profile"])
    {'gpus': 4, 'hours': 12}
    """
    return {k: v for k, v in options.items() if k not in fields}


def summary(options):
    """A preset's choice in a line, as the home page lists it.

    >>> summary({"profile": "pytorch", "gpus": 4, "hours": 12, "nodes": 1})
    'pytorch, 4 GPUs, 12 h'
    >>> summary({})
    "the first profile's defaults"
    """
    if not options:
        return "the first profile's defaults"
    parts = [str(options.get("profile") or "the first profile")]
    nodes, gpus = options.get("nodes"), options.get("gpus")
    if nodes not in (None, "", 1, "1"):
        parts.append(f"{nodes} nodes")
    if gpus not in (None, ""):
        parts.append(f"{gpus} GPU{'' if str(gpus) == '1' else 's'}")
    if options.get("hours") not in (None, ""):
        parts.append(f"{options['hours']} h")
    shown = {"profile", "nodes", "gpus", "hours", "notify"}
    parts.extend(f"{k} {v}" for k, v in sorted(options.items()) if k not in shown)
    return ", ".join(parts)
