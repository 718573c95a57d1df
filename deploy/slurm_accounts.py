"""The embedded cluster's accounting: what to change, as pure functions.

Each function takes what Slurm and NSS report now (``sacctmgr -n -P list``
output, ``getent group`` lines, ``squeue`` output) and returns the
:class:`Change` s that bring it to what the settings ask: sacctmgr command
lines with what to log. deploy/slurm_setup.py reads the state, runs the
changes (or prints them with ``--dry-run``); nothing here runs a command.
When the state is as configured, nothing is planned: a start with nothing new
costs one ``sacctmgr list`` per question.

Slurm enforces its own limits, whoever submits (AccountingStorageEnforce=
associations,limits,qos,safe): a job needs an association, and the account
"portal" runs its jobs under the QOS "portal" only (its default), which caps
GPUs per user and the wall time per job (``[cluster] qos_max_gpus_per_user``,
``qos_max_wall``: :func:`plan_qos`). With Flags=DenyOnLimit a job over a
per-job limit is refused at submission; jobs over the per-user total pend
until the user's others end. Every job takes a GPU (MinTRESPerJob): a
GPU-less job could otherwise hold a node's cores and memory for the whole wall
time. TRES limits and flags that a site added itself are kept.

The users of the account (:func:`plan_users`): every member of the portal's
groups (the cn of ``[ldap] allowed_groups``, members as ``getent group``
lists them), root and the hub's account (``[hub] user``, for its ``sbatch
--test-only``: the spawn page's expected starts); those who left are removed
once their jobs have ended (slurmdbd refuses to remove an association with an
active job; a later sync removes it). One add and one remove for any number
of users. A group that does not resolve changes nothing: nslcd or slapd down
must not look like an empty group. root also keeps its association with the
account root. Anyone else's jobs are refused at submission ("Invalid account
or account/partition combination specified").

The hub's account holds no Slurm admin level (:func:`plan_admin_level`). An
Operator may update, hold or cancel any job of the cluster and edit its
accounting; the hub needs none of it: it lengthens a session through the
root helper portal-extend, which re-checks the job (deploy/hub.sh), and
cancels its users' jobs as them through sudo. An earlier version made the
account Operator: a start or a sync-users sets it back to None.

slurmctld knows the hub's account by its uid (:func:`hub_uid_invalid`). One
it heard of before the account existed (an earlier version made Slurm's users
first) stays invalid (uid 4294967294: every request of the hub refused) until
slurmctld reads its users again, which ``scontrol reconfigure`` does.
"""

import re
from dataclasses import dataclass

from portal.settings import group_name

CLUSTER = "portal"
ACCOUNT = "portal"
QOS = "portal"  # the account's only QOS
MIN_TRES = "gres/gpu=1"  # every job takes a GPU
SACCTMGR = ("sacctmgr", "-i")
USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class SetupError(ValueError):
    """Settings or host state that stop the cluster's set-up; the message names the fix."""


@dataclass(frozen=True)
class Change:
    """One command: what is logged before it, and what its failure means."""

    message: str
    argv: tuple
    failure: str
    fatal: bool = True  # a failure stops the set-up; else it is logged


def parse_list(text, fields):
    """``sacctmgr -n -P list`` output as rows of ``fields`` strings.

    >>> parse_list("|portal|portal\\nalice|portal|portal\\n", 3)
    [('', 'portal', 'portal'), ('alice', 'portal', 'portal')]
    >>> parse_list("portal|1-00:00:00\\n", 3)
    [('portal', '1-00:00:00', '')]
    >>> parse_list("", 2)
    []
    """
    rows = []
    for line in text.split("\n"):
        if line:
            row = line.split("|", fields - 1)
            rows.append(tuple(row + [""] * (fields - len(row))))
    return rows


def slurm_time(value):
    """A Slurm duration (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) as
    sacctmgr prints a limit: whole minutes (seconds round up, as Slurm keeps
    them), D-HH:MM:00, or HH:MM:00 under a day; None if it is none of those.

    >>> [slurm_time(t) for t in ("1-00:00:00", "90", "1:30", "24:00:00", "2-3", "x")]
    ['1-00:00:00', '01:30:00', '00:02:00', '1-00:00:00', '2-03:00:00', None]
    """
    m = re.fullmatch(r"(([0-9]+)-)?([0-9]+)(:([0-9]+))?(:([0-9]+))?", value)
    if not m:
        return None
    _, d, x, _, y, _, z = m.groups()
    d = int(d or 0)
    if m.group(1):
        h, mins, s = int(x), int(y or 0), int(z or 0)
    elif z:
        h, mins, s = int(x), int(y), int(z)
    elif y:
        h, mins, s = 0, int(x), int(y)
    else:
        h, mins, s = 0, int(x), 0
    total = (d * 24 + h) * 60 + mins + (s + 59) // 60
    if total // 1440:
        return f"{total // 1440}-{total % 1440 // 60:02d}:{total % 60:02d}:00"
    return f"{total // 60:02d}:{total % 60:02d}:00"


def qos_limits(cluster):
    """The QOS limits of ``[cluster]`` in sacctmgr's terms, (wall, gpus); ""
    for none (qos_max_wall "", qos_max_gpus_per_user 0).

    >>> qos_limits({"qos_max_wall": "24:00:00", "qos_max_gpus_per_user": 4})
    ('1-00:00:00', 'gres/gpu=4')
    >>> qos_limits({"qos_max_wall": "", "qos_max_gpus_per_user": 0})
    ('', '')
    """
    wall, gpus = cluster["qos_max_wall"], cluster["qos_max_gpus_per_user"]
    if wall:
        wall = slurm_time(wall)
        if wall is None:
            raise SetupError(
                f"[cluster] qos_max_wall = '{cluster['qos_max_wall']}' is not a Slurm time"
                ' such as "1-00:00:00" ("": no limit)'
            )
    if not isinstance(gpus, int) or gpus < 0:
        raise SetupError(
            f"[cluster] qos_max_gpus_per_user = {gpus}: use a number of GPUs (0: no limit)"
        )
    return wall, f"gres/gpu={gpus}" if gpus else ""


def plan_registration(clusters, accounts):
    """The cluster and the account, added once: ``clusters`` and ``accounts``
    are ``sacctmgr list cluster|account NAME`` outputs."""
    changes = []
    if CLUSTER not in clusters.split("\n"):
        changes.append(
            Change(
                f"registering cluster {CLUSTER} in slurmdbd",
                (*SACCTMGR, "add", "cluster", CLUSTER),
                f"sacctmgr add cluster {CLUSTER} failed",
            )
        )
    if ACCOUNT not in accounts.split("\n"):
        changes.append(
            Change(
                f"adding account {ACCOUNT}",
                (*SACCTMGR, "add", "account", ACCOUNT, f"cluster={CLUSTER}")
                + ("description=Data Scientist Portal", "organization=portal"),
                f"sacctmgr add account {ACCOUNT} failed",
            )
        )
    return changes


def plan_qos(listing, wall, gpus):
    """The QOS with the limits of :func:`qos_limits` and DenyOnLimit: added,
    or modified where it differs. ``listing``: ``sacctmgr list qos portal
    format=name,maxwall,maxtrespu,mintres,flags``.

    >>> plan_qos("portal|1-00:00:00|gres/gpu=4|gres/gpu=1|DenyOnLimit", "1-00:00:00", "gres/gpu=4")
    >>> plan_qos("", "", "gres/gpu=2").argv[2:5]
    ('add', 'qos', 'portal')
    >>> plan_qos("", "", "gres/gpu=2").argv[5:]
    ('MaxWall=-1', 'MaxTRESPerUser=gres/gpu=2', 'MinTRESPerJob=gres/gpu=1', 'Flags=DenyOnLimit')
    """
    rows = parse_list(listing, 5)
    name, maxwall, maxtrespu, mintres, flags = rows[0] if rows else ("",) * 5
    maxtrespu = "\n".join(re.findall(r"gres/gpu=[0-9]*", maxtrespu))
    mintres = "\n".join(re.findall(r"gres/gpu=[0-9]*", mintres))
    if (
        name == QOS
        and (maxwall, maxtrespu, mintres) == (wall, gpus, MIN_TRES)
        and "DenyOnLimit" in flags.split(",")
    ):
        return None
    limits = (
        f"MaxWall={wall or '-1'}",
        f"MaxTRESPerUser={gpus or 'gres/gpu=-1'}",
        f"MinTRESPerJob={MIN_TRES}",
    )
    shown = f"MaxWall={wall or 'none'} MaxTRESPerUser={gpus or 'none'} MinTRESPerJob={MIN_TRES}"
    if name != QOS:
        return Change(
            f"adding QOS {QOS}: {shown} Flags=DenyOnLimit",
            (*SACCTMGR, "add", "qos", QOS, *limits, "Flags=DenyOnLimit"),
            f"sacctmgr add qos {QOS} failed",
        )
    was = (maxwall or "none", maxtrespu or "none", mintres or "none", flags or "no flags")
    return Change(
        f"QOS {QOS}: {shown} Flags+=DenyOnLimit (was {', '.join(was)})",
        (*SACCTMGR, "modify", "qos", QOS, "set", *limits, "Flags+=DenyOnLimit"),
        f"sacctmgr modify qos {QOS} failed",
    )


def portal_groups(allowed_groups):
    """The portal's Unix groups: the cn of each ``[ldap] allowed_groups`` DN
    (``portal.settings.group_name``, as the hub reads it), in order.

    >>> portal_groups(["cn=portal-users,ou=groups,dc=example", "ou=x,dc=example", "staff"])
    ['portal-users', 'ou=x,dc=example', 'staff']
    """
    groups = []
    for dn in allowed_groups:
        group = group_name(dn).strip()
        if group:
            groups.append(group)
    return groups


def group_members(line):
    """The members of a ``getent group`` line: (plain user names, others).

    >>> group_members("portal-users:*:20000:carol,bob,alice")
    (['carol', 'bob', 'alice'], [])
    >>> group_members("odd:*:20001:alice,-rf,x y")
    (['alice'], ['-rf', 'x y'])
    """
    fields = line.rstrip("\n").split(":")
    names = [n for n in (fields[3] if len(fields) > 3 else "").split(",") if n]
    return (
        [n for n in names if USER_NAME.fullmatch(n)],
        [n for n in names if not USER_NAME.fullmatch(n)],
    )


@dataclass(frozen=True)
class UsersPlan:
    account: Change | None  # the account's own QOS, when it differs
    add: Change | None
    leaving: list  # associated users who are no longer members, in listing order


def plan_users(members, associations):
    """The account's users = ``members`` (root and the hub's account among
    them), its only QOS (its users inherit it) :data:`QOS`. ``associations``:
    ``sacctmgr list assoc account=portal cluster=portal
    format=user,qos,defaultqos``, whose row with no user is the account's own.

    >>> listing = "|portal|portal\\nroot|portal|portal\\nbob|portal|portal\\nalice|portal|portal\\n"
    >>> plan = plan_users({"root", "alice", "dave"}, listing)
    >>> plan.account, plan.add.argv[3:], plan.leaving
    (None, ('user', 'dave', 'account=portal', 'cluster=portal'), ['bob'])
    """
    account, listed, leaving = None, set(), []
    for name, qos, defqos in parse_list(associations, 3):
        if not name:
            if (qos, defqos) != (QOS, QOS):
                account = Change(
                    f"account {ACCOUNT}: QOS {QOS} only"
                    f" (was {qos or 'none'}, default {defqos or 'none'})",
                    (*SACCTMGR, "modify", "account", ACCOUNT, "where", f"cluster={CLUSTER}")
                    + ("set", f"qos={QOS}", f"defaultqos={QOS}"),
                    f"sacctmgr modify account {ACCOUNT} failed",
                )
            continue
        if name not in members and name not in listed:
            leaving.append(name)
        listed.add(name)
    new = sorted(set(members) - listed)
    add = None
    if new:
        add = Change(
            f"adding to account {ACCOUNT}: {' '.join(new)}",
            (*SACCTMGR, "add", "user", ",".join(new), f"account={ACCOUNT}", f"cluster={CLUSTER}"),
            "sacctmgr add user failed",
        )
    return UsersPlan(account, add, leaving)


def plan_removal(leaving, active):
    """Who of ``leaving`` to remove now: those with no active job (``active``:
    ``squeue -h -A portal -o %u`` output). Returns (the busy, a Change or None).

    >>> busy, change = plan_removal(["eve", "bob"], "bob\\nbob\\n")
    >>> busy, change.argv[3:]
    (['bob'], ('user', 'where', 'name=eve', 'account=portal', 'cluster=portal'))
    """
    running = set(active.split())
    busy = [name for name in leaving if name in running]
    gone = sorted(name for name in leaving if name not in running)
    if not gone:
        return busy, None
    return busy, Change(
        f"removing from account {ACCOUNT}: {' '.join(gone)}",
        (*SACCTMGR, "remove", "user", "where", f"name={','.join(gone)}")
        + (f"account={ACCOUNT}", f"cluster={CLUSTER}"),
        "sacctmgr remove user failed (a job started meanwhile?); the next sync tries again",
        fatal=False,
    )


def plan_admin_level(hub_user, level):
    """The hub's account back to AdminLevel None. ``level``: ``sacctmgr list
    user HUB format=adminlevel`` ("": no such user yet).

    >>> plan_admin_level("portal", "None\\n"), plan_admin_level("portal", "")
    (None, None)
    >>> plan_admin_level("portal", "Operator\\n").argv[2:]
    ('modify', 'user', 'portal', 'set', 'adminlevel=None')
    """
    level = level.strip()
    if not hub_user or level in ("", "None"):
        return None
    return Change(
        f"{hub_user} (the hub's account): Slurm AdminLevel None (was {level}):"
        " it extends sessions through the root helper portal-extend",
        (*SACCTMGR, "modify", "user", hub_user, "set", "adminlevel=None"),
        f"sacctmgr modify user {hub_user} set adminlevel=None failed",
    )


def hub_uid_invalid(assoc_mgr, hub_user):
    """slurmctld holds the hub's account with no uid (``scontrol show
    assoc_mgr users=HUB flags=users`` output).

    >>> hub_uid_invalid("UserName=portal(4294967294) DefAccount=portal", "portal")
    True
    >>> hub_uid_invalid("UserName=portal(994) DefAccount=portal", "portal")
    False
    """
    return bool(hub_user) and f"UserName={hub_user}(4294967294)" in assoc_mgr
