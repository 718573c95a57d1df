"""Extending a running session's time limit: the one operation behind the
session card's "Extend by N hours" (the hub, ``spawners.session_handlers``)
and the admin service's ``POST api/sessions/NAME/extend``.

The caller says whose session (the hub's view: its job id and profile name);
here the request is checked, the job is read from Slurm, and the new limit is
set with ``scontrol update`` as the hub's own account (a Slurm operator, see
deploy/slurm.sh) and audited in the profile store. A refused request changes
nothing. The limit set is absolute (the old one plus the hours, checked
against the profile's ``max_hours``), so two requests at once never pass it.
"""

import logging
import os
import pwd
import re

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
        # the account Slurm's commands run as (the hub's), named in the operator hint
        self.account = pwd.getpwuid(os.geteuid()).pw_name

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
                message += ": " + OPERATOR_HINT.format(account=self.account)
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
