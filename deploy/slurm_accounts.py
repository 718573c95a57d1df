"""The embedded cluster's accounting: what to change, as pure functions.

Each function takes what Slurm and NSS report now (``sacctmgr -n -P list``
output, ``getent group`` lines, ``squeue`` output) and returns the
:class:`Change` s that bring it to what the settings ask: sacctmgr command
lines with what to log. deploy/slurm_setup.py reads the state, runs the
changes (or prints them with ``--dry-run``); nothing here runs a command.
When the state is as configured, nothing is planned: a start with nothing new
costs one ``sacctmgr list`` per question.

Slurm enforces its own limits, whoever submits (AccountingStorageEnforce=
associations,limits,qos,safe): a job needs an association, and runs under a
QOS of it (:func:`qos_specs`, :func:`plan_qos`). The account "portal", every
user's default account, runs its jobs under the QOS "portal" (its default),
which caps GPUs per user and the wall time per job (``[cluster]
qos_max_gpus_per_user``, ``qos_max_wall``), and takes a GPU in every job
(MinTRESPerJob): a GPU-less job could otherwise hold a GPU node's cores and
memory for the whole wall time. Its only other QOS is ``[cluster] cpu_qos``
("cpu"), which allows no GPU (MaxTRESPerJob=gres/gpu=0) and which only the
CPU partition takes (it is that partition's QOS; the others deny it): a CPU
session asks for it (``--qos=cpu``). Each lab account of ``[[cluster.accounts]]``
has its own QOS (the same caps, no minimum) and fairshare. With
Flags=DenyOnLimit a job over a per-job limit is refused at submission; jobs
over the per-user total pend until the user's others end. TRES limits and
flags that a site added itself are kept.

The users of the account portal (:func:`plan_users`): every member of the portal's
groups (the cn of ``[ldap] allowed_groups``, members as ``getent group``
lists them), root and the hub's account (``[hub] user``, for its ``sbatch
--test-only``: the spawn page's expected starts); those who left are removed
once their jobs have ended (slurmdbd refuses to remove an association with an
active job; a later sync removes it). One add and one remove for any number
of users. A group that does not resolve changes nothing: nslcd or slapd down
must not look like an empty group. root also keeps its association with the
account root. Anyone else's jobs are refused at submission ("Invalid account
or account/partition combination specified"). A lab account's users are the
members of its group (``[[cluster.accounts]] group``), with root and the hub's
account, kept the same way.

A reservation of ``[[cluster.reservations]]`` holds its nodes for the members
of its group (Users=, :func:`plan_reservation`): created when missing, its
users and nodes updated when they differ, deleted when the group has no
member. Slurm resolves a reservation's Groups= once, when it is set, so the
members are named and kept in sync here instead.

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
QOS = "portal"  # the account's default QOS
MIN_TRES = "gres/gpu=1"  # every job of QOS portal takes a GPU
NO_GPU = "gres/gpu=0"  # no job of [cluster] cpu_qos holds one
SACCTMGR = ("sacctmgr", "-i")
USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# A name of an account, QOS, partition, node, feature, GPU model, reservation
# or group as the settings give it: taken by Slurm as it is, never an option.
SLURM_NAME = USER_NAME


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


@dataclass(frozen=True)
class QosSpec:
    """A QOS as the settings ask for it: each limit a ``gres/gpu=N`` (or a
    wall time), "" for none; every one has Flags=DenyOnLimit."""

    name: str
    wall: str = ""  # MaxWall
    per_user: str = ""  # MaxTRESPerUser
    per_job: str = ""  # MaxTRESPerJob
    min_tres: str = ""  # MinTRESPerJob


@dataclass(frozen=True)
class AccountSpec:
    """An account: its QOS (its users inherit them), its default QOS, its
    fairshare (None: as Slurm has it) and the Unix group of its users ("":
    the portal's groups)."""

    name: str
    qos: tuple
    default_qos: str
    fairshare: int | None = None
    group: str = ""


@dataclass(frozen=True)
class ReservationSpec:
    """A reservation of whole ``nodes`` for the members of ``group``."""

    name: str
    group: str
    nodes: tuple


ACCOUNT_KEYS = {"name": str, "group": str, "qos": str, "fairshare": int}
RESERVATION_KEYS = {"name": str, "group": str, "nodes": list}


def check_table(where, table, keys, required=()):
    """Refuse a settings table with a key it does not know, a value of
    another type, or a required key missing: the message names the fix.

    >>> check_table("[x]", {"gpus": "2"}, {"gpus": int})
    Traceback (most recent call last):
    ...
    deploy.slurm_accounts.SetupError: [x] gpus must be int, got '2'
    """
    if not isinstance(table, dict):
        raise SetupError(f"{where} must be a table")
    for key, value in table.items():
        if key not in keys:
            raise SetupError(f"{where}: unknown key {key!r}; known: {', '.join(sorted(keys))}")
        kind = keys[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise SetupError(f"{where} {key} must be {kind.__name__}, got {value!r}")
        if kind is list and not all(isinstance(v, str) for v in value):
            raise SetupError(f"{where} {key} must be a list of strings, got {value!r}")
    for key in required:
        if key not in table:
            raise SetupError(f"{where}: {key} is missing")


def slurm_name(where, value):
    """``value`` if Slurm and a shell take it as a name as it is, else refused.

    >>> slurm_name("[x] gpu_type", "v100-sxm2")
    'v100-sxm2'
    >>> slurm_name("[x] model", "v 2")
    Traceback (most recent call last):
    ...
    deploy.slurm_accounts.SetupError: [x] model = 'v 2': use letters, digits, ".", "_" or "-"
    """
    if not SLURM_NAME.fullmatch(value):
        raise SetupError(f'{where} = {value!r}: use letters, digits, ".", "_" or "-"')
    return value


def qos_specs(cluster):
    """Every QOS of ``[cluster]``: portal, cpu_qos, each lab account's.

    >>> c = {"qos_max_wall": "24:00:00", "qos_max_gpus_per_user": 4, "cpu_qos": "cpu",
    ...      "accounts": [{"name": "lab-a", "group": "a", "qos": "a", "fairshare": 1}]}
    >>> specs = qos_specs(c)
    >>> [s.name for s in specs], specs[0].min_tres, specs[1].per_job, specs[2].per_user
    (['portal', 'cpu', 'a'], 'gres/gpu=1', 'gres/gpu=0', 'gres/gpu=4')
    """
    wall, gpus = qos_limits(cluster)
    specs = [QosSpec(QOS, wall, gpus, "", MIN_TRES)]
    if cluster["cpu_qos"]:
        slurm_name("[cluster] cpu_qos", cluster["cpu_qos"])
        specs.append(QosSpec(cluster["cpu_qos"], wall, "", NO_GPU, ""))
    specs += [QosSpec(account.default_qos, wall, gpus) for account in lab_accounts(cluster)]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise SetupError(
            f"[cluster] cpu_qos and [[cluster.accounts]] qos name a QOS twice"
            f" ({', '.join(names)}): give each its own"
        )
    return specs


def lab_accounts(cluster):
    """``[[cluster.accounts]]`` as :class:`AccountSpec` s.

    >>> lab_accounts({"accounts": [{"name": "lab-a", "group": "a", "qos": "qa", "fairshare": 60}]})
    [AccountSpec(name='lab-a', qos=('qa',), default_qos='qa', fairshare=60, group='a')]
    """
    specs = []
    for table in cluster["accounts"]:
        check_table("[[cluster.accounts]]", table, ACCOUNT_KEYS, tuple(ACCOUNT_KEYS))
        for key in ("name", "group", "qos"):
            slurm_name(f"[[cluster.accounts]] {key}", table[key])
        if table["name"] == ACCOUNT:
            raise SetupError(f"[[cluster.accounts]]: {ACCOUNT} is the portal's own; name another")
        if table["fairshare"] < 1:
            raise SetupError(f"[[cluster.accounts]] {table['name']}: fairshare must be 1 or more")
        specs.append(
            AccountSpec(
                table["name"], (table["qos"],), table["qos"], table["fairshare"], table["group"]
            )  # fmt: skip
        )
    if len({s.name for s in specs}) != len(specs):
        raise SetupError("[[cluster.accounts]]: an account is named twice")
    return specs


def portal_account(cluster):
    """The account portal: QOS portal (its default) and cpu_qos.

    >>> spec = portal_account({"cpu_qos": "cpu"})
    >>> spec.qos, spec.default_qos, spec.fairshare
    (('cpu', 'portal'), 'portal', None)
    """
    return AccountSpec(ACCOUNT, tuple(sorted({QOS, cluster["cpu_qos"]} - {""})), QOS)


def reservations(cluster):
    """``[[cluster.reservations]]`` as :class:`ReservationSpec` s.

    >>> reservations({"reservations": [{"name": "course", "group": "vision", "nodes": ["n3"]}]})
    [ReservationSpec(name='course', group='vision', nodes=('n3',))]
    """
    specs = []
    for table in cluster["reservations"]:
        check_table("[[cluster.reservations]]", table, RESERVATION_KEYS, tuple(RESERVATION_KEYS))
        for name in (table["name"], table["group"], *table["nodes"]):
            slurm_name("[[cluster.reservations]] name, group and nodes", name)
        if not table["nodes"]:
            raise SetupError(f"[[cluster.reservations]] {table['name']}: nodes is empty")
        specs.append(ReservationSpec(table["name"], table["group"], tuple(table["nodes"])))
    return specs


def parse_reservations(text):
    """``scontrol -o show reservation`` output: ``{name: {field: value}}``.

    >>> shown = "ReservationName=course StartTime=2026-11-28T12:00:00 Nodes=n[1,3] Users=alice"
    >>> parse_reservations(shown + "\\n")["course"]["Nodes"]
    'n[1,3]'
    >>> parse_reservations("No reservations in the system\\n")
    {}
    """
    found = {}
    for line in text.split("\n"):
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "ReservationName" in fields:
            found[fields["ReservationName"]] = fields
    return found


def plan_reservation(shown, spec, users, expand):
    """The reservation ``spec`` for ``users`` (the members of its group):
    created when missing (from now on, for good, on its whole nodes, running
    jobs there or not), its nodes and users set when they differ, deleted
    when ``users`` is empty. ``shown``: :func:`parse_reservations` of
    ``scontrol -o show reservation``; ``expand``: a Slurm host list as names.

    >>> from portal.slurm.parse import expand_hostlist as expand
    >>> spec = ReservationSpec("course", "vision", ("n3",))
    >>> print(*plan_reservation({}, spec, ["carol", "alice"], expand).argv[1:], sep="\\n")
    create
    reservation
    ReservationName=course
    StartTime=now
    Duration=UNLIMITED
    Nodes=n3
    Users=alice,carol
    Flags=IGNORE_JOBS
    >>> now = {"course": {"Nodes": "n3", "Users": "carol,alice", "State": "ACTIVE"}}
    >>> plan_reservation(now, spec, ["alice", "carol"], expand) is None
    True
    >>> plan_reservation(now, spec, ["alice"], expand).argv[1:]
    ('update', 'ReservationName=course', 'Nodes=n3', 'Users=alice')
    >>> plan_reservation(now, spec, [], expand).argv[1:]
    ('delete', 'ReservationName=course')
    """
    users = sorted(set(users))
    have = shown.get(spec.name)
    if not users:
        if have is None:
            return None
        return Change(
            f"group {spec.group} has no member: deleting reservation {spec.name}",
            ("scontrol", "delete", f"ReservationName={spec.name}"),
            f"scontrol delete ReservationName={spec.name} failed",
            fatal=False,
        )
    nodes, names = ",".join(spec.nodes), ",".join(users)
    if have is None:
        return Change(
            f"reservation {spec.name}: nodes {nodes} for group {spec.group} ({' '.join(users)})",
            ("scontrol", "create", "reservation", f"ReservationName={spec.name}", "StartTime=now")
            + ("Duration=UNLIMITED", f"Nodes={nodes}", f"Users={names}", "Flags=IGNORE_JOBS"),
            f"scontrol create reservation {spec.name} failed (see the message above)",
            fatal=False,
        )
    had_nodes = sorted(expand(have.get("Nodes", "")))
    had_users = sorted(u for u in have.get("Users", "").split(",") if u and u != "(null)")
    if had_nodes == sorted(spec.nodes) and had_users == users:
        return None
    return Change(
        f"reservation {spec.name}: nodes {nodes}, users {' '.join(users)}"
        f" (was {have.get('Nodes', 'none')}, {' '.join(had_users) or 'none'})",
        ("scontrol", "update", f"ReservationName={spec.name}", f"Nodes={nodes}", f"Users={names}"),
        f"scontrol update reservation {spec.name} failed (see the message above)",
        fatal=False,
    )


def plan_registration(clusters, accounts, names=(ACCOUNT,)):
    """The cluster and the accounts ``names``, added once: ``clusters`` and
    ``accounts`` are ``sacctmgr list cluster|account`` outputs (one name a
    line). Their QOS and users are set by :func:`plan_users`."""
    changes = []
    if CLUSTER not in clusters.split("\n"):
        changes.append(
            Change(
                f"registering cluster {CLUSTER} in slurmdbd",
                (*SACCTMGR, "add", "cluster", CLUSTER),
                f"sacctmgr add cluster {CLUSTER} failed",
            )
        )
    known = accounts.split("\n")
    for name in names:
        if name in known:
            continue
        description = "Data Scientist Portal" if name == ACCOUNT else f"{name} (demo lab account)"
        changes.append(
            Change(
                f"adding account {name}",
                (*SACCTMGR, "add", "account", name, f"cluster={CLUSTER}")
                + (f"description={description}", f"organization={name}"),
                f"sacctmgr add account {name} failed",
            )
        )
    return changes


def plan_qos_names(listing, specs):
    """The QOS of ``specs`` that ``listing`` (``sacctmgr list qos
    format=name``) lacks, added without limits: slurm.conf names them
    (a partition's QOS, DenyQos), and slurmctld needs them before its first
    start, when the gres/gpu TRES that their limits name is not known yet.

    >>> specs = [QosSpec("portal"), QosSpec("cpu")]
    >>> [c.argv[2:] for c in plan_qos_names("normal\\nportal\\n", specs)]
    [('add', 'qos', 'cpu')]
    """
    known = listing.split("\n")
    return [
        Change(
            f"adding QOS {spec.name} (its limits follow)",
            (*SACCTMGR, "add", "qos", spec.name),
            f"sacctmgr add qos {spec.name} failed",
        )
        for spec in specs
        if spec.name not in known
    ]


QOS_FORMAT = "format=name,maxwall,maxtrespu,maxtres,mintres,flags"
QOS_LIMITS = (  # sacctmgr's option, the QosSpec field
    ("MaxWall", "wall"),
    ("MaxTRESPerUser", "per_user"),
    ("MaxTRESPerJob", "per_job"),
    ("MinTRESPerJob", "min_tres"),
)


def _gpu_limit(tres):
    """The gres/gpu part of a TRES list: ``cpu=8,gres/gpu=4`` -> ``gres/gpu=4``."""
    return "\n".join(re.findall(r"gres/gpu=[0-9]*", tres))


def plan_qos(listing, spec):
    """The QOS ``spec`` with its limits and DenyOnLimit: added, or modified
    where it differs. ``listing``: ``sacctmgr list qos`` with
    :data:`QOS_FORMAT` (every QOS, or this one).

    >>> spec = QosSpec("portal", "1-00:00:00", "gres/gpu=4", "", "gres/gpu=1")
    >>> plan_qos("portal|1-00:00:00|gres/gpu=4||gres/gpu=1|DenyOnLimit", spec)
    >>> plan_qos("", spec).argv[2:5]
    ('add', 'qos', 'portal')
    >>> print(*plan_qos("", spec).argv[5:], sep="\\n")
    MaxWall=1-00:00:00
    MaxTRESPerUser=gres/gpu=4
    MaxTRESPerJob=gres/gpu=-1
    MinTRESPerJob=gres/gpu=1
    Flags=DenyOnLimit
    """
    rows = {row[0]: row for row in parse_list(listing, 6)}
    name, maxwall, maxtrespu, maxtres, mintres, flags = rows.get(spec.name, ("",) * 6)
    have = (maxwall, _gpu_limit(maxtrespu), _gpu_limit(maxtres), _gpu_limit(mintres))
    want = tuple(getattr(spec, field) for _, field in QOS_LIMITS)
    if name == spec.name and have == want and "DenyOnLimit" in flags.split(","):
        return None
    limits = tuple(
        f"{option}={value or ('-1' if field == 'wall' else 'gres/gpu=-1')}"
        for (option, field), value in zip(QOS_LIMITS, want, strict=True)
    )
    shown = " ".join(
        f"{option}={value or 'none'}" for (option, _), value in zip(QOS_LIMITS, want, strict=True)
    )
    if name != spec.name:
        return Change(
            f"adding QOS {spec.name}: {shown} Flags=DenyOnLimit",
            (*SACCTMGR, "add", "qos", spec.name, *limits, "Flags=DenyOnLimit"),
            f"sacctmgr add qos {spec.name} failed",
        )
    was = ", ".join(v or "none" for v in have) + f", {flags or 'no flags'}"
    return Change(
        f"QOS {spec.name}: {shown} Flags+=DenyOnLimit (was {was})",
        (*SACCTMGR, "modify", "qos", spec.name, "set", *limits, "Flags+=DenyOnLimit"),
        f"sacctmgr modify qos {spec.name} failed",
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
    account: Change | None  # the account's own QOS and fairshare, when they differ
    add: Change | None
    leaving: list  # associated users who are no longer members, in listing order


PORTAL = AccountSpec(ACCOUNT, (QOS,), QOS)  # the account portal, without cpu_qos


def plan_users(members, associations, spec=PORTAL):
    """The account's users = ``members`` (root and the hub's account among
    them), its QOS (its users inherit them) and fairshare those of ``spec``.
    ``associations``: ``sacctmgr list assoc account=NAME cluster=portal
    format=user,qos,defaultqos,fairshare``, whose row with no user is the
    account's own.

    >>> listing = "|portal|portal\\nroot|portal|portal\\nbob|portal|portal\\nalice|portal|portal\\n"
    >>> plan = plan_users({"root", "alice", "dave"}, listing)
    >>> plan.account, plan.add.argv[3:], plan.leaving
    (None, ('user', 'dave', 'account=portal', 'cluster=portal'), ['bob'])
    >>> lab = AccountSpec("lab-a", ("qa",), "qa", 60, "a")
    >>> plan_users({"root"}, "|qa|qa|60\\nroot|qa|qa|1\\n", lab)
    UsersPlan(account=None, add=None, leaving=[])
    >>> plan_users({"root"}, "|qa|qa|1\\nroot|qa|qa|1\\n", lab).account.argv[-3:]
    ('qos=qa', 'defaultqos=qa', 'fairshare=60')
    """
    account, listed, leaving = None, set(), []
    for name, qos, defqos, fairshare in parse_list(associations, 4):
        if not name:
            want = (sorted(spec.qos), spec.default_qos)
            share_ok = spec.fairshare is None or fairshare == str(spec.fairshare)
            if (sorted(q for q in qos.split(",") if q), defqos) != want or not share_ok:
                account = _account_change(spec, qos, defqos, fairshare)
            continue
        if name not in members and name not in listed:
            leaving.append(name)
        listed.add(name)
    new = sorted(set(members) - listed)
    add = None
    if new:
        add = Change(
            f"adding to account {spec.name}: {' '.join(new)}",
            (*SACCTMGR, "add", "user", ",".join(new), f"account={spec.name}", f"cluster={CLUSTER}"),
            "sacctmgr add user failed",
        )
    return UsersPlan(account, add, leaving)


def _account_change(spec, qos, defqos, fairshare):
    only = " only" if len(spec.qos) == 1 else f", default {spec.default_qos}"
    share = () if spec.fairshare is None else (f"fairshare={spec.fairshare}",)
    was = f"was {qos or 'none'}, default {defqos or 'none'}"
    if spec.fairshare is not None:
        was += f", fairshare {fairshare or 'none'}"
    return Change(
        f"account {spec.name}: QOS {','.join(spec.qos)}{only}"
        + (f", fairshare {spec.fairshare}" if share else "")
        + f" ({was})",
        (*SACCTMGR, "modify", "account", spec.name, "where", f"cluster={CLUSTER}")
        + ("set", f"qos={','.join(spec.qos)}", f"defaultqos={spec.default_qos}", *share),
        f"sacctmgr modify account {spec.name} failed",
    )


def plan_removal(leaving, active, account=ACCOUNT):
    """Who of ``leaving`` to remove now: those with no active job (``active``:
    ``squeue -h -A ACCOUNT -o %u`` output). Returns (the busy, a Change or None).

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
        f"removing from account {account}: {' '.join(gone)}",
        (*SACCTMGR, "remove", "user", "where", f"name={','.join(gone)}")
        + (f"account={account}", f"cluster={CLUSTER}"),
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
