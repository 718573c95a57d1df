"""Extending a running session's time limit: the one operation behind the
session card's "Extend by N hours" (the hub, ``spawners.session_handlers``)
and the admin service's ``POST api/sessions/NAME/extend``.

The caller says whose session (the hub's view: its job id and profile name);
here the request is checked, the job is read from Slurm, and the new limit is
set with ``scontrol update`` as the hub's own account (a Slurm operator, see
deploy/slurm.sh) and audited in the profile store. A refused request changes
nothing. The limit set is absolute (the old one plus the hours, checked
against the profile's ``max_hours``), so two requests at once never pass it.

Whether Slurm lets the hub's account do it at all is ``ExtensionCheck``'s:
asked at the start of the hub and of the admin service, so that a site where
it does not is told at once, with the command that fixes it.
"""

import asyncio
import logging
import os
import pwd
import re
import time
from typing import NamedTuple

from portal.core.timelimit import ExtendError, describe_minutes, extended_limit, hours_left
from portal.slurm import commands as slurm
from portal.slurm.model import format_duration
from portal.store import NotFound

log = logging.getLogger("portal.extend")

# A hub user name (the authenticator's username_pattern): whose session.
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")

OPERATOR_HINT = (
    "the hub's account needs Slurm operator rights to lengthen a job "
    "(sacctmgr -i modify user {account} set adminlevel=Operator); ask your admin"
)


# Seconds before a check that found extensions unavailable is made again, when
# someone asks (an admin's fix applies without a restart of the hub).
RECHECK_SECONDS = 60
OPERATOR_LEVELS = ("Operator", "Administrator")


class Unavailable(NamedTuple):
    """Why sessions cannot be extended, and ``fix``: the command an admin runs
    as root on the login node ("" when none: Slurm did not answer)."""

    reason: str
    fix: str = ""

    def __str__(self):
        return f"{self.reason}; an admin fixes it with `{self.fix}`" if self.fix else self.reason


def extension_problem(user, account):
    """What keeps ``account`` (the hub's) from extending jobs, given Slurm's
    record of it (``portal.slurm.commands.slurm_user``): None when nothing
    does, else ``Unavailable``. slurmctld authorizes a request by its uid,
    through the user it holds with that uid and that user's AdminLevel.

    >>> from portal.slurm.model import SlurmUser
    >>> extension_problem(SlurmUser("portal", 998, "Operator"), "portal") is None
    True
    >>> no_uid = extension_problem(SlurmUser("portal", None, "Operator"), "portal")
    >>> no_uid.reason, no_uid.fix
    ("Slurm does not know the uid of the hub's account portal", 'scontrol reconfigure')
    >>> extension_problem(SlurmUser("portal", 998, "None"), "portal").fix
    'sacctmgr -i modify user portal set adminlevel=Operator'
    >>> extension_problem(None, "portal").fix
    'deploy/slurm.sh sync-users'
    """
    if user is None:
        return Unavailable(
            f"Slurm has no user {account} (the hub's account)", "deploy/slurm.sh sync-users"
        )
    if user.uid is None:
        # the user was added before the Unix account existed; a reconfigure looks
        # the uid up again (assoc_mgr_set_missing_uids), as slurmctld does hourly
        return Unavailable(
            f"Slurm does not know the uid of the hub's account {account}",
            "scontrol reconfigure",
        )
    if user.admin_level not in OPERATOR_LEVELS:
        return Unavailable(
            f"the hub's account {account} is not a Slurm operator (AdminLevel={user.admin_level})",
            f"sacctmgr -i modify user {account} set adminlevel=Operator",
        )
    return None


class ExtensionCheck:
    """Whether Slurm lets this process's account (the hub's) extend jobs: one
    per process (``shared``), asked at its start (``at_start``) and then kept;
    while it says no, asked again at most every RECHECK_SECONDS when someone
    asks. A Slurm error counts as unavailable for now, never as available."""

    _shared = None

    @classmethod
    def shared(cls, timeout=20):
        if cls._shared is None:
            cls._shared = cls(pwd.getpwuid(os.geteuid()).pw_name, timeout)
        return cls._shared

    def __init__(self, account, timeout=20):
        self.account = account
        self.timeout = timeout
        self.problem = Unavailable("Slurm has not been asked yet")
        self.checked_at = None  # monotonic time of the last answer; None: none yet
        self._inflight = None

    def stale(self):
        return self.problem is not None and (
            self.checked_at is None or time.monotonic() - self.checked_at >= RECHECK_SECONDS
        )

    async def refresh(self):
        """Ask Slurm now (one query for callers at once): None, or ``Unavailable``."""
        return await asyncio.shield(self._asking())

    def _asking(self):
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._ask())
        return self._inflight

    async def _ask(self):
        try:
            user = await slurm.slurm_user(self.account, self.timeout)
        except (slurm.SlurmError, OSError) as e:
            problem = Unavailable(
                f"Slurm did not say whether the hub's account {self.account} may change "
                f"jobs ({str(e)[:200]}); try again later"
            )
        else:
            problem = extension_problem(user, self.account)
        if problem is None and self.problem is not None and self.checked_at is not None:
            log.info(
                "Session extensions are available again: Slurm knows %s as uid %s, %s",
                self.account, user.uid, user.admin_level,
            )  # fmt: skip
        self.problem, self.checked_at = problem, time.monotonic()
        return problem

    async def verdict(self):
        """None when extensions are available, else ``Unavailable``; Slurm is
        asked when it has not been yet, or said no RECHECK_SECONDS ago."""
        return await self.refresh() if self.stale() else self.problem

    def last_verdict(self):
        """For a page that cannot wait: ``Unavailable`` as Slurm last said, else
        None (available, or not asked yet); a stale "no" is asked again
        meanwhile, for the next page."""
        if self.checked_at is None:
            return None
        if self.stale():
            self._asking()
        return self.problem

    async def at_start(self, logger=log):
        """Ask Slurm at the start of the hub or the service: an ERROR in the
        log, once, when extensions are unavailable, with the command that fixes it."""
        problem = await self.refresh()
        if problem is not None:
            fix = problem.fix and f"To fix it, run as root on the login node: {problem.fix}"
            logger.error(
                "Session extensions are unavailable: %s. %s",
                problem.reason, fix or "Slurm is asked again at the next extension.",
            )  # fmt: skip
        return problem


def may_extend(actor, user, is_admin):
    """Whether ``actor`` may extend ``user``'s session: its owner, or an admin."""
    return actor == user or bool(is_admin)


def no_session(user):
    return ExtendError(f"{user[:40]} has no running session", status=404)


class SessionExtender:
    """Extends sessions of one hub: its Slurm job name, its profile store
    (the profiles' ``max_hours`` and the audit)."""

    def __init__(self, store, job_name, timeout=20):
        self.store = store
        self.job_name = job_name
        self.timeout = timeout
        # whether Slurm lets the account its commands run as (the hub's) extend jobs
        self.check = ExtensionCheck.shared(timeout)
        self.account = self.check.account

    def profile(self, name):
        """The session's profile as the store has it now (an admin's edit of
        ``max_hours`` applies to the next extension)."""
        try:
            return self.store.get(name)
        except NotFound:
            raise ExtendError(
                f"The session's profile {str(name)[:40]!r} no longer exists: it cannot be extended",
                status=409,
            ) from None

    async def limit(self, user, job_id):
        """``(limit_minutes, end)`` of ``user``'s running session job ``job_id``;
        ExtendError 404 when it does not run."""
        if not job_id or not USER_RE.match(user or ""):
            raise no_session(user or "")
        try:
            found = await slurm.running_limit(str(job_id), user, self.job_name, self.timeout)
        except slurm.SlurmError as e:
            log.error("Could not read job %s of %s: %s", job_id, user, e)
            raise ExtendError(f"Slurm did not answer: {e}", status=502) from None
        if found is None:
            raise no_session(user)
        return found

    async def allowed(self, user, job_id, profile_name):
        """How many more hours the session may get: ``{"job_id", "time_limit",
        "max_hours", "hours_left", ...}`` (for the card and the API)."""
        limit, end = await self.limit(user, job_id)
        profile = self.profile(profile_name)
        return self._describe(user, job_id, profile, limit, end)

    async def extend(self, user, job_id, profile_name, hours, actor):
        """Add ``hours`` (already parsed: ``portal.core.timelimit.parse_hours``)
        to ``user``'s session job ``job_id`` of profile ``profile_name``, for
        ``actor`` (whose right to do so the caller has checked with
        ``may_extend``). Returns the new state (``allowed``'s dict with
        ``"previous_time_limit"``); raises ExtendError, changing nothing."""
        problem = await self.check.verdict()
        if problem is not None:
            raise ExtendError(f"Extensions are unavailable: {problem}", status=503)
        profile = self.profile(profile_name)
        limit, _ = await self.limit(user, job_id)
        if limit is None:
            raise ExtendError(f"Job {job_id} has no time limit: it needs no extension")
        new = extended_limit(limit, hours, profile.max_hours, profile.display_name)
        await self.check_slurm_caps(job_id, new)
        try:
            await slurm.set_time_limit(str(job_id), new, self.timeout)
        except slurm.SlurmError as e:
            log.error(
                "Slurm refused to extend job %s of %s to %s: %s (is %s a Slurm operator?)",
                job_id, user, format_duration(new), e, self.account,
            )  # fmt: skip
            message = f"Slurm refused to change the time limit ({e})"
            if "denied" in str(e).lower() or "invalid user" in str(e).lower():
                problem = await self.check.refresh()  # what changed since it was asked
                message += ": " + str(problem or OPERATOR_HINT.format(account=self.account))
            raise ExtendError(message, status=502) from None
        try:
            self.store.record_extension(actor, user, job_id, profile.name, limit, new)
        except Exception:  # the limit is set: say so, and keep it in the log at least
            log.exception("Could not audit the extension of job %s of %s", job_id, user)
        log.info(
            "%s extended job %s of %s (profile %s) from %s to %s",
            actor, job_id, user, profile.name, format_duration(limit), format_duration(new),
        )  # fmt: skip
        try:  # read back: the limit and end as Slurm has them now
            now_limit, end = await self.limit(user, job_id)
        except ExtendError:  # ended meanwhile, or Slurm is slow: what was set
            now_limit, end = new, None
        result = self._describe(user, job_id, profile, now_limit, end)
        result["previous_time_limit"] = format_duration(limit)
        return result

    async def check_slurm_caps(self, job_id, new):
        """The hub's account is a Slurm operator, whose ``scontrol update``
        Slurm does not hold to the partition's MaxTime or the QOS's MaxWall:
        they are checked here (refused when they cannot be read)."""
        try:
            caps = await slurm.wall_caps(str(job_id), self.timeout)
        except slurm.SlurmError as e:
            log.error("Could not read the time caps of job %s: %s", job_id, e)
            raise ExtendError(f"Slurm did not say the job's time caps: {e}", status=502) from None
        for name, cap in caps.items():
            if cap is not None and new > cap:
                raise ExtendError(
                    f"{describe_minutes(new)} in all is more than Slurm's {name} allows "
                    f"({describe_minutes(cap)})",
                    "hours",
                )

    @staticmethod
    def _describe(user, job_id, profile, limit, end):
        return {
            "user": user,
            "job_id": str(job_id),
            "profile": profile.name,
            "time_limit": format_duration(limit) if limit is not None else "UNLIMITED",
            "time_limit_text": describe_minutes(limit) if limit is not None else "unlimited",
            "end": end.isoformat(timespec="seconds") if end else None,
            "max_hours": profile.max_hours,
            "hours_left": hours_left(limit, profile.max_hours) if limit is not None else 0,
        }
