"""The account cache: a user's passwd entry and groups as NSS resolves them
(LDAP, through nslcd), kept ``groups_ttl`` seconds for all of the hub's
spawners, and the check that an account may run sessions at all.

Each NSS lookup blocks the hub's one thread for milliseconds, and the spawn
page needs both at every render; ``PortalSpawner.account``,
``user_groups`` and ``check_account`` ask here.
"""

import pwd
import time

from tornado import web

from portal.core.profiles import check_account, unix_groups

__all__ = ["check_account", "looked_up"]

# user name -> (monotonic time, passwd entry, groups), shared by the hub's spawners
_seen = {}


def looked_up(name, ttl):
    """``(when, passwd entry, groups)`` of the user ``name``, looked up at
    most every ``ttl`` seconds. An unknown account is an error that says what
    to check (and is not kept)."""
    seen = _seen.get(name)
    if seen and time.monotonic() - seen[0] < ttl:
        return seen
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise web.HTTPError(
            500,
            f"The account {name} is not known as a Unix user on the hub: "
            "check that LDAP users resolve (getent passwd).",
        ) from None
    seen = (time.monotonic(), entry, unix_groups(entry))
    _seen[name] = seen
    return seen
