#!/usr/bin/python3 -I
"""portal-extend JOB MINUTES PROFILE_MAX: lengthen a running portal session's
Slurm time limit, as root, for the hub's account and nobody else.

Installed by deploy/hub.sh as a root-owned copy (INSTALLED_AT, 0755) and run
by the hub through its one root rule in /etc/sudoers.d/portal::

    sudo -n /usr/local/libexec/portal/portal-extend 353 300 1440

JOB is the job id, MINUTES the new limit (absolute, in minutes), PROFILE_MAX
the most minutes the session's profile allows, as the hub's profile store has
it now. The hub is the only caller sudo lets through, so its word is trusted
for the profile (which lives in the hub's store, not in the job: a job's
Comment is the user's to write); everything the hub says about the job is
checked again here against Slurm, and Slurm's own caps hold whatever the hub
says. The helper refuses, changing nothing, unless:

- JOB, MINUTES and PROFILE_MAX are plain whole numbers, within bounds;
- squeue lists the job as RUNNING;
- its name is the session job name of a hub registered in REGISTRY (one
  root-owned ``JOB_NAME.json`` per hub, written by ``deploy/hub.sh start``);
- its user is not root, has the uid Slurm names and a uid within that hub's
  ``[hub] uid_min``..``uid_max``, and is a member of one of its
  ``[ldap] allowed_groups`` (through NSS, as ``getent group``);
- MINUTES is longer than its limit now (a user may shorten their own job;
  this only lengthens), at most PROFILE_MAX, and within its partition's
  MaxTime and its QOS's MaxWall (root's ``scontrol update`` is held to
  neither by Slurm).

Whatever Slurm account the job runs under (a lab's, the user's default):
the portal's jobs are known by what their hub registered, not by an account.
A user's own job that a user named like the portal's sessions passes the
checks of the job above; it is the hub that asks for its own sessions' jobs
alone (``portal.extend``: the job id it submitted, read again from Slurm),
and the profile's, the partition's and the QOS's caps hold here whoever asks.

Slurm's commands run from the folder the job's hub registered (its
``[slurm] bin_dir``), never from one the caller names, and only when that
folder, each folder above it and the command are root's alone; the job
itself is looked up with the first registered folder that has squeue.

Then it runs ``scontrol update JobId=JOB TimeLimit=...`` and prints the new
limit as Slurm writes it. Every refusal is one line on stderr and a non-zero
exit: 2 for a malformed command line, 1 for anything else.

This file imports nothing but Python's standard library, and runs under
``/usr/bin/python3 -I`` (no environment variable, user site or script folder
on its path), so the installed copy runs only root-owned code whoever can
write to the repository it came from. The hub imports it for the constants
and ``registration`` only.
"""

import grp
import json
import os
import pwd
import re
import stat
import subprocess
import sys
from dataclasses import dataclass

# Where deploy/hub.sh installs this file (root, 0755) and where the hubs'
# registrations are (a folder of root's, one JOB_NAME.json per hub).
INSTALLED_AT = "/usr/local/libexec/portal/portal-extend"
REGISTRY = "/etc/portal/extend.d"
# The most minutes a limit may have: a profile's max_hours is at most 30 days
# (portal.core.profiles.MAX_HOURS).
MAX_MINUTES = 30 * 24 * 60
USAGE = "usage: portal-extend JOB MINUTES PROFILE_MAX"
# What begins each refusal on stderr (the hub takes the reason after it).
PREFIX = "portal-extend: "
# The sudoers rule's arguments (deploy/hub.sh): what sudo lets through at all.
SUDOERS_ARGS = "^[0-9]{1,10} [0-9]{1,6} [0-9]{1,6}$"

# Slurm job ids are 32-bit; a session's job name and group names are plain
# (a name is a file name in REGISTRY: no "/", no leading ".").
JOB_ID_RE = re.compile(r"[0-9]{1,10}", re.ASCII)
MINUTES_RE = re.compile(r"[0-9]{1,6}", re.ASCII)
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", re.ASCII)
MAX_JOB_ID = 2**32 - 3  # Slurm's NO_VAL and INFINITE are 2**32-2 and 2**32-1

# A registered folder of Slurm's commands ([slurm] bin_dir): absolute and
# plain. Every Slurm command runs by its full path there, with ENV only.
BIN_DIR_RE = re.compile(r"/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*", re.ASCII)
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
TIMEOUT = 20
# squeue's fields; the job's name, which its user may set to anything, last.
SQUEUE_FORMAT = "%i|%T|%U|%u|%a|%l|%P|%q|%j"


class Refused(Exception):
    """Why nothing was changed: one line, for the hub's log and its user."""

    status = 1


class Usage(Refused):
    status = 2


@dataclass(frozen=True)
class Request:
    job_id: str
    minutes: int
    profile_max: int


@dataclass(frozen=True)
class Job:
    """A job as squeue lists it (``SQUEUE_FORMAT``)."""

    id: str
    state: str
    uid: int
    user: str
    account: str
    limit: int | None  # minutes; None: unlimited
    partition: str
    qos: str
    name: str


@dataclass(frozen=True)
class Hub:
    """What a hub registered (``registration``): whose jobs it runs."""

    job_name: str
    groups: tuple
    uid_min: int
    uid_max: int
    bin_dir: str  # the folder of Slurm's commands ([slurm] bin_dir)


# -- the request ------------------------------------------------------------


def parse_request(argv):
    """``JOB MINUTES PROFILE_MAX`` as a Request; Usage for anything else.

    >>> parse_request(["353", "300", "1440"])
    Request(job_id='353', minutes=300, profile_max=1440)
    >>> parse_request(["353", "1e3", "1440"])
    Traceback (most recent call last):
    ...
    portal.helper.extend.Usage: MINUTES must be a whole number of minutes from 1 to 43200, not '1e3'
    """
    if len(argv) != 3:
        raise Usage(USAGE)
    job, minutes, most = argv
    if not JOB_ID_RE.fullmatch(job) or not 0 < int(job) <= MAX_JOB_ID:
        raise Usage(f"JOB must be a Slurm job id, not {shown(job)}")
    return Request(str(int(job)), _minutes(minutes, "MINUTES"), _minutes(most, "PROFILE_MAX"))


def _minutes(text, what):
    if not MINUTES_RE.fullmatch(text) or not 0 < int(text) <= MAX_MINUTES:
        raise Usage(
            f"{what} must be a whole number of minutes from 1 to {MAX_MINUTES}, not {shown(text)}"
        )
    return int(text)


def shown(text, most=20):
    """A value as a refusal quotes it: short, its control characters escaped."""
    return repr(text[:most])


# -- Slurm's text -----------------------------------------------------------


def slurm_minutes(text):
    """A time limit as Slurm writes it, in minutes; None when unlimited.
    ValueError for what is none (the hub's ``max_time_minutes``, stricter).

    >>> slurm_minutes("5:00:00"), slurm_minutes("1-02:00:00"), slurm_minutes("30:00")
    (300, 1560, 30)
    >>> slurm_minutes("UNLIMITED") is None and slurm_minutes("") is None
    True
    """
    text = text.strip().lower()
    if text in ("", "unlimited", "infinite"):
        return None
    days, dash, rest = text.rpartition("-")
    parts = rest.split(":")
    digits = all(p.isascii() and p.isdigit() for p in [*parts, days if dash else "0"])
    if not digits or len(parts) > 3:
        raise ValueError(f"not a Slurm time: {text[:40]!r}")
    numbers = [int(p) for p in parts]
    if days:  # D-HH[:MM[:SS]]
        hours, minutes = numbers[0], numbers[1] if len(numbers) > 1 else 0
    elif len(numbers) == 3:  # HH:MM:SS
        hours, minutes = numbers[0], numbers[1]
    else:  # MM or MM:SS
        hours, minutes = 0, numbers[0]
    return int(days or 0) * 1440 + hours * 60 + minutes


def slurm_time(minutes):
    """Minutes as ``scontrol update ... TimeLimit=`` takes them.

    >>> slurm_time(300), slurm_time(1500)
    ('05:00:00', '1-01:00:00')
    """
    days, rest = divmod(int(minutes), 1440)
    clock = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{clock}" if days else clock


def parse_job(text, job_id):
    """squeue's line of ``job_id`` (``-o SQUEUE_FORMAT``) as a Job; None when
    it does not list that job.

    >>> parse_job("353|RUNNING|20001|alice|portal|2:00:00|gpu|portal|a|b", "353")
    Job(id='353', state='RUNNING', uid=20001, user='alice', account='portal', limit=120, \
partition='gpu', qos='portal', name='a|b')
    """
    for line in text.splitlines():
        fields = line.split("|", 8)
        if len(fields) != 9 or fields[0] != job_id:
            continue
        _, state, uid, user, account, limit, partition, qos, name = fields
        if not uid.isascii() or not uid.isdigit():
            raise Refused(f"squeue gave job {job_id} no uid ({shown(uid)})")
        try:
            minutes = slurm_minutes(limit)
        except ValueError:
            raise Refused(f"squeue gave job {job_id} a time limit of {shown(limit)}") from None
        return Job(job_id, state, int(uid), user, account, minutes, partition, qos, name)
    return None


def parse_max_time(text):
    """``MaxTime`` of ``scontrol show partition -o NAME``, in minutes (None:
    unlimited); Refused when the output has none.

    >>> parse_max_time("PartitionName=gpu Default=YES MaxTime=7-00:00:00 State=UP")
    10080
    """
    fields = dict(f.split("=", 1) for f in text.split() if "=" in f)
    try:
        return slurm_minutes(fields["MaxTime"])
    except (KeyError, ValueError):
        raise Refused(f"scontrol gave no MaxTime: {shown(text, 80)}") from None


def parse_max_wall(text, qos):
    """``sacctmgr -n -P show qos NAME format=MaxWall`` (one line, empty when
    none) in minutes, None: no cap; Refused when sacctmgr lists no such QOS.

    >>> parse_max_wall("1-00:00:00\\n", "portal"), parse_max_wall("\\n", "portal")
    (1440, None)
    """
    lines = text.splitlines()
    if len(lines) != 1:
        raise Refused(f"sacctmgr lists no QOS {shown(qos)}")
    try:
        return slurm_minutes(lines[0])
    except ValueError:
        raise Refused(f"sacctmgr gave QOS {shown(qos)} a MaxWall of {shown(lines[0])}") from None


# -- the hubs' registrations ------------------------------------------------


def registration(job_name, groups, uid_min, uid_max, bin_dir):
    """A hub's registration, as deploy/hub.sh writes it to
    ``REGISTRY/JOB_NAME.json``; ValueError naming the setting to fix.

    >>> registration("portal-jupyter", ["portal-users"], 10000, 60000, "/usr/bin")[-58:]
    '"uid_min": 10000, "uid_max": 60000, "bin_dir": "/usr/bin"}'
    """
    text = json.dumps(
        {"job_name": job_name, "groups": list(groups), "uid_min": uid_min, "uid_max": uid_max,
         "bin_dir": bin_dir}
    )  # fmt: skip
    try:
        read_registration(text, job_name)
    except Refused as e:
        raise ValueError(str(e)) from None
    return text


def read_registration(text, job_name):
    """The Hub a registration names; Refused when it is not one, or not of
    ``job_name``."""
    try:
        data = json.loads(text)
        hub = Hub(data["job_name"], tuple(data["groups"]), data["uid_min"], data["uid_max"],
                  data.get("bin_dir"))  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError):
        raise Refused(f"the registration of {shown(job_name)} is not valid JSON of a hub") from None
    if not isinstance(hub.job_name, str) or not NAME_RE.fullmatch(hub.job_name):
        raise Refused(f"[slurm] job_name {shown(hub.job_name)} is not a plain name")
    if hub.job_name != job_name:
        raise Refused(f"the registration of {shown(job_name)} names {shown(hub.job_name)}")
    if not hub.groups or not all(isinstance(g, str) and NAME_RE.fullmatch(g) for g in hub.groups):
        raise Refused(f"[ldap] allowed_groups of {shown(job_name)} are not plain group names")
    for value in (hub.uid_min, hub.uid_max):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**32:
            raise Refused(f"[hub] uid_min and uid_max of {shown(job_name)} are not uids")
    if hub.uid_min > hub.uid_max:
        raise Refused(f"[hub] uid_min of {shown(job_name)} is more than its uid_max")
    if hub.bin_dir is None:
        raise Refused(
            f"the registration of {shown(job_name)} names no folder of Slurm's commands: "
            "register the hub again (deploy/hub.sh start)"
        )
    if not isinstance(hub.bin_dir, str) or not is_plain_folder(hub.bin_dir):
        raise Refused(
            f"[slurm] bin_dir of {shown(job_name)} is not a plain absolute folder: "
            f"{shown(str(hub.bin_dir), 64)}"
        )
    return hub


def is_plain_folder(path):
    """Whether ``path`` is an absolute folder without ``.``, ``..``, a doubled
    or trailing ``/`` or any character but letters, digits and ``_.+-``.

    >>> [is_plain_folder(p) for p in ("/usr/bin", "/opt/slurm-23.11/bin", "/")]
    [True, True, False]
    >>> [is_plain_folder(p) for p in ("usr/bin", "/opt/../bin", "/usr/bin/", "/a b")]
    [False, False, False, False]
    """
    return (
        len(path) <= 255
        and bool(BIN_DIR_RE.fullmatch(path))
        and not any(part in (".", "..") for part in path.split("/"))
    )


def trusted(st):
    """Whether a file or folder (its ``os.stat_result``) is root's alone:
    owned by root, writable by nobody else."""
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


# -- the decision -----------------------------------------------------------


def extend(argv, system):
    """Check the request ``argv`` against Slurm and the hubs (``system``, a
    ``System``) and, when everything holds, set the limit. Returns the new
    limit as Slurm writes it; Refused (changing nothing) otherwise. Slurm is
    asked from the folder of the job's hub's registration (``Hub.bin_dir``)."""
    request = parse_request(argv)
    job = system.job(request.job_id)
    if job is None:
        raise Refused(f"job {request.job_id} is not in Slurm's queue")
    hub = check_job(job, system)
    new = check_limit(job, request, system, hub.bin_dir)
    system.set_limit(job.id, new, hub.bin_dir)
    return slurm_time(new)


def check_job(job, system):
    """A running session of a hub, of one of that hub's users, under any
    Slurm account: that hub's registration (a Hub); Refused otherwise."""
    if job.state != "RUNNING":
        raise Refused(
            f"job {job.id} is {job.state}, not RUNNING: only a running session is extended"
        )
    hub = system.hub(job.name) if NAME_RE.fullmatch(job.name) else None
    if hub is None:
        raise Refused(
            f"job {job.id} (named {shown(job.name, 64)}) is not a portal session: "
            f"no hub registered that job name in {REGISTRY}"
        )
    if job.uid == 0 or job.user == "root":
        raise Refused(f"job {job.id} is root's: only a portal user's session is extended")
    uid = system.uid(job.user)
    if uid is None:
        raise Refused(
            f"job {job.id}'s user {shown(job.user, 32)} is not known here (getent passwd)"
        )
    if uid != job.uid:
        raise Refused(
            f"job {job.id}'s user {shown(job.user, 32)} has uid {uid} here, "
            f"not {job.uid} as Slurm says"
        )
    if not hub.uid_min <= job.uid <= hub.uid_max:
        raise Refused(
            f"job {job.id} belongs to {job.user} (uid {job.uid}), outside the portal's "
            f"users (uids {hub.uid_min}-{hub.uid_max})"
        )
    if not set(system.groups(job.user)) & set(hub.groups):
        raise Refused(
            f"job {job.id} belongs to {job.user}, who is in none of the portal's groups "
            f"({', '.join(sorted(hub.groups))})"
        )
    return hub


def check_limit(job, request, system, bin_dir):
    """The new limit in minutes, when it lengthens the job within its
    profile and Slurm's caps (read from ``bin_dir``); Refused otherwise."""
    new = request.minutes
    if job.limit is None:
        raise Refused(f"job {job.id} has no time limit: it needs no extension")
    if new <= job.limit:
        raise Refused(
            f"{slurm_time(new)} is not longer than job {job.id}'s limit "
            f"{slurm_time(job.limit)}: this helper only lengthens"
        )
    if new > request.profile_max:
        raise Refused(
            f"{slurm_time(new)} is more than the session's profile allows "
            f"({slurm_time(request.profile_max)})"
        )
    for what, cap in (
        (f"partition {job.partition}", system.partition_max(job.partition, bin_dir)),
        (f"QOS {job.qos}", system.qos_max(job.qos, bin_dir)),
    ):
        if cap is not None and new > cap:
            raise Refused(f"{slurm_time(new)} is more than {what} allows ({slurm_time(cap)})")
    return new


# -- this machine -----------------------------------------------------------


class Unusable(Refused):
    """A registered folder of Slurm's commands that cannot be used: a command
    missing there, or one root does not alone hold."""


def check_root_folder(folder, what):
    """``folder`` and each folder above it: folders (no link) of root's alone;
    Unusable, naming ``what``, otherwise."""
    while True:
        try:
            st = os.lstat(folder)
        except OSError as e:
            raise Unusable(f"{folder} cannot be read: {e.strerror}: {what}") from None
        if not stat.S_ISDIR(st.st_mode) or not trusted(st):
            raise Unusable(f"{folder} is not a folder of root's alone: {what}")
        if folder == "/":
            return
        folder = os.path.dirname(folder)


def root_command(bin_dir, name):
    """The full path of Slurm's command ``name`` in the registered folder
    ``bin_dir``, when root alone holds it (a link is followed, and where it
    leads is checked); Unusable otherwise: root runs nobody else's file."""
    path = os.path.join(bin_dir, name)
    check_root_folder(bin_dir, f"{name} not run from it")
    real = os.path.realpath(path)
    check_root_folder(os.path.dirname(real), f"{name} not run from it")
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        raise Unusable(f"{path} is not there: {name} not run") from None
    if not stat.S_ISREG(st.st_mode) or not trusted(st) or not st.st_mode & 0o100:
        raise Unusable(f"{path} is not a command of root's alone: not run")
    return path


class System:
    """What the helper reads, and its one change, on this machine: Slurm's
    commands run as root by their full paths in a registered folder with
    ``ENV``, the users and groups through NSS, the registrations from
    REGISTRY."""

    def __init__(self, registry=REGISTRY):
        self.registry = registry

    def slurm(self, bin_dir, *argv):
        command = root_command(bin_dir, argv[0])
        try:
            done = subprocess.run(
                [command, *argv[1:]], stdin=subprocess.DEVNULL, capture_output=True,
                text=True, errors="replace", env=ENV, timeout=TIMEOUT,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise Refused(f"{argv[0]} gave no answer within {TIMEOUT} s") from None
        except OSError as e:
            raise Refused(f"{command} did not run: {e.strerror}") from None
        if done.returncode != 0:
            error = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise Refused(f"{argv[0]} failed: {error[:200]}")
        return done.stdout

    def hubs(self):
        """Every hub registered, in the order of their job names (a
        registration that cannot be read is left out here: it names no job
        of the portal's)."""
        found = []
        if not os.path.lexists(self.registry):
            return found
        check_root_folder(self.registry, "registrations not read")
        for entry in sorted(os.listdir(self.registry)):
            name = entry.removesuffix(".json")
            if name == entry or not NAME_RE.fullmatch(name):
                continue
            try:
                hub = self.hub(name)
            except Refused:
                continue
            if hub is not None:
                found.append(hub)
        return found

    def folders(self):
        """The folders of Slurm's commands the hubs registered, each once,
        in the order of their job names."""
        found = []
        for hub in self.hubs():
            if hub.bin_dir not in found:
                found.append(hub.bin_dir)
        return found

    def job(self, job_id):
        """The job as squeue lists it, asked from the first registered folder
        that has a squeue of root's; None when Slurm does not list it."""
        folders = self.folders()
        if not folders:
            raise Refused(f"no hub registered its sessions in {self.registry}")
        unusable = None
        for folder in folders:
            try:
                text = self.slurm(folder, "squeue", "-h", "-j", job_id, "-o", SQUEUE_FORMAT)
            except Unusable as e:
                unusable = unusable or e
                continue
            except Refused as e:
                if "Invalid job id" in str(e):
                    return None
                raise
            return parse_job(text, job_id)
        raise unusable

    def partition_max(self, name, bin_dir):
        return parse_max_time(self.slurm(bin_dir, "scontrol", "show", "partition", "-o", name))

    def qos_max(self, name, bin_dir):
        text = self.slurm(bin_dir, "sacctmgr", "-n", "-P", "show", "qos", name, "format=MaxWall")
        return parse_max_wall(text, name)

    def uid(self, user):
        try:
            return pwd.getpwnam(user).pw_uid
        except KeyError:
            return None

    def groups(self, user):
        """The names of ``user``'s groups, its primary group's included."""
        names = set()
        for gid in os.getgrouplist(user, pwd.getpwnam(user).pw_gid):
            try:
                names.add(grp.getgrgid(gid).gr_name)
            except KeyError:
                pass
        return names

    def hub(self, job_name):
        """The registration ``REGISTRY/JOB_NAME.json``, when root alone could
        have written it; None when there is none."""
        if not os.path.lexists(self.registry):
            return None
        check_root_folder(self.registry, "registrations not read")
        path = os.path.join(self.registry, f"{job_name}.json")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise Refused(f"{path} cannot be read: {e.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or not trusted(st):
                raise Refused(f"{path} is not a file of root's alone: not read")
            return read_registration(f.read(65536).decode("utf-8", "replace"), job_name)

    def set_limit(self, job_id, minutes, bin_dir):
        self.slurm(
            bin_dir, "scontrol", "update", f"JobId={job_id}", f"TimeLimit={slurm_time(minutes)}"
        )


def main(argv=None, system=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if system is None and os.geteuid() != 0:
            raise Refused("runs as root only (the hub's account runs it through sudo)")
        print(extend(argv, system or System()))
        return 0
    except Refused as e:
        print(f"{PREFIX}{e}", file=sys.stderr)
        return e.status
    except Exception as e:  # one line, whatever went wrong
        text = " ".join(str(e).split())[:200]
        print(f"{PREFIX}failed: {type(e).__name__}: {text}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
