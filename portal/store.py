"""The profile store: spawner profiles, their revisions and who changed them.

SQLite by default, or PostgreSQL (``[portal] db_url``, ``portal.database``);
the schema is kept by alembic migrations (portal/migrations, version table
``portal_alembic_version``), so an upgrade keeps the data. The admin service
writes; the hub's spawner reads the enabled profiles at every spawn
(``ProfileStore.profiles``), so an edit applies at the next spawn.

The reads that every page makes (the profiles, the latest image checks, the
notebook jobs, a user's sampled GPU use) are answered from memory
(``ProfileStore._kept``) for as long as the database has not changed since
they were read: a write of this process's own is seen at once (SQLAlchemy's
``after_commit``), another process's through the database's own change
count: SQLite's ``PRAGMA data_version`` on a connection kept for it (no
table is read), PostgreSQL's ``pg_current_wal_lsn()`` (one round trip, no
table read). So the hub's pages see the admin service's edit at their next
render, and read nothing while nothing changed.

Every change is a row of ``portal_profile_changes`` with its author, time and
the profile before and after. Writes name the revision they edit: saving over
a newer revision raises ``Conflict`` (optimistic locking), never overwrites.

Every extension of a running session's time limit (``portal.extend``) is a
row of ``portal_time_extensions``: who asked, whose job, the limit before and
after.

Every notebook run as a Slurm job (``portal.notebookjobs``) is a row of
``portal_notebook_jobs``: whose, which notebook, profile, slice (with the
site's choices: partition, GPU model, account, QOS, reservation, node
feature) and parameters; its state is Slurm's.

Every saved preset (``portal.presets``) is a row of ``portal_presets``: its
owner (a user, or "" for one an admin published for everyone), its name
(unique per owner), the spawn options and the session it starts. A user's
presets and the published ones are kept in memory (``ProfileStore._kept``).

Every check of a site's container image (``portal.helper.imagecheck``, run
by the admin service) is a row of ``portal_image_checks``: the image, the
framework it was checked with, the image's stamp then, the verdict and its
output, who asked. A profile of an image is offered only while the latest
check of its (image, framework) passed at the image's current stamp.
"""

import asyncio
import copy
import logging
import sqlite3
import threading
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    String,
    Text,
    UniqueConstraint,
    event,
    false,
    func,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import DeclarativeBase, sessionmaker

from portal.core.durations import slurm_time
from portal.core.profiles import (
    SLICE_FIELDS,
    TUPLE_FIELDS,
    Profile,
    ProfileError,
    profile_from_dict,
)
from portal.database import (
    DatabaseError,
    connect_args,
    connection_failed,
    create_engine,
    database_url,
    is_postgresql,
)
from portal.presets import PUBLISHED, PresetError

log = logging.getLogger("portal.store")
BUSY_SECONDS = 15  # the longest a call waits for the database (a lock, a statement)
APPLICATION = "portal"  # PostgreSQL's application_name of the store's connections
MIGRATION_LOCK = 0x706F7274616C  # PostgreSQL's advisory lock of ``upgrade`` ("portal")
REFUSALS_SECONDS = 5.0  # refusals counted in memory reach the table within this
KEPT_READS = 2000  # reads kept in memory (``ProfileStore._kept_read``), at most

MIGRATIONS = Path(__file__).parent / "migrations"
VERSION_TABLE = "portal_alembic_version"
# The fields of a profile that the store keeps (and the history compares).
FIELDS = (
    "display_name", "description", "environment", *SLICE_FIELDS, "max_nodes", "idle_minutes",
    "groups", "enabled", "image", "user_images", "max_array",
    "partitions", "gpu_types", "choose", "features", "max_cores", "max_mem_gb",
)  # fmt: skip
# Fields added after the first schema, with the value that revisions stored
# before them meant (migrations add their columns with the same default).
ADDED_FIELDS = {
    "max_nodes": 1, "idle_minutes": 0, "image": "", "user_images": False, "max_array": 16,
    "partitions": [], "gpu_types": [], "choose": [], "features": [], "max_cores": 0,
    "max_mem_gb": 0,
}  # fmt: skip

# The site's choices a notebook job keeps (its Slice's, ``NotebookJob``).
JOB_CHOICES = ("partition", "gpu_type", "account", "qos", "reservation", "feature")


class Base(DeclarativeBase):
    pass


class ProfileRow(Base):
    __tablename__ = "portal_profiles"
    name = Column(String(32), primary_key=True)
    display_name = Column(String(80), nullable=False)
    description = Column(Text, nullable=False, default="")
    environment = Column(String(64), nullable=False)
    partition = Column(String(64), nullable=False)
    max_gpus = Column(Integer, nullable=False)
    max_nodes = Column(Integer, nullable=False, default=1, server_default="1")
    cores_per_gpu = Column(Integer, nullable=False)
    mem_per_gpu_gb = Column(Integer, nullable=False)
    default_hours = Column(Integer, nullable=False)
    max_hours = Column(Integer, nullable=False)
    idle_minutes = Column(Integer, nullable=False, default=0, server_default="0")  # 0: the site's
    groups = Column(JSON, nullable=False, default=list)
    enabled = Column(Boolean, nullable=False, default=True)
    image = Column(String(64), nullable=False, default="", server_default="")  # "": none
    user_images = Column(Boolean, nullable=False, default=False, server_default=false())
    max_array = Column(Integer, nullable=False, default=16, server_default="16")
    partitions = Column(JSON, nullable=False, default=list, server_default="[]")
    gpu_types = Column(JSON, nullable=False, default=list, server_default="[]")
    choose = Column(JSON, nullable=False, default=list, server_default="[]")
    features = Column(JSON, nullable=False, default=list, server_default="[]")
    max_cores = Column(Integer, nullable=False, default=0, server_default="0")
    max_mem_gb = Column(Integer, nullable=False, default=0, server_default="0")
    revision = Column(Integer, nullable=False, default=1)
    position = Column(Integer, nullable=False, default=0)  # order on the spawn page
    updated_at = Column(DateTime, nullable=False)
    updated_by = Column(String(255), nullable=False)

    def profile(self):
        return profile_from_dict(
            {"name": self.name, "revision": self.revision} | {f: getattr(self, f) for f in FIELDS}
        )


class ProfileChange(Base):
    __tablename__ = "portal_profile_changes"
    id = Column(Integer, primary_key=True, autoincrement=True)
    profile = Column(String(32), nullable=False, index=True)
    revision = Column(Integer, nullable=False)  # the revision this change made (or deleted)
    action = Column(String(16), nullable=False)  # seed create update enable disable revert delete
    author = Column(String(255), nullable=False)
    at = Column(DateTime, nullable=False)
    before = Column(JSON, nullable=True)
    after = Column(JSON, nullable=True)

    def to_dict(self):
        return {
            "id": self.id,
            "profile": self.profile,
            "revision": self.revision,
            "action": self.action,
            "author": self.author,
            "at": self.at.isoformat(timespec="seconds"),
            "before": self.before,
            "after": self.after,
            "changes": diff(self.before, self.after),
        }


class TimeExtension(Base):
    """One extension of a running session's time limit (``portal.extend``):
    who asked, whose session, its job, and the limit before and after."""

    __tablename__ = "portal_time_extensions"
    id = Column(Integer, primary_key=True, autoincrement=True)
    at = Column(DateTime, nullable=False)
    actor = Column(String(255), nullable=False)  # who asked: the user, or an admin
    user = Column(String(255), nullable=False, index=True)  # whose session
    job_id = Column(String(32), nullable=False)
    profile = Column(String(32), nullable=False)
    from_limit = Column(Integer, nullable=False)  # minutes
    to_limit = Column(Integer, nullable=False)  # minutes

    def to_dict(self):
        return {
            "id": self.id,
            "at": self.at.isoformat(timespec="seconds"),
            "actor": self.actor,
            "user": self.user,
            "job_id": self.job_id,
            "profile": self.profile,
            "from_limit": slurm_time(self.from_limit),
            "to_limit": slurm_time(self.to_limit),
            "from_minutes": self.from_limit,
            "to_minutes": self.to_limit,
        }


class ImageCheck(Base):
    """One check of a site's image with a framework: what it said, at which
    stamp of the image (``portal.helper.imagecheck.image_stamp``), who asked."""

    __tablename__ = "portal_image_checks"
    id = Column(Integer, primary_key=True, autoincrement=True)
    image = Column(String(64), nullable=False)
    framework = Column(String(64), nullable=False)  # "": without a framework's import
    stamp = Column(String(128), nullable=False)
    ok = Column(Boolean, nullable=False)
    message = Column(Text, nullable=False)
    lines = Column(JSON, nullable=False, default=list)  # the check's output
    checked_at = Column(DateTime, nullable=False)
    checked_by = Column(String(255), nullable=False)  # an admin, or "portal service"

    def to_dict(self):
        return {
            "id": self.id,
            "image": self.image,
            "framework": self.framework,
            "stamp": self.stamp,
            "ok": self.ok,
            "message": self.message,
            "lines": list(self.lines or []),
            "checked_at": self.checked_at.isoformat(timespec="seconds"),
            "checked_by": self.checked_by,
        }


class NotebookJob(Base):
    """One notebook run as a Slurm job (``portal.notebookjobs``): what was
    asked, by whom, and each task's parameters (one for a plain job, one per
    job of a sweep's array, in the array's order)."""

    __tablename__ = "portal_notebook_jobs"
    job_id = Column(String(32), primary_key=True)
    user = Column(String(255), nullable=False, index=True)  # whose job (its Unix account)
    notebook = Column(String(1024), nullable=False)  # relative to the user's home
    profile = Column(String(32), nullable=False)
    gpus = Column(Integer, nullable=False)  # per node
    nodes = Column(Integer, nullable=False)
    hours = Column(Integer, nullable=False)
    parameters = Column(JSON, nullable=False, default=dict)
    sweep = Column(JSON, nullable=False, default=dict)
    tasks = Column(JSON, nullable=False, default=list)  # [{name: value}] per task
    kernel = Column(String(255), nullable=False)
    submitted_at = Column(DateTime, nullable=False)
    submitted_by = Column(String(255), nullable=False)  # the user, or an admin
    rerun_of = Column(String(32), nullable=True)
    notify = Column(Boolean, nullable=False, default=False, server_default=false())  # by mail
    # the site's choices it ran with (issue 38): "" is Slurm's default (and
    # the jobs submitted before: their profile's partition); cores and
    # memory those of a job without GPUs (0: a GPU's slice, per node)
    partition = Column(String(64), nullable=False, default="", server_default="")
    gpu_type = Column(String(64), nullable=False, default="", server_default="")
    account = Column(String(64), nullable=False, default="", server_default="")
    qos = Column(String(64), nullable=False, default="", server_default="")
    reservation = Column(String(64), nullable=False, default="", server_default="")
    feature = Column(String(64), nullable=False, default="", server_default="")
    cores = Column(Integer, nullable=False, default=0, server_default="0")
    mem_gb = Column(Integer, nullable=False, default=0, server_default="0")

    def to_dict(self):
        return {
            "id": self.job_id,
            "user": self.user,
            "notebook": self.notebook,
            "profile": self.profile,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "hours": self.hours,
            "parameters": dict(self.parameters or {}),
            "sweep": dict(self.sweep or {}),
            "tasks": list(self.tasks or []),
            "kernel": self.kernel,
            "submitted_at": self.submitted_at.isoformat(timespec="seconds") + "Z",
            "submitted_by": self.submitted_by,
            "rerun_of": self.rerun_of,
            "notify": bool(self.notify),
            **{key: getattr(self, key) or "" for key in JOB_CHOICES},
            "cores": self.cores or 0,
            "mem_gb": self.mem_gb or 0,
        }


class SessionJob(Base):
    """A session's Slurm job (the usage report's profile of it), and how
    long it idled before the culler stopped it."""

    __tablename__ = "portal_session_jobs"
    job_id = Column(String(32), primary_key=True)
    user = Column(String(255), nullable=False, index=True)
    profile = Column(String(32), nullable=False)
    gpus = Column(Integer, nullable=False)
    nodes = Column(Integer, nullable=False)
    submitted_at = Column(DateTime, nullable=False)
    idle_seconds = Column(Integer, nullable=False, default=0, server_default="0")
    # the hub's samples of its GPUs' use (spawners.gpu_use): how many, their
    # mean utilisation in percent, the most GPUs busy at once (None: no
    # sample); those of the session's first node (its server's), ``gpus`` of them
    gpu_samples = Column(Integer, nullable=False, default=0, server_default="0")
    gpu_busy = Column(Float, nullable=True)
    gpus_used = Column(Integer, nullable=True)

    def gpu_use(self):
        return {
            "job_id": self.job_id, "profile": self.profile, "gpus": self.gpus, "nodes": self.nodes,
            "submitted_at": self.submitted_at.isoformat(timespec="seconds") + "Z",
            "gpu_samples": self.gpu_samples, "gpu_busy": self.gpu_busy,
            "gpus_used": self.gpus_used,
        }  # fmt: skip


class Refusal(Base):
    """Requests refused before anything was submitted, by reason (the hub's
    and the admin service's: ``portal_refused_requests_total``)."""

    __tablename__ = "portal_refusals"
    reason = Column(String(32), primary_key=True)
    count = Column(Integer, nullable=False, default=0, server_default="0")


class PresetRow(Base):
    """A saved preset (``portal.presets``): a spawn choice under a name, a
    user's own or published for everyone (``owner`` "")."""

    __tablename__ = "portal_presets"
    __table_args__ = (UniqueConstraint("owner", "name", name="uq_portal_presets_owner_name"),)
    id = Column(Integer, primary_key=True, autoincrement=True)
    owner = Column(String(255), nullable=False, index=True)  # "": published
    name = Column(String(80), nullable=False)
    options = Column(JSON, nullable=False, default=dict)  # as the spawn form posts them
    server_name = Column(String(32), nullable=False, default="", server_default="")
    created = Column(DateTime, nullable=False)
    updated = Column(DateTime, nullable=False)
    updated_by = Column(String(255), nullable=False)

    def to_dict(self):
        return {
            "id": self.id,
            "owner": self.owner,
            "name": self.name,
            "options": dict(self.options or {}),
            "server_name": self.server_name,
            "published": self.owner == PUBLISHED,
            "created": self.created.isoformat(timespec="seconds") + "Z",
            "updated": self.updated.isoformat(timespec="seconds") + "Z",
            "updated_by": self.updated_by,
        }


class Meta(Base):
    __tablename__ = "portal_meta"
    key = Column(String(64), primary_key=True)
    value = Column(Text, nullable=False)


class NotFound(LookupError):
    pass


class Conflict(Exception):
    """A write based on a revision that is no longer the current one."""

    def __init__(self, current, changes, change):
        self.current = current  # the Profile now stored
        self.changes = changes  # {field: (at the base revision, now)}
        self.change = change  # the latest ProfileChange dict
        who = change["author"] if change else "someone"
        listed = "; ".join(f"{k}: {_show(a)} → {_show(b)}" for k, (a, b) in changes.items())
        super().__init__(
            f"Profile {current.name!r} was changed by {who} (now revision {current.revision}) "
            f"since you opened it: {listed or 'no field differs'}. Nothing was saved; "
            "check the values and save again."
        )


def _show(value):
    if isinstance(value, list):
        return ", ".join(value) or "(none)"
    return repr(value) if isinstance(value, str) else str(value)


def fields_of(profile):
    """The stored fields of a Profile (or dict), as JSON-able values."""
    d = profile.to_dict() if isinstance(profile, Profile) else dict(profile)
    return {f: list(d[f]) if f in TUPLE_FIELDS else d[f] for f in FIELDS}


def filled(stored):
    """A revision's stored fields, with ``ADDED_FIELDS`` that it predates."""
    return {**ADDED_FIELDS, **stored} if stored else stored


def diff(before, after):
    """{field: (before, after)} for the fields that differ."""
    before, after = filled(before) or {}, filled(after) or {}
    return {
        f: (before.get(f), after.get(f))
        for f in FIELDS
        if before.get(f) != after.get(f) and (before or after)
    }


def now():
    return datetime.now(UTC).replace(tzinfo=None)


def default_url(state_dir):
    return f"sqlite:///{Path(state_dir) / 'portal.sqlite'}"


class ProfileStore:
    """Profiles in a SQLAlchemy database; every method is one transaction."""

    def __init__(self, url, setting="[portal] db_url"):
        """``url``: SQLite or PostgreSQL (``portal.database.database_url``;
        DatabaseError naming ``setting`` for any other). A call waits at
        most ``BUSY_SECONDS`` for SQLite's lock or a PostgreSQL statement,
        and ``portal.database.CONNECT_TIMEOUT`` for a PostgreSQL server."""
        self.url = database_url(url, setting)
        self.setting = setting
        if is_postgresql(self.url):
            # a connection the server dropped (a restart) is replaced, not an error
            kwargs = {"connect_args": connect_args(self.url, APPLICATION), "pool_pre_ping": True}
        else:
            kwargs = {"connect_args": {"timeout": BUSY_SECONDS}}
        self.engine = create_engine(self.url, setting, future=True, **kwargs)
        if is_postgresql(self.url):
            event.listen(self.engine, "connect", _postgresql_session)
        else:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self.Session = sessionmaker(self.engine, expire_on_commit=False)
        self._refused = Counter()  # refusals not yet in the table (``refused``)
        self._flush_due = False
        # reads kept in memory (``_kept``): {key: (change mark, value)}
        self._kept = {}
        self._commits = 0  # this process's commits through ``Session``
        self._version_lock = threading.Lock()
        self._data_version = None  # SQLite's connection for ``PRAGMA data_version``
        event.listen(self.Session, "after_commit", self._committed)

    # -- reads kept in memory -------------------------------------------------

    def _committed(self, _session):
        self._commits += 1

    def _change_mark(self):
        """What changes whenever the database does: this process's commits,
        and the database's own count of every connection's changes."""
        with self._version_lock:
            return (self._commits, self._database_version())

    def _database_version(self):
        if is_postgresql(self.url):
            with self.engine.connect() as connection:
                return str(connection.scalar(select(func.pg_current_wal_lsn())))
        path = self.engine.url.database
        if not path or path == ":memory:":
            return None  # one connection's database: only its own commits change it
        if self._data_version is None:
            # its own connection: data_version counts the others' commits
            self._data_version = sqlite3.connect(path, check_same_thread=False)
        try:
            return self._data_version.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            self._data_version.close()
            self._data_version = None
            return object()  # never equal: read the tables

    def _kept_read(self, key, read, keep=copy.deepcopy):
        """``read()``'s answer, from memory when the database has not changed
        since it was read for ``key``; ``keep``'s copy of it, so a caller's
        change to it stays its own."""
        mark = self._change_mark()  # before the read: a write meanwhile reads again
        kept = self._kept.get(key)
        if kept is None or kept[0] != mark:
            kept = (mark, read())
            if len(self._kept) > KEPT_READS:
                self._kept.clear()
            self._kept[key] = kept
        return keep(kept[1])

    # -- schema and seed ----------------------------------------------------

    def upgrade(self, revision="head"):
        """Create or migrate the schema to ``revision`` (alembic): the newest by default."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        try:
            connection = self.engine.connect()
        except DBAPIError as e:  # the first connection: said with the setting to check
            raise DatabaseError(connection_failed(self.url, self.setting, e)) from None
        with connection, connection.begin():
            if is_postgresql(self.url):
                # the hub and its service migrate at start: one at a time
                connection.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK)))
            config.attributes["connection"] = connection
            command.upgrade(config, revision)

    def schema(self):
        """The store's schema revision (alembic's), None for an empty store."""
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as connection:
            options = {"version_table": VERSION_TABLE}  # the store's own, not alembic's default
            return MigrationContext.configure(connection, opts=options).get_current_revision()

    def seed(self, profiles, author="site settings"):
        """Store those of ``profiles`` (dicts of the site settings) whose names the
        store has never held, after its own; returns their names. A profile the
        store holds, or held and an admin deleted, is never changed from here:
        the store is the truth, and a site's new profile still arrives."""
        with self.Session.begin() as db:
            held = set(db.scalars(select(ProfileChange.profile).distinct()))
            new = [profile_from_dict(d) for d in profiles]
            new = [p for p in new if p.name not in held]
            last = db.scalars(select(ProfileRow.position).order_by(ProfileRow.position.desc()))
            start = 0 if not held else (last.first() or 0) + 1
            for position, profile in enumerate(new, start):
                db.add(self._row(profile, 1, author, position))
                db.add(self._change(profile.name, 1, "seed", author, None, fields_of(profile)))
            if not db.get(Meta, "seeded"):
                db.add(Meta(key="seeded", value=now().isoformat()))
        if new:
            names = ", ".join(p.name for p in new)
            log.info("profile store seeded with %d profiles from %s: %s", len(new), author, names)
        return [p.name for p in new]

    # -- reading ------------------------------------------------------------

    def profiles(self):
        """Every profile, in spawn-page order (kept in memory, ``_kept_read``)."""
        return self._kept_read(("profiles",), self._profiles, keep=list)  # Profile is frozen

    def _profiles(self):
        with self.Session() as db:
            rows = db.scalars(select(ProfileRow).order_by(ProfileRow.position, ProfileRow.name))
            return [row.profile() for row in rows]

    def get(self, name):
        with self.Session() as db:
            row = db.get(ProfileRow, name) if isinstance(name, str) else None
            if row is None:
                raise NotFound(f"No profile named {str(name)[:40]!r}")
            return row.profile()

    def history(self, name):
        """The changes of a profile, newest first, as dicts."""
        with self.Session() as db:
            rows = db.scalars(
                select(ProfileChange)
                .where(ProfileChange.profile == name)
                .order_by(ProfileChange.id.desc())
            )
            return [row.to_dict() for row in rows]

    def revision(self, name, revision):
        """The fields of ``name`` as revision ``revision`` stored them."""
        with self.Session() as db:
            return self._revision(db, name, revision)

    @staticmethod
    def _revision(db, name, revision):
        row = db.scalars(
            select(ProfileChange).where(
                ProfileChange.profile == name,
                ProfileChange.revision == revision,
                ProfileChange.after.is_not(None),
            )
        ).first()
        if row is None:
            raise NotFound(f"Profile {name!r} has no revision {revision}")
        return filled(dict(row.after))

    # -- writing ------------------------------------------------------------

    def create(self, profile, author):
        with self.Session.begin() as db:
            if db.get(ProfileRow, profile.name) is not None:
                raise ProfileError(f"A profile named {profile.name!r} exists already", "name")
            last = db.scalars(select(ProfileRow.position).order_by(ProfileRow.position.desc()))
            position = (last.first() or 0) + 1
            revision = self._next_revision(db, profile.name)
            db.add(self._row(profile, revision, author, position))
            change = self._change(
                profile.name, revision, "create", author, None, fields_of(profile)
            )
            db.add(change)
        return self.get(profile.name)

    def update(self, profile, base_revision, author, action="update"):
        """Store ``profile`` over revision ``base_revision``; Conflict if that is not current."""
        with self.Session.begin() as db:
            row = db.get(ProfileRow, profile.name)
            if row is None:
                raise NotFound(f"No profile named {profile.name!r}")
            self._check_base(db, row, base_revision)
            before, after = fields_of(row.profile()), fields_of(profile)
            if before == after:
                return row.profile()
            row.revision += 1
            for f in FIELDS:
                setattr(row, f, after[f])
            row.updated_at, row.updated_by = now(), author
            db.add(self._change(row.name, row.revision, action, author, before, after))
        return self.get(profile.name)

    def delete(self, name, base_revision, author):
        with self.Session.begin() as db:
            row = db.get(ProfileRow, name)
            if row is None:
                raise NotFound(f"No profile named {name!r}")
            self._check_base(db, row, base_revision)
            before = fields_of(row.profile())
            db.add(self._change(name, row.revision, "delete", author, before, None))
            db.delete(row)

    # -- time extensions ----------------------------------------------------

    def record_extension(self, actor, user, job_id, profile, from_minutes, to_minutes):
        """Audit one extension of a session's time limit; returns it as a dict."""
        with self.Session.begin() as db:
            row = TimeExtension(
                at=now(),
                actor=actor,
                user=user,
                job_id=str(job_id),
                profile=profile,
                from_limit=from_minutes,
                to_limit=to_minutes,
            )
            db.add(row)
        return row.to_dict()

    def refused(self, reason):
        """One request refused (``portal_refused_requests_total``): counted in
        memory at once, added to the table at most every ``REFUSALS_SECONDS``
        by a worker thread (one UPDATE per reason), so that a user sending
        refused requests costs no write each and never blocks the event loop."""
        self._refused[str(reason)[:32]] += 1
        if self._flush_due:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a script): at once
            self.flush_refusals()
            return
        self._flush_due = True
        loop.call_later(REFUSALS_SECONDS, lambda: asyncio.ensure_future(self._flush_later()))

    async def _flush_later(self):
        self._flush_due = False
        taken, self._refused = self._refused, Counter()
        try:
            await asyncio.to_thread(self._add_refusals, taken)
        except Exception as e:  # noqa: BLE001 (kept for the next flush)
            log.warning("Refusals were not counted yet: %s", e)
            self._refused.update(taken)

    def flush_refusals(self):
        taken, self._refused = self._refused, Counter()
        try:
            self._add_refusals(taken)
        except Exception:
            self._refused.update(taken)
            raise

    def _add_refusals(self, counts):
        for reason, n in list(counts.items()):
            self.count_refusal(reason, n)
            del counts[reason]  # a later failure keeps only what is not in the table

    def count_refusal(self, reason, n=1):
        """``n`` more requests refused for ``reason`` in the table (one
        statement: the hub and the service add at once without losing one)."""
        reason = str(reason)[:32]
        for _ in range(3):
            with self.Session.begin() as db:
                done = db.execute(
                    update(Refusal).where(Refusal.reason == reason)
                    .values(count=Refusal.count + n)
                ).rowcount  # fmt: skip
                if done:
                    return
            try:
                with self.Session.begin() as db:
                    db.add(Refusal(reason=reason, count=n))
                return
            except IntegrityError:  # the other process made the row meanwhile
                continue

    def refusal_counts(self):
        """``{reason: requests refused}``, every one, ever: the table's, and
        this process's not yet in it."""
        with self.Session() as db:
            counts = Counter({r.reason: r.count for r in db.scalars(select(Refusal))})
        counts.update(self._refused)
        return dict(counts)

    def extension_count(self):
        """How many extensions the audit holds (every one, ever)."""
        with self.Session() as db:
            return db.scalar(select(func.count()).select_from(TimeExtension))

    def extensions(self, user=None, limit=200):
        """The latest extensions (of ``user``'s sessions, or everyone's), newest first."""
        with self.Session() as db:
            query = select(TimeExtension).order_by(TimeExtension.id.desc()).limit(limit)
            if user is not None:
                query = query.where(TimeExtension.user == user)
            return [row.to_dict() for row in db.scalars(query)]

    # -- notebook jobs ------------------------------------------------------

    def record_notebook_job(self, **fields):
        """Keep a submitted notebook job (``NotebookJob``'s fields); its dict."""
        with self.Session.begin() as db:
            row = NotebookJob(submitted_at=now(), **fields)
            db.add(row)
        return row.to_dict()

    def record_session_job(self, job_id, user, profile, gpus, nodes):
        with self.Session.begin() as db:
            db.merge(SessionJob(job_id=str(job_id), user=user, profile=profile, gpus=gpus,
                                nodes=nodes, submitted_at=now()))  # fmt: skip

    def record_idle_cull(self, job_id, idle_seconds):
        with self.Session.begin() as db:
            row = db.get(SessionJob, str(job_id))
            if row is not None:
                row.idle_seconds = int(idle_seconds)

    def record_gpu_sample(self, job_id, busy_gpus, mean_utilization):
        """One sample of a session's GPUs (``spawners.gpu_use``): the running
        mean utilisation and the most GPUs busy at once. False when the
        session's job is not in the store."""
        with self.Session.begin() as db:
            row = db.get(SessionJob, str(job_id))
            if row is None:
                return False
            n = row.gpu_samples or 0
            row.gpu_busy = ((row.gpu_busy or 0.0) * n + float(mean_utilization)) / (n + 1)
            row.gpu_samples = n + 1
            row.gpus_used = max(row.gpus_used or 0, int(busy_gpus))
        return True

    def session_gpu_use(self, job_ids=None, user=None, limit=5, exclude=()):
        """The sampled GPU use of sessions that held GPUs: those of ``job_ids``
        (``{job id: dict}``), or ``user``'s latest ``limit`` with samples,
        newest first, but those of ``exclude`` (their running ones: a list).
        A user's is kept in memory (``_kept_read``)."""
        if job_ids is None:
            key = ("session_gpu_use", user, limit, tuple(sorted(str(j) for j in exclude)))
            return self._kept_read(key, lambda: self._session_gpu_use(None, user, limit, exclude))
        return self._session_gpu_use(job_ids, user, limit, exclude)

    def _session_gpu_use(self, job_ids, user, limit, exclude):
        with self.Session() as db:
            if job_ids is not None:
                ids = {str(j) for j in job_ids}
                query = select(SessionJob).where(SessionJob.job_id.in_(ids))
                return {r.job_id: r.gpu_use() for r in db.scalars(query)}
            query = (
                select(SessionJob)
                .where(SessionJob.user == user, SessionJob.gpus > 0, SessionJob.gpu_samples > 0)
                .where(SessionJob.job_id.not_in([str(j) for j in exclude]))
                .order_by(SessionJob.submitted_at.desc(), SessionJob.job_id.desc())
                .limit(limit)
            )
            return [r.gpu_use() for r in db.scalars(query)]

    def job_profiles(self, job_ids):
        """``{job id: (profile, idle seconds)}`` of sessions and notebook jobs
        (an array task's id, ``812_2``, as its job's)."""
        ids = {str(j).split("_")[0] for j in job_ids}
        with self.Session() as db:
            found = {
                r.job_id: (r.profile, r.idle_seconds)
                for r in db.scalars(select(SessionJob).where(SessionJob.job_id.in_(ids)))
            }
            for r in db.scalars(select(NotebookJob).where(NotebookJob.job_id.in_(ids))):
                found[r.job_id] = (r.profile, 0)
        return {j: found[str(j).split("_")[0]] for j in job_ids if str(j).split("_")[0] in found}

    def notebook_jobs(self, user=None, limit=200):
        """The latest notebook jobs (``user``'s, or everyone's), newest first
        (kept in memory, ``_kept_read``)."""
        return self._kept_read(
            ("notebook_jobs", user, limit), lambda: self._notebook_jobs(user, limit)
        )

    def _notebook_jobs(self, user, limit):
        with self.Session() as db:
            query = select(NotebookJob).order_by(NotebookJob.submitted_at.desc()).limit(limit)
            if user is not None:
                query = query.where(NotebookJob.user == user)
            return [row.to_dict() for row in db.scalars(query)]

    def notebook_job(self, job_id):
        """The notebook job ``job_id``'s dict, or NotFound."""
        with self.Session() as db:
            row = db.get(NotebookJob, str(job_id))
            if row is None:
                raise NotFound(f"No notebook job {str(job_id)[:32]}")
            return row.to_dict()

    # -- presets ------------------------------------------------------------

    def presets(self, owner):
        """``owner``'s presets, then the published ones, each by name, as dicts
        (kept in memory, ``_kept_read``: the home page reads nothing while
        nothing changed)."""
        return self._kept_read(("presets", owner), lambda: self._presets(owner))

    def _presets(self, owner):
        with self.Session() as db:
            query = (
                select(PresetRow)
                .where(PresetRow.owner.in_({owner, PUBLISHED}))
                .order_by(PresetRow.owner == PUBLISHED, PresetRow.name, PresetRow.id)
            )
            return [row.to_dict() for row in db.scalars(query)]

    def published_presets(self):
        """The presets published for everyone, by name (``presets``' own read)."""
        return [p for p in self.presets(PUBLISHED) if p["published"]]

    def preset(self, preset_id):
        """The preset ``preset_id``'s dict, or NotFound."""
        with self.Session() as db:
            row = db.get(PresetRow, preset_id) if isinstance(preset_id, int) else None
            if row is None:
                raise NotFound(f"No preset {str(preset_id)[:12]}")
            return row.to_dict()

    def save_preset(self, owner, name, options, server_name, author, preset_id=None):
        """Store a preset (checked by the caller: ``portal.presets``), new or
        over ``preset_id`` (then of ``owner``: NotFound otherwise); its dict.
        A name ``owner`` already gave another preset: PresetError on "name"."""
        try:
            with self.Session.begin() as db:
                if preset_id is None:
                    row = PresetRow(owner=owner, created=now())
                    db.add(row)
                else:
                    row = db.get(PresetRow, preset_id)
                    if row is None or row.owner != owner:
                        raise NotFound(f"No preset {preset_id}")
                row.name, row.options, row.server_name = name, dict(options), server_name
                row.updated, row.updated_by = now(), author
            return row.to_dict()
        except IntegrityError:
            whose = "A published preset" if owner == PUBLISHED else "One of your presets"
            raise PresetError(f"{whose} is named {name!r} already", "name") from None

    def delete_preset(self, preset_id, owner):
        """Delete ``owner``'s preset ``preset_id`` (NotFound if not theirs)."""
        with self.Session.begin() as db:
            row = db.get(PresetRow, preset_id)
            if row is None or row.owner != owner:
                raise NotFound(f"No preset {preset_id}")
            db.delete(row)

    # -- image checks -------------------------------------------------------

    def record_image_check(self, image, framework, stamp, ok, message, lines, checked_by):
        """Audit one check of the site's ``image`` with ``framework`` at the
        image's ``stamp``; returns it as a dict."""
        with self.Session.begin() as db:
            row = ImageCheck(
                image=image,
                framework=framework,
                stamp=stamp,
                ok=bool(ok),
                message=message,
                lines=[str(line) for line in lines],
                checked_at=now(),
                checked_by=checked_by,
            )
            db.add(row)
        return row.to_dict()

    def latest_image_checks(self):
        """{(image, framework): the latest check's dict} (kept in memory, ``_kept_read``)."""
        return self._kept_read(("latest_image_checks",), self._latest_image_checks)

    def _latest_image_checks(self):
        with self.Session() as db:
            latest = (
                select(func.max(ImageCheck.id))
                .group_by(ImageCheck.image, ImageCheck.framework)
                .scalar_subquery()
            )
            rows = db.scalars(select(ImageCheck).where(ImageCheck.id.in_(latest)))
            return {(row.image, row.framework): row.to_dict() for row in rows}

    def image_checks(self, image=None, limit=50):
        """The latest checks (of ``image``, or of every image), newest first."""
        with self.Session() as db:
            query = select(ImageCheck).order_by(ImageCheck.id.desc()).limit(limit)
            if image is not None:
                query = query.where(ImageCheck.image == image)
            return [row.to_dict() for row in db.scalars(query)]

    # -- helpers ------------------------------------------------------------

    def _check_base(self, db, row, base_revision):
        if base_revision == row.revision:
            return
        try:
            base = self._revision(db, row.name, base_revision)
        except NotFound:
            base = {}
        latest = db.scalars(
            select(ProfileChange)
            .where(ProfileChange.profile == row.name)
            .order_by(ProfileChange.id.desc())
        ).first()
        current = row.profile()
        raise Conflict(current, diff(base, fields_of(current)), latest and latest.to_dict())

    def _next_revision(self, db, name):
        # a re-created profile goes on from the revisions of the deleted one
        last = db.scalars(
            select(ProfileChange.revision)
            .where(ProfileChange.profile == name)
            .order_by(ProfileChange.revision.desc())
        ).first()
        return (last or 0) + 1

    @staticmethod
    def _row(profile, revision, author, position):
        return ProfileRow(
            name=profile.name,
            revision=revision,
            position=position,
            updated_at=now(),
            updated_by=author,
            **fields_of(profile),
        )

    @staticmethod
    def _change(name, revision, action, author, before, after):
        return ProfileChange(
            profile=name,
            revision=revision,
            action=action,
            author=author,
            at=now(),
            before=before,
            after=after,
        )


def _postgresql_session(dbapi_connection, _record):
    cursor = dbapi_connection.cursor()
    # as SQLite's lock timeout: a statement that waits longer fails
    cursor.execute(f"SET statement_timeout = {int(BUSY_SECONDS * 1000)}")
    cursor.close()
    dbapi_connection.commit()


def _sqlite_pragmas(dbapi_connection, _record):
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # the hub reads while the service writes
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def store_url(settings):
    """The store's database: [portal] db_url, or SQLite in the hub's state folder."""
    return settings["portal"]["db_url"] or default_url(settings["hub"]["state_dir"])
