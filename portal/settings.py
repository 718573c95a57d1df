"""Site settings: one place, read by the hub and by the deploy scripts.

The defaults live in ``deploy/portal.toml`` beside this package; a site's own
file (``/etc/portal/portal.toml``, or the path in ``$PORTAL_CONFIG``) holds only
the keys it changes, merged over the defaults section by section.

This module uses the standard library only, so the deploy scripts can run it
with Debian's ``/usr/bin/python3`` before any environment exists::

    python3 portal/settings.py --shell   # PORTAL_<SECTION>_<KEY>=value lines
    python3 portal/settings.py --get envs.prefix   # one value
"""

import functools
import json
import os
import shlex
import sys
import tomllib
from pathlib import Path

DEFAULTS = Path(__file__).resolve().parent.parent / "deploy" / "portal.toml"
SITE_FILE = "/etc/portal/portal.toml"


class SettingsError(ValueError):
    """A site settings file that cannot be used; the message names the fix."""


def hub_api_ip(settings):
    """Where the hub's API listens: [hub] api_ip, or, when unset, the embedded
    cluster's login address (where its compute nodes reach this host) if it
    has compute nodes, else loopback."""
    if settings["hub"]["api_ip"]:
        return settings["hub"]["api_ip"]
    cluster = settings["cluster"]
    if cluster["embedded"] and cluster["nodes"] > 0:
        return f"{cluster['network']}.1"
    return "127.0.0.1"


def cluster_snapshot(settings):
    """The file of the hub's shared Slurm poll, which the service reads."""
    path = settings["portal"]["cluster_snapshot"]
    return path or str(Path(settings["hub"]["state_dir"]) / "cluster.json")


def _read(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: not valid TOML: {e}") from e


def merge(defaults, overrides, source="site settings"):
    """Merge ``overrides`` over ``defaults`` one section deep.

    Arrays of tables (``[[profiles]]``) are replaced whole.

    Unknown sections or keys are refused rather than ignored, so a typo in a
    site file is noticed at start and not silently lost.
    """
    merged = {
        section: dict(values) if isinstance(values, dict) else list(values)
        for section, values in defaults.items()
    }
    for section, values in overrides.items():
        if section not in defaults:
            raise SettingsError(
                f"{source}: unknown section [{section}]; known: {', '.join(sorted(defaults))}"
            )
        if isinstance(defaults[section], list):
            # An array of tables ([[profiles]]): the site's list replaces ours.
            if not isinstance(values, list):
                raise SettingsError(f"{source}: {section} must be an array of tables")
            merged[section] = values
            continue
        if not isinstance(values, dict):
            raise SettingsError(f"{source}: [{section}] must be a table")
        for key, value in values.items():
            if key not in defaults[section]:
                raise SettingsError(
                    f"{source}: unknown key {key!r} in [{section}]; "
                    f"known: {', '.join(sorted(defaults[section]))}"
                )
            expected = type(defaults[section][key])
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)  # idle_minutes = 60 means 60.0
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise SettingsError(
                    f"{source}: [{section}] {key} must be {expected.__name__}, got {value!r}"
                )
            merged[section][key] = value
    return merged


@functools.cache
def defaults():
    """``deploy/portal.toml`` alone: the one declaration of every default. The
    spawner's traits, the Profile fields and the poll take theirs from here."""
    return _read(DEFAULTS)


def load(path=None):
    """The merged settings as ``{section: {key: value}}``.

    ``path`` (or ``$PORTAL_CONFIG``) names the site file; without either,
    ``/etc/portal/portal.toml`` is used when it exists.
    """
    settings = _read(DEFAULTS)
    path = path or os.environ.get("PORTAL_CONFIG")
    if path:
        if not os.path.exists(path):
            raise SettingsError(f"PORTAL_CONFIG={path}: no such file")
    elif os.path.exists(SITE_FILE):
        path = SITE_FILE
    if path:
        settings = merge(settings, _read(path), source=str(path))
    return settings


def shell_lines(settings):
    """``PORTAL_SECTION_KEY=value`` lines for ``eval`` in a shell script."""
    lines = []
    for section, values in settings.items():
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(value, bool):
                value = "1" if value else "0"
            elif isinstance(value, list):
                value = " ".join(str(v) for v in value)
            name = f"PORTAL_{section}_{key}".upper()
            lines.append(f"{name}={shlex.quote(str(value))}")
    return lines


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        settings = load()
    except SettingsError as e:
        print(f"portal settings: {e}", file=sys.stderr)
        return 2
    if argv[:1] == ["--shell"]:
        print("\n".join(shell_lines(settings)))
    elif argv[:1] == ["--get"] and len(argv) == 2:
        section, _, key = argv[1].partition(".")
        try:
            print(settings[section][key])
        except (KeyError, TypeError):
            print(f"portal settings: no setting {argv[1]!r}", file=sys.stderr)
            return 2
    else:
        print(json.dumps(settings, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
