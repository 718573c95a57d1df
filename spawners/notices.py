"""Notices to a session's user (issue 26): when a session that queued
starts, ``warn_minutes`` before its time limit, and when it ends without
their stopping it (its time limit, a node failure, the idle culler, out of
memory). In the browser, for every session: the hub's pages show each as a
desktop notification (the Notification API, once the user allowed it on
the spawn page), from ``GET /hub/portal/notices`` (``events_for``: the
hub's memory, no Slurm query) and, on the spawn's progress page, from the
progress stream. By e-mail, when they asked for it (the spawn form's box,
the REST API's ``"notify": true``).

The events come from one place, the shared poll: after each squeue the
poller hands its jobs to ``Notices.update``, which compares them with what
it saw before; an end comes from the spawner's record of it (sacct's
reason), made when the shared poll finds the job gone. Each notice is sent
once per job (``sent``, kept in the spawner's state across a hub restart)
and logged. Mail goes to the address in the user's LDAP ``mail``, looked up
when the session is submitted, through the login node's
``/usr/sbin/sendmail`` (deploy/mail.sh), as the hub's account.
"""

import asyncio
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from tornado import web

from portal.slurm.commands import MINIMAL_ENV

log = logging.getLogger("portal.notices")

SENDMAIL = "/usr/sbin/sendmail"
SEND_TIMEOUT = 30
KEPT_EVENTS = 20  # a user's latest notices the pages may still fetch


@dataclass
class Followed:
    """What a notice of one session says, and what has been sent of it."""

    user: str
    address: str  # "": the browser only
    session: str  # the session's name as the user knows it: its profile's
    link: str  # where the session is opened
    home: str  # the portal's home page: extend, stop, relaunch
    slice: str  # the slice as the spawn page says it
    warn_minutes: int
    sent: set = field(default_factory=set)  # "started", "ending", "idle", "ended"
    seen_pending: bool = False
    # seconds until the idle culler stops the session (None: it would not)
    idle_left: object = None
    kind: str = "session"  # or "notebook job" (spawners.job_notices)


def aware(moment):
    """``moment`` with its time zone: squeue's stamps come in the hub's
    local time, without one.

    >>> aware(datetime(2026, 11, 27, 8, 0, tzinfo=UTC)).tzinfo is UTC
    True
    >>> aware(datetime(2026, 11, 27, 8, 0)).tzinfo is not None
    True
    """
    return moment if moment.tzinfo else moment.astimezone()


def message(kind, job, target, sender, detail=""):
    """The notice ``kind`` ("started", "ending", "ended") of ``job`` (the
    poll's Job, or None once it is gone; its id as ``detail`` then names
    it) for ``target``, as an EmailMessage from ``sender``."""
    job_id = job.id if job else detail.split("|")[0]
    node = ", ".join(job.nodes) if job and job.nodes else "none now"
    end = job.end.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if job and job.end else "-"
    kind_, session = target.kind, target.kind == "session"
    subjects = {
        "started": f"Your {kind_} {target.session} has started (Slurm job {job_id})",
        "ending": f"Your session {target.session} ends in {target.warn_minutes} minutes "
        f"(Slurm job {job_id})",
        "ended": f"Your {kind_} {target.session} has ended (Slurm job {job_id})",
        "idle": f"Your session {target.session} is idle and will be stopped soon "
        f"(Slurm job {job_id})",
    }
    why = detail.split("|", 1)[1] if "|" in detail else "Slurm no longer lists it"
    openers = {
        "started": f"your {kind_} has started, after waiting in the queue.",
        "ending": f"your session reaches its time limit in {target.warn_minutes} minutes: "
        "save your work, or extend the session from the portal's home page.",
        "idle": f"your session has been idle (no kernel, terminal or GPU busy) and the "
        f"portal stops it in {detail} unless you use it: open it to keep it.",
        "ended": f"your session has ended without your stopping it: {why}."
        if session
        else f"your {kind_} has ended: {why}.",
    }
    if session:
        last = f"Open it:    {target.link}" if kind != "ended" else f"Portal:     {target.home}"
    else:
        last = f"Its page:   {target.link}"
    lines = [
        f"Hello {target.user},",
        "",
        openers[kind],
        "",
        f"Session:    {target.session}" if session else f"Notebook:   {target.session}",
        f"Slurm job:  {job_id}",
        f"Node:       {node}",
        f"GPUs:       {target.slice}",
        f"Time limit: {end}",
        last,
        "",
        "You get this mail because you asked for notices when you "
        + ("started the session." if session else "submitted the job."),
    ]
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = target.address
    mail["Subject"] = subjects[kind]
    mail["Date"] = formatdate(localtime=False)
    mail["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    mail["Auto-Submitted"] = "auto-generated"
    mail.set_content("\n".join(lines) + "\n", cte="8bit")  # readable as it lands
    return mail


async def sendmail(mail, timeout=SEND_TIMEOUT):
    """Hand ``mail`` to the login node's sendmail (recipients from its
    headers); RuntimeError with sendmail's words when it refuses."""
    proc = await asyncio.create_subprocess_exec(
        SENDMAIL, "-oi", "-t",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env=dict(MINIMAL_ENV),
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(mail.as_bytes()), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"sendmail gave no answer within {timeout} s") from None
    if proc.returncode:
        words = out.decode(errors="replace").strip()[:300]
        raise RuntimeError(f"sendmail failed ({proc.returncode}): {words}")


class Notices:
    """The notices of one hub's sessions (its poller holds one)."""

    def __init__(self, sender="", send=sendmail):
        self.sender = sender
        self.send = send
        self.followed = {}  # job id -> Followed
        self.events = {}  # user -> deque of their latest notices, for the pages
        self._ids = itertools.count(1)
        self._sending = set()

    def events_for(self, user, since):
        """``(events after id since, the latest id)`` of ``user``'s notices
        (``since`` < 0: none, only the latest id: a page just opened)."""
        kept = self.events.get(user, ())
        last = kept[-1]["id"] if kept else 0
        return ([e for e in kept if e["id"] > since] if since >= 0 else []), last

    def follow(self, job_id, target):
        self.followed[str(job_id)] = target

    def unfollow(self, job_id):
        return self.followed.pop(str(job_id), None)

    def update(self, jobs, now=None):
        """The shared poll's new squeue (``{id: Job}``): a followed job
        that was seen pending and now runs has started; a running one within
        its ``warn_minutes`` of its end is ending."""
        now = now or datetime.now(UTC)
        for job_id, target in list(self.followed.items()):
            job = jobs.get(job_id)
            if job is None:
                continue
            try:
                self._update_one(job, target, now)
            except Exception:  # one job's trouble never keeps the others' notices
                log.exception("The notices of job %s of %s failed", job_id, target.user)

    def _update_one(self, job, target, now):
        if job.pending:
            target.seen_pending = True
        elif job.running and target.seen_pending:
            self.notify("started", job, target)
        if job.running and job.end and target.warn_minutes > 0:
            if (aware(job.end) - now).total_seconds() <= target.warn_minutes * 60:
                self.notify("ending", job, target)
            else:  # extended past the warning: the new end is told too
                target.sent.discard("ending")
        if job.running and target.idle_left is not None:
            self.check_idle(job, target)

    def check_idle(self, job, target):
        """The idle notice when the culler would stop the session within its
        ``warn_minutes`` (a quarter of its idle limit at most); again after
        the user came back and it idles once more."""
        left, limit = target.idle_left()
        if left is None or not target.warn_minutes:
            return
        if left > min(target.warn_minutes * 60, limit / 4):
            target.sent.discard("idle")  # in use again: a new idle spell is told too
        elif left > 0:
            minutes = max(1, round(left / 60))
            self.notify("idle", job, target, f"{minutes} minute{'s' if minutes != 1 else ''}")

    def ended(self, job_id, reason):
        """The job ``job_id`` ended without a stop of its user's (``reason``:
        how, from sacct or the culler); it is no longer followed."""
        target = self.unfollow(job_id)
        if target is not None:
            self.notify("ended", None, target, f"{job_id}|{reason}")

    def notify(self, kind, job, target, detail=""):
        """Notice ``kind`` of a job, once: kept for the user's pages, and
        mailed in the background (the poll goes on) when they asked; logged."""
        if kind in target.sent:
            return
        target.sent.add(kind)
        try:
            mail = message(kind, job, target, self.sender, detail)
        except (ValueError, TypeError) as e:  # a header it cannot be (logged, never sent)
            log.error("Notice %r to %s could not be written: %s", kind, target.user, e)
            return
        event = {
            "id": next(self._ids),
            "job_id": job.id if job else detail.split("|")[0],
            "kind": kind,
            "title": str(mail["Subject"]),
            "body": mail.get_content().split("\n\n")[1].strip(),
            "url": target.link if kind != "ended" or target.kind != "session" else target.home,
            "time": time.time(),
        }
        self.events.setdefault(target.user, deque(maxlen=KEPT_EVENTS)).append(event)
        log.info("Notice %r for %s: %s", kind, target.user, event["title"])
        if not target.address:
            return
        task = asyncio.ensure_future(self._send(kind, mail, target))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, kind, mail, target):
        try:
            await self.send(mail)
        except Exception as e:  # noqa: BLE001 (logged: a notice never stops the poll)
            log.error("Notice %r to %s <%s> failed: %s", kind, target.user, target.address, e)
            return
        log.info("Notice %r sent to %s <%s>: %s", kind, target.user, target.address,
                 mail["Subject"])  # fmt: skip


class SessionNotices:
    """PortalSpawner's side of the notices: the address looked up before
    the submission, the job followed after it, and what was sent kept in
    the state."""

    notice_address = ""  # the user's LDAP mail, while a session asked for notices
    notice_following = False  # whether the poll's notices follow this spawner's job

    async def prepare_notices(self):
        """When the options ask for notices, the user's LDAP ``mail``: a
        session is refused (HTTP 400, nothing submitted) when they have none."""
        self.notice_address = ""
        if not (self.last_options or {}).get("notify"):
            return
        lookup = getattr(self.authenticator, "lookup_mail", None)
        try:
            address = await asyncio.to_thread(lookup, self.user.name) if lookup else None
        except Exception as e:  # noqa: BLE001 (LDAP failing: said, and nothing submitted)
            self.log.error("LDAP lookup of %s's mail failed: %s", self.user.name, e)
            raise web.HTTPError(
                503, "The directory did not answer for your e-mail address: try again, "
                "or start without notices.",
            ) from None  # fmt: skip
        if not address:
            raise web.HTTPError(
                400, "You asked for notices by e-mail, but your account has no e-mail "
                "address in the directory (LDAP mail): ask your admin, or start without "
                "notices.",
            )  # fmt: skip
        self.notice_address = address

    def follow_notices(self, sent=()):
        """Follow the submitted job for its notices (``sent``: those sent
        before): for the browser always, by mail when it has an address."""
        if not self.job_id:
            return
        self.notice_following = True
        notices = self.poller.notices
        notices.sender = self.notice_from
        # the user's URL: with the host of their own origin already where
        # sessions have one ([hub] domain), else the hub's path alone
        url = self.user.server_url(self.name) if hasattr(self.user, "server_url") else ""
        url = url or self.user.url
        if not url.startswith(("https://", "http://")):
            url = self.notice_hub_url.rsplit("/hub/", 1)[0] + url
        slice_ = self.job_slice.describe() if self.job_slice else ""
        notices.follow(
            self.job_id,
            Followed(
                user=self.user.name, address=self.notice_address,
                session=self.profile.display_name if self.profile else "Jupyter",
                link=url, home=f"{self.notice_hub_url}home",
                slice=slice_, warn_minutes=self.warn_minutes, sent=set(sent),
                idle_left=self.idle_left,
            ),
        )  # fmt: skip

    def idle_left(self):
        """``(seconds until the idle culler stops this session, its idle
        limit)``, from the hub's record of its last activity; (None, 0) when
        it is not culled or has no activity yet."""
        limit = self.idle_seconds()
        orm = self.orm_spawner
        last = orm.last_activity if orm is not None else None
        if not limit or last is None:
            return None, 0
        if last.tzinfo is None:  # JupyterHub keeps it as naive UTC
            last = last.replace(tzinfo=UTC)
        return limit - (datetime.now(UTC) - last).total_seconds(), limit

    def notices_state(self):
        if not (self.job_id and self.notice_following):
            return {}
        target = self.poller.notices.followed.get(str(self.job_id))
        sent = sorted(target.sent) if target else []
        return {"notices": {"address": self.notice_address, "sent": sent}}

    def load_notices_state(self, state):
        saved = state.get("notices")
        if isinstance(saved, dict) and isinstance(saved.get("address"), str):
            self.notice_address = saved["address"]
            self.follow_notices([s for s in saved.get("sent", []) if isinstance(s, str)])

    def notice_ended(self, why):
        """The job ended without a stop of its user's: ``why``, in words."""
        if self.job_id:
            self.poller.notices.ended(self.job_id, why)

    def unfollow_notices(self):
        """The user (or an admin) stops the session: no notice of its end."""
        if self.job_id:
            self.poller.notices.unfollow(self.job_id)

    def started_notice(self):
        """The page's notice that this spawn's queued job started (for the
        progress stream), or None."""
        kept = self.poller.notices.events.get(self.user.name, ())
        job_id = str(self.job_id or "")
        return next((e for e in kept if e["job_id"] == job_id and e["kind"] == "started"), None)
