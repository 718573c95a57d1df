"""Extending a running session's time limit: the one operation behind the
session card's "Extend by N hours" (the hub, ``spawners.handlers``)
and the admin service's ``POST api/sessions/NAME/extend``.

The caller says whose session (the hub's view: its job id and profile name);
here the request is checked, the job is read from Slurm, and the new limit is
set through the root helper ``portal-extend`` (``portal.helper.extend``, run
with sudo: the hub's account holds no Slurm admin level), which checks the
job again, and audited in the profile store. A refused request changes
nothing. The limit set is absolute (the old one plus the hours, checked
against the profile's ``max_hours``), so two requests at once never pass it.

Whether the hub's account can run the helper at all is ``ExtensionCheck``'s:
asked at the start of the hub and of the admin service, so that a site where
it cannot is told at once, with the command that fixes it.
"""

import asyncio
import logging
import os
import pwd
import time
from typing import NamedTuple

from portal.core import usernames
from portal.core.durations import describe_limit, slurm_time
from portal.core.timelimit import ExtendError, extended_limit, hours_left
from portal.helper import extend as extendhelper
from portal.slurm import commands as slurm
from portal.store import NotFound

log = logging.getLogger("portal.extend")

# Seconds before a check that found extensions unavailable is made again, when
# someone asks (an admin's fix applies without a restart of the hub).
RECHECK_SECONDS = 60
# What deploy/hub.sh does: install the helper, register the hub, write the rule.
FIX = "deploy/hub.sh start"


class Unavailable(NamedTuple):
    """Why sessions cannot be extended, and ``fix``: the command an admin runs
    as root on the login node ("" when none: sudo did not answer)."""

    reason: str
    fix: str = ""

    def __str__(self):
        return f"{self.reason}; an admin fixes it with `{self.fix}`" if self.fix else self.reason


def installed_helper():
    """``os.stat`` of the installed helper; None when there is none."""
    try:
        return os.stat(extendhelper.INSTALLED_AT)
    except FileNotFoundError:
        return None


def registered(job_name):
    """Whether a hub registered ``job_name`` with the helper."""
    return os.path.isfile(os.path.join(extendhelper.REGISTRY, f"{job_name}.json"))


def installation_problem(helper, is_registered, job_name):
    """What keeps the helper from extending this hub's sessions, given its
    ``os.stat`` (None: not installed) and whether the hub's ``job_name`` is
    registered (None: not asked): None when nothing does, else Unavailable.

    >>> from types import SimpleNamespace as Stat
    >>> installation_problem(Stat(st_uid=0, st_mode=0o100755), True, "portal-jupyter") is None
    True
    >>> installation_problem(None, True, "portal-jupyter").reason
    'the extension helper /usr/local/libexec/portal/portal-extend is not installed'
    >>> installation_problem(Stat(st_uid=999, st_mode=0o100755), True, "portal-jupyter").fix
    'deploy/hub.sh start'
    """
    helper_path = extendhelper.INSTALLED_AT
    if helper is None:
        return Unavailable(f"the extension helper {helper_path} is not installed", FIX)
    if not extendhelper.trusted(helper) or not helper.st_mode & 0o111:
        return Unavailable(
            f"the extension helper {helper_path} is not root's alone, or not executable "
            f"(owner uid {helper.st_uid}, mode {helper.st_mode & 0o7777:o})",
            FIX,
        )
    if is_registered is False:
        return Unavailable(
            f"this hub's sessions ({job_name}) are not registered with the extension helper "
            f"({extendhelper.REGISTRY}/{job_name}.json)",
            FIX,
        )
    return None


class ExtensionCheck:
    """Whether this process's account (the hub's) can extend sessions: the
    root helper is installed, root's alone; this hub's sessions (its
    ``job_name``, when known) are registered with it; and sudo lets the
    account run it (``sudo -n -l``, which runs nothing). One per process
    (``shared``), asked at its start (``at_start``) and then kept; while it
    says no, asked again at most every RECHECK_SECONDS when someone asks.
    An error of sudo counts as unavailable for now, never as available."""

    _shared = None

    @classmethod
    def shared(cls, timeout=20, job_name=None):
        if cls._shared is None:
            cls._shared = cls(pwd.getpwuid(os.geteuid()).pw_name, timeout, job_name)
        elif job_name and cls._shared.job_name is None:
            cls._shared.job_name = job_name
        return cls._shared

    def __init__(self, account, timeout=20, job_name=None):
        self.account = account
        self.timeout = timeout
        self.job_name = job_name
        self.problem = Unavailable("not asked yet")
        self.checked_at = None  # monotonic time of the last answer; None: none yet
        self._inflight = None

    def stale(self):
        return self.problem is not None and (
            self.checked_at is None or time.monotonic() - self.checked_at >= RECHECK_SECONDS
        )

    async def refresh(self):
        """Ask now (one question for callers at once): None, or ``Unavailable``."""
        return await asyncio.shield(self._asking())

    def _asking(self):
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._ask())
        return self._inflight

    async def _ask(self):
        is_registered = registered(self.job_name) if self.job_name else None
        problem = installation_problem(installed_helper(), is_registered, self.job_name)
        if problem is None:
            try:
                allowed = await slurm.may_run_helper(self.timeout)
            except (slurm.SlurmError, OSError) as e:
                problem = Unavailable(
                    f"sudo did not say whether the hub's account {self.account} may run the "
                    f"extension helper ({str(e)[:200]}); try again later"
                )
            else:
                if not allowed:
                    problem = Unavailable(
                        f"sudo does not let the hub's account {self.account} run "
                        f"{extendhelper.INSTALLED_AT}",
                        FIX,
                    )
        if problem is None and self.problem is not None and self.checked_at is not None:
            log.info(
                "Session extensions are available again: %s may run %s",
                self.account, extendhelper.INSTALLED_AT,
            )  # fmt: skip
        self.problem, self.checked_at = problem, time.monotonic()
        return problem

    async def verdict(self):
        """None when extensions are available, else ``Unavailable``; asked
        when it has not been yet, or said no RECHECK_SECONDS ago."""
        return await self.refresh() if self.stale() else self.problem

    def last_verdict(self):
        """For a page that cannot wait: ``Unavailable`` as last answered, else
        None (available, or not asked yet); a stale "no" is asked again
        meanwhile, for the next page."""
        if self.checked_at is None:
            return None
        if self.stale():
            self._asking()
        return self.problem

    async def at_start(self, logger=log):
        """Ask at the start of the hub or the service: an ERROR in the log,
        once, when extensions are unavailable, with the command that fixes it."""
        problem = await self.refresh()
        if problem is not None:
            fix = problem.fix and f"To fix it, run as root on the login node: {problem.fix}"
            logger.error(
                "Session extensions are unavailable: %s. %s",
                problem.reason, fix or "It is asked again at the next extension.",
            )  # fmt: skip
        return problem


def may_extend(actor, user, is_admin):
    """Whether ``actor`` may extend ``user``'s session: its owner, or a portal
    admin (``is_admin``: ``portal.roles.is_portal_admin`` of their scopes)."""
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
        # whether the account its commands run as (the hub's) may run the helper
        self.check = ExtensionCheck.shared(timeout, job_name)
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
        # any name the hub can hold (usernames.SAFE; [hub] username_pattern narrows it)
        if not job_id or not usernames.is_safe(user):
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
            await slurm.set_time_limit(str(job_id), new, profile.max_hours * 60, self.timeout)
        except slurm.SlurmError as e:
            log.error(
                "The time limit of job %s of %s was not set to %s: %s",
                job_id, user, slurm_time(new), e,
            )  # fmt: skip
            message = f"The time limit was not changed ({e})"
            if not isinstance(e, slurm.HelperRefused):  # sudo did not run it: why?
                problem = await self.check.refresh()  # what changed since it was asked
                if problem is not None:
                    message += f": {problem}"
            raise ExtendError(message, status=502) from None
        try:
            self.store.record_extension(actor, user, job_id, profile.name, limit, new)
        except Exception:  # the limit is set: say so, and keep it in the log at least
            log.exception("Could not audit the extension of job %s of %s", job_id, user)
        log.info(
            "%s extended job %s of %s (profile %s) from %s to %s",
            actor, job_id, user, profile.name, slurm_time(limit), slurm_time(new),
        )  # fmt: skip
        try:  # read back: the limit and end as Slurm has them now
            now_limit, end = await self.limit(user, job_id)
        except ExtendError:  # ended meanwhile, or Slurm is slow: what was set
            now_limit, end = new, None
        result = self._describe(user, job_id, profile, now_limit, end)
        result["previous_time_limit"] = slurm_time(limit)
        return result

    async def check_slurm_caps(self, job_id, new):
        """Slurm does not hold root's ``scontrol update`` (the helper's) to
        the partition's MaxTime or the QOS's MaxWall: they are checked here,
        for a clear answer (refused when they cannot be read), and again by
        the helper."""
        try:
            caps = await slurm.wall_caps(str(job_id), self.job_name, self.timeout)
        except slurm.SlurmError as e:
            log.error("Could not read the time caps of job %s: %s", job_id, e)
            raise ExtendError(f"Slurm did not say the job's time caps: {e}", status=502) from None
        for name, cap in caps.items():
            if cap is not None and new > cap:
                raise ExtendError(
                    f"{describe_limit(new)} in all is more than Slurm's {name} allows "
                    f"({describe_limit(cap)})",
                    "hours",
                )

    @staticmethod
    def _describe(user, job_id, profile, limit, end):
        return {
            "user": user,
            "job_id": str(job_id),
            "profile": profile.name,
            "time_limit": slurm_time(limit) if limit is not None else "UNLIMITED",
            "time_limit_text": describe_limit(limit) if limit is not None else "unlimited",
            "end": end.isoformat(timespec="seconds") if end else None,
            "max_hours": profile.max_hours,
            "hours_left": hours_left(limit, profile.max_hours) if limit is not None else 0,
        }
