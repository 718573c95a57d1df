"""What the portal knows of Slurm: jobs, nodes, partitions, and the poll's
snapshot as JSON (the hub writes it, the admin service reads it). Pure."""

import json
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import cached_property

RUNNING_STATES = {"RUNNING", "CONFIGURING", "STOPPED", "SUSPENDED"}
# Cancelled, timed out or failed, its processes being killed: the server is going
ENDING_STATES = {"COMPLETING"}
PENDING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
UNAVAILABLE_NODE = re.compile(
    r"down|drain|drng|fail|maint|unk|not_responding|inval|futr|power", re.I
)


# How a job's end reads for its user, by sacct's state.
END_STATES = {
    "NODE_FAIL": "its node failed",
    "BOOT_FAIL": "its node failed to boot",
    "TIMEOUT": "it reached its time limit",
    "DEADLINE": "it reached its deadline",
    "PREEMPTED": "it was preempted",
    "OUT_OF_MEMORY": "it ran out of memory",
    "CANCELLED": "it was cancelled",
    "FAILED": "Jupyter exited with an error",
    "COMPLETED": "Jupyter exited",
}


def describe_end(reason, memory=""):
    """A phrase for ``parse_end_reason``'s text (``"NODE_FAIL, exit code 0:0"``);
    ``memory``, the slice's (``"48 GB"``), names what a job killed for
    memory ran out of (the cgroup's limit, cgroup.conf ConstrainRAMSpace).

    >>> describe_end("NODE_FAIL, exit code 0:0")
    'its node failed'
    >>> describe_end("OUT_OF_MEMORY, exit code 0:125", "48 GB")
    'it ran out of its 48 GB of memory'
    >>> describe_end("")
    'Slurm has no record of how it ended'
    """
    state = reason.split(",", 1)[0].split()[0] if reason.strip() else ""
    if not state:
        return "Slurm has no record of how it ended"
    if state == "OUT_OF_MEMORY" and memory:
        return f"it ran out of its {memory} of memory"
    return END_STATES.get(state, f"Slurm ended it ({state})")


@dataclass(frozen=True)
class Job:
    id: str
    user: str
    state: str
    nodes: tuple  # the allocation's nodes, in Slurm's order; () while pending
    reason: str
    start: datetime | None
    end: datetime | None
    gres: str
    partition: str
    time_limit: int | None = None  # minutes (squeue's %l); None: unlimited or unknown

    @property
    def node(self):
        """The first node, where Slurm runs the batch script (and so Jupyter); "" while pending."""
        return self.nodes[0] if self.nodes else ""

    @property
    def running(self):
        return self.state in RUNNING_STATES

    @property
    def pending(self):
        return self.state in PENDING_STATES

    @property
    def ending(self):
        return self.state in ENDING_STATES


@dataclass(frozen=True)
class Node:
    name: str
    partitions: tuple
    gpus: int
    gpus_used: int
    cpus: int
    cpus_alloc: int
    mem_mb: int
    mem_alloc_mb: int
    state: str
    # the GPUs by type, from sinfo's Gres and GresUsed: ((type, total, used),
    # ...), "" the type of untyped GPUs; () in a snapshot from before types
    gpu_types: tuple = ()
    features: tuple = ()  # the node's features (sinfo's AVAIL_FEATURES)

    @property
    def available(self):
        # "*": not responding (mixed*, idle*): Slurm starts nothing there
        return not UNAVAILABLE_NODE.search(self.state) and not self.state.endswith("*")

    @property
    def gpus_free(self):
        return max(self.gpus - self.gpus_used, 0) if self.available else 0


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple
    max_time: str

    @property
    def gpus(self):
        return sum(n.gpus for n in self.nodes)

    @property
    def gpus_free(self):
        return sum(n.gpus_free for n in self.nodes)

    @property
    def largest_free(self):
        """The most GPUs one single-node job could get now."""
        return max((n.gpus_free for n in self.nodes), default=0)

    @property
    def largest_node(self):
        """The node with the most GPUs (ties: the most cores, then memory)."""
        return max(self.nodes, key=lambda n: (n.gpus, n.cpus, n.mem_mb), default=None)

    def gpu_models(self, nodes=None):
        """The partition's GPUs by type: ``{type: GpuModel}``, in the order
        the nodes list them; free GPUs only on available nodes (as
        ``gpus_free``). A node with GPUs but no types known (a snapshot from
        before types) counts under type "". ``nodes``: only these node
        names count (a reservation's nodes, or all but the reserved ones;
        None: every node).

        >>> nodes = (Node("n1", ("sxm2",), 4, 1, 32, 8, 1024, 0, "mix", (("v100-sxm2", 4, 1),)),
        ...          Node("n3", ("sxm2",), 4, 0, 32, 0, 1024, 0, "idle", (("v100-sxm2", 4, 0),)),
        ...          Node("n4", ("sxm2",), 2, 0, 32, 0, 1024, 0, "down*", (("a100", 2, 0),)))
        >>> models = Partition("sxm2", nodes, "1-00:00:00").gpu_models()
        >>> models["v100-sxm2"], models["a100"]
        (GpuModel(type='v100-sxm2', total=8, free=7, largest_free=4), \
GpuModel(type='a100', total=2, free=0, largest_free=0))
        >>> Partition("sxm2", nodes, "1-00:00:00").gpu_models(nodes=("n3",))
        {'v100-sxm2': GpuModel(type='v100-sxm2', total=4, free=4, largest_free=4)}
        """
        models = {}
        for node in self.nodes:
            if nodes is not None and node.name not in nodes:
                continue
            types = node.gpu_types or ((("", node.gpus, node.gpus_used),) if node.gpus else ())
            for kind, total, used in types:
                free = max(total - used, 0) if node.available else 0
                known = models.get(kind, GpuModel(kind, 0, 0, 0))
                models[kind] = GpuModel(
                    kind, known.total + total, known.free + free, max(known.largest_free, free)
                )
        return models


@dataclass(frozen=True)
class GpuModel:
    """One type of GPU in a partition: how many, how many free on its
    available nodes, and the most free on one node."""

    type: str  # sinfo's GRES type (gpu:TYPE:N); "" for untyped GPUs
    total: int
    free: int
    largest_free: int


@dataclass(frozen=True)
class GpuQuota:
    """The GPUs Slurm's QOS lets one user hold at once (its
    ``MaxTRESPerUser=gres/gpu=N``) and those they hold now, in all of their
    running jobs of that QOS (portal sessions and batch jobs alike). A
    request past it would pend with ``QOSMaxGRESPerUser`` until others end:
    the portal refuses it at once instead.

    >>> quota = GpuQuota("portal", 4, 3)
    >>> quota.room, quota.describe()
    (1, 'You hold 3 of the 4 GPUs that QOS portal lets you use at once: you may ask for 1 more.')
    >>> print(quota.refusal(2))
    2 GPUs is more than you may ask for now: you hold 3 of the 4 GPUs that QOS portal lets \
you use at once. Ask for at most 1, or stop a session or job first.
    >>> GpuQuota("portal", 4, 1).refusal(3) is None, GpuQuota("normal", None, 9).refusal(64)
    (True, None)
    >>> print(GpuQuota("portal", 4, 4).refusal(1))
    You hold all 4 GPUs that QOS portal lets you use at once: stop a session or job first.

    Sessions of the user's that are starting (``waiting``: their jobs are not
    running yet, so Slurm does not count them) take their GPUs too:

    >>> print(GpuQuota("portal", 4, 1, waiting=2).refusal(2))
    2 GPUs is more than you may ask for now: you hold 1 of the 4 GPUs that QOS portal lets \
you use at once, and 2 more in sessions starting. Ask for at most 1, or stop a session or job first.
    """

    qos: str
    limit: int | None  # None: the QOS sets no GPU limit per user
    used: int
    waiting: int = 0  # the GPUs of the user's sessions that are starting

    @property
    def room(self):
        """How many more GPUs the user may hold (None: no limit)."""
        return None if self.limit is None else max(self.limit - self.used - self.waiting, 0)

    def _held(self):
        more = f", and {self.waiting} more in sessions starting" if self.waiting else ""
        return (
            f"you hold {self.used} of the {self.limit} GPUs that QOS {self.qos} lets you use "
            f"at once{more}"
        )

    def describe(self):
        if self.limit is None:
            return f"You hold {self.used} GPUs; QOS {self.qos} sets no limit per user."
        if not self.room:
            return self.refusal(1)
        held = self._held()
        return f"{held[0].upper()}{held[1:]}: you may ask for {self.room} more."

    def refusal(self, gpus):
        """Why a request of ``gpus`` GPUs in all is refused; None when it fits."""
        if self.limit is None or gpus <= self.room:
            return None
        if not self.room and not self.waiting:
            return (
                f"You hold all {self.limit} GPUs that QOS {self.qos} lets you use at once: "
                "stop a session or job first."
            )
        return (
            f"{gpus} GPUs is more than you may ask for now: {self._held()}. Ask for at most "
            f"{self.room}, or stop a session or job first."
        )


def parse_time(text):
    """A Slurm time stamp (``2026-11-23T15:20:44``) as a datetime; None for
    ``N/A``, ``Unknown``, ``None`` or anything else."""
    text = (text or "").strip()
    if not text or text in ("N/A", "Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def snapshot_to_json(partitions, jobs, cluster_error="", jobs_error="", now=None):
    """What the poll knows, as JSON text (for ``snapshot_from_json``)."""

    def job(j):
        d = asdict(j)
        d["start"] = j.start.isoformat() if j.start else None
        d["end"] = j.end.isoformat() if j.end else None
        return d

    return json.dumps(
        {
            "time": (now or datetime.now()).isoformat(timespec="seconds"),
            "cluster_error": cluster_error,
            "jobs_error": jobs_error,
            "partitions": {
                p.name: {"max_time": p.max_time, "nodes": [asdict(n) for n in p.nodes]}
                for p in partitions.values()
            },
            "jobs": [job(j) for j in jobs.values()],
        },
        indent=1,
        sort_keys=True,
    )


def snapshot_from_json(text):
    """``snapshot_to_json`` text -> (time, partitions, jobs, errors)."""
    data = json.loads(text)
    partitions = {
        name: Partition(
            name=name,
            max_time=p["max_time"],
            nodes=tuple(_node(n) for n in p["nodes"]),
        )
        for name, p in data["partitions"].items()
    }
    jobs = {j["id"]: _job(j) for j in data["jobs"]}
    errors = {"cluster": data.get("cluster_error", ""), "jobs": data.get("jobs_error", "")}
    return datetime.fromisoformat(data["time"]), partitions, jobs, errors


def catalog_path(snapshot_path):
    """Where the poll writes its SiteCatalog (``to_json``), beside its
    snapshot, for the admin service: ``/x/cluster.json`` -> ``/x/cluster-catalog.json``.

    >>> catalog_path("/var/lib/portal/hub/cluster.json")
    '/var/lib/portal/hub/cluster-catalog.json'
    """
    base, _ = os.path.splitext(snapshot_path)
    return f"{base}-catalog.json"


def _node(data):
    """A snapshot's node; one from before GPU types and features has none."""
    return Node(
        **{
            **data,
            "partitions": tuple(data["partitions"]),
            "gpu_types": tuple(tuple(t) for t in data.get("gpu_types", ())),
            "features": tuple(data.get("features", ())),
        }
    )


def _job(data):
    data = dict(data)
    # a snapshot of a hub before multi-node sessions has "node", one name or ""
    old = data.pop("node", "")
    data["nodes"] = tuple(data.get("nodes") or ([old] if old else []))
    data["start"], data["end"] = parse_time(data["start"]), parse_time(data["end"])
    return Job(**data)


# -- the site's catalog: accounts, QOS, fairshare, reservations ---------------


def describe_minutes(minutes):
    """A wall time for people: ``1440`` -> "1 day", ``720`` -> "12 h".

    >>> describe_minutes(2880), describe_minutes(90), describe_minutes(45)
    ('2 days', '1 h 30 min', '45 min')
    """
    days, rest = divmod(minutes, 1440)
    if days and not rest:
        return f"{days} day{'s' if days > 1 else ''}"
    hours, mins = divmod(minutes, 60)
    if hours and mins:
        return f"{hours} h {mins} min"
    return f"{hours} h" if hours else f"{mins} min"


@dataclass(frozen=True)
class Association:
    """A user's association (sacctmgr): they may run jobs in ``account`` on
    ``partition`` ("": any partition) under one of ``qos``."""

    user: str
    account: str
    partition: str
    qos: tuple
    default_qos: str

    @property
    def usual_qos(self):
        """The QOS Slurm gives a job that names none: the default QOS, else
        ``normal`` when allowed, else the only one ("": none known)."""
        if self.default_qos:
            return self.default_qos
        if "normal" in self.qos:
            return "normal"
        return self.qos[0] if len(self.qos) == 1 else ""


@dataclass(frozen=True)
class Qos:
    """A QOS's limits as they matter to a session (sacctmgr show qos);
    None: no limit.

    >>> Qos("vision", 10, 1440, 4, None, None, ()).describe()
    'up to 4 GPUs per user, 1 day per job'
    >>> Qos("portal", 0, 720, 4, 2, 1, ("DenyOnLimit",)).describe()
    'up to 4 GPUs per user, up to 2 GPUs per job, at least 1 GPU per job, 12 h per job'
    >>> Qos("normal", 0, None, None, None, None, ()).describe()
    'no limits'
    """

    name: str
    priority: int
    max_wall_minutes: int | None
    max_gpus_per_user: int | None
    max_gpus_per_job: int | None
    min_gpus_per_job: int | None
    flags: tuple

    def gpus_refusal(self, gpus, named="QOS"):
        """Why a job of ``gpus`` GPUs in all may not run under it ("": it
        may; None: not known, nothing checked).

        >>> Qos("portal", 0, None, 4, None, 1, ()).gpus_refusal(0)
        'QOS portal needs at least 1 GPU per job'
        >>> Qos("cpu", 0, None, None, 0, None, ()).gpus_refusal(1, "Partition cpu's QOS")
        "Partition cpu's QOS cpu is for jobs without GPUs"
        >>> nlp, normal = Qos("nlp", 0, None, None, 2, None, ()), Qos("x", 0, *[None] * 4, ())
        >>> nlp.gpus_refusal(4), nlp.gpus_refusal(None), normal.gpus_refusal(4)
        ('QOS nlp allows at most 2 GPUs per job', '', '')
        """
        if gpus is None:
            return ""
        if self.min_gpus_per_job and gpus < self.min_gpus_per_job:
            return f"{named} {self.name} needs at least {_gpus(self.min_gpus_per_job)} per job"
        if self.max_gpus_per_job is not None and gpus > self.max_gpus_per_job:
            if not self.max_gpus_per_job:
                return f"{named} {self.name} is for jobs without GPUs"
            return f"{named} {self.name} allows at most {_gpus(self.max_gpus_per_job)} per job"
        return ""

    def describe(self):
        gpus = _gpus
        parts = []
        if self.max_gpus_per_user is not None:
            parts.append(f"up to {gpus(self.max_gpus_per_user)} per user")
        if self.max_gpus_per_job is not None:
            parts.append(f"up to {gpus(self.max_gpus_per_job)} per job")
        if self.min_gpus_per_job:
            parts.append(f"at least {gpus(self.min_gpus_per_job)} per job")
        if self.max_wall_minutes is not None:
            parts.append(f"{describe_minutes(self.max_wall_minutes)} per job")
        return ", ".join(parts) or "no limits"


@dataclass(frozen=True)
class Share:
    """An association's fairshare factor and GPU-hours used (sshare; its
    decayed usage: GrpTRESRaw's gres/gpu minutes / 60). ``user`` "": the
    account's own line."""

    account: str
    user: str
    fairshare: float  # 0.0 where sshare prints none
    gpu_hours: float


@dataclass(frozen=True)
class Reservation:
    """A reservation (``scontrol show reservation``). ``users`` and
    ``accounts`` as Slurm lists them: names, or names with a leading "-"
    (everyone but them); () none named. When both are named a job must
    match both (scontrol(1)). Times are the controller's local time, as
    scontrol prints them.

    >>> r = Reservation("course", datetime(2026, 11, 28, 9), datetime(2026, 11, 28, 17),
    ...                 ("n3",), "sxm2", ("alice",), (), ())
    >>> r.active(datetime(2026, 11, 28, 10)), r.upcoming(datetime(2026, 11, 28, 8)), r.window()
    (True, True, 'Sat 28 Nov 09:00 to 17:00')
    >>> r.refusal("bob", ["lab-nlp"])
    'Reservation course is not open to you'
    """

    name: str
    start: datetime
    end: datetime | None  # None: no end
    nodes: tuple
    partition: str  # "": any
    users: tuple
    accounts: tuple
    flags: tuple
    groups: tuple = ()  # Groups= (the users of these Unix groups), where Slurm prints it

    def active(self, now):
        now = _naive_local(now)
        return self.start <= now and (self.end is None or now < self.end)

    def upcoming(self, now):
        return _naive_local(now) < self.start

    def window(self):
        start = f"{self.start:%a %d %b %H:%M}"
        if self.end is None:
            return f"from {start}"
        if self.end.date() == self.start.date():
            return f"{start} to {self.end:%H:%M}"
        if self.end.year != self.start.year:  # a year-long one: not the same day next year
            return f"{start} to {self.end:%a %d %b %Y %H:%M}"
        return f"{start} to {self.end:%a %d %b %H:%M}"

    def open_accounts(self, accounts):
        """Which of ``accounts`` a job may name to run in it."""
        if not self.accounts:
            return list(accounts)
        denied = {a[1:] for a in self.accounts if a.startswith("-")}
        if denied:
            return [a for a in accounts if a not in denied]
        return [a for a in accounts if a in self.accounts]

    def refusal(self, user, accounts, groups=None):
        """Why ``user``, with ``accounts`` (theirs, or the one chosen) and
        ``groups`` (their Unix groups: None, not known), may not run in it;
        "" when they may."""
        if self.users:
            denied = {u[1:] for u in self.users if u.startswith("-")}
            if (user in denied) if denied else (user not in self.users):
                return f"Reservation {self.name} is not open to you"
        elif self.groups and not set(groups or ()) & set(self.groups):
            return f"Reservation {self.name} is for members of {_names('group', self.groups)}"
        if self.accounts and not self.open_accounts(accounts):
            if any(a.startswith("-") for a in self.accounts):
                return f"Reservation {self.name} is not open to {_names('account', accounts)}"
            return f"Reservation {self.name} is for {_names('account', self.accounts)}"
        return ""


def _gpus(n):
    return f"{n} GPU{'s' if n != 1 else ''}"


def _names(kind, names):
    """``group a``, ``groups a, b``, ``QOS a, b``."""
    names = list(names)
    plural = "s" if len(names) != 1 and kind != "QOS" else ""
    return f"{kind}{plural} {', '.join(names) or 'none'}"


def _naive_local(moment):
    """``moment`` as a naive local time, as scontrol prints its times."""
    return moment.astimezone().replace(tzinfo=None) if moment.tzinfo else moment


@dataclass(frozen=True)
class PartitionPolicy:
    """Who a partition lets in (``scontrol show partition``): None: ALL.

    >>> pcie = PartitionPolicy("pcie", None, ("nlp",), None, (), None, "")
    >>> pcie.qos_refusal("nlp"), pcie.qos_refusal("vision"), pcie.account_refusal("lab-nlp")
    ('Partition pcie denies QOS nlp', '', '')
    """

    name: str
    allow_qos: tuple | None
    deny_qos: tuple
    allow_accounts: tuple | None
    deny_accounts: tuple
    allow_groups: tuple | None
    qos: str  # the partition's own QOS ("": none)

    def qos_refusal(self, qos):
        if qos in self.deny_qos:
            return f"Partition {self.name} denies QOS {qos}"
        if self.allow_qos is not None and qos not in self.allow_qos:
            return f"Partition {self.name} allows only {_names('QOS', self.allow_qos)}"
        return ""

    def account_refusal(self, account):
        if account in self.deny_accounts or (
            self.allow_accounts is not None and account not in self.allow_accounts
        ):
            return f"Partition {self.name} does not allow account {account}"
        return ""

    def groups_refusal(self, groups):
        """Why a member of ``groups`` may not use it ("" when they may)."""
        if self.allow_groups is None or set(groups) & set(self.allow_groups):
            return ""
        return f"Partition {self.name} is for members of {_names('group', self.allow_groups)}"


@dataclass(frozen=True)
class SiteCatalog:
    """What the site's Slurm lets each user choose, read once for all
    users by the shared poll (``commands.site_catalog``): associations and
    default accounts, QOS and their limits, fairshare and GPU-hours,
    reservations, and the partitions' Allow/Deny lists. ``error``: what
    could not be read (the rest is as last read)."""

    time: datetime | None = None
    error: str = ""
    associations: tuple = ()
    default_accounts: dict = field(default_factory=dict)  # user -> account
    qos: dict = field(default_factory=dict)  # name -> Qos
    shares: dict = field(default_factory=dict)  # (account, user) -> Share
    reservations: tuple = ()
    partitions: dict = field(default_factory=dict)  # name -> PartitionPolicy

    @cached_property
    def _by_user(self):
        by_user = {}
        for assoc in self.associations:
            by_user.setdefault(assoc.user, []).append(assoc)
        return by_user

    def accounts_of(self, user):
        """The accounts ``user`` has an association with (any partition),
        their default account first, then by name."""
        accounts = sorted({a.account for a in self._by_user.get(user, ())})
        default = self.default_accounts.get(user)
        if default in accounts:
            accounts.remove(default)
            accounts.insert(0, default)
        return accounts

    def association(self, user, account, partition):
        """The association a job of ``user`` in ``account`` on ``partition``
        runs under (the partition's own, else the account's for any), or None."""
        rows = [a for a in self._by_user.get(user, ()) if a.account == account]
        exact = [a for a in rows if a.partition == partition]
        return (exact or [a for a in rows if not a.partition] or [None])[0]

    def account_refusal(self, user, account, partition):
        """Why ``user`` may not run in ``account`` on ``partition``; "" when they may."""
        if not any(a.account == account for a in self._by_user.get(user, ())):
            return f"You have no association with account {account}"
        if self.association(user, account, partition) is None:
            return f"Your association with account {account} does not cover partition {partition}"
        policy = self.partitions.get(partition)
        return policy.account_refusal(account) if policy else ""

    def qos_choices(self, user, account, partition, gpus=None):
        """``[(qos, reason)]``: every QOS of ``user``'s associations, those
        of ``account``'s on ``partition`` first (its usual one first);
        reason "" for one they may choose, else why not. ``gpus``, the
        job's GPUs in all (None: not known yet): a QOS, or the partition's
        own QOS, whose GPUs per job it is outside of is refused too."""
        assoc = self.association(user, account, partition)
        names = [assoc.usual_qos, *assoc.qos] if assoc else []
        names += sorted({q for a in self._by_user.get(user, ()) for q in a.qos})
        refusal = self.account_refusal(user, account, partition)
        policy = self.partitions.get(partition)
        if not refusal and policy and policy.qos in self.qos:
            refusal = self.qos[policy.qos].gpus_refusal(gpus, f"Partition {partition}'s QOS")
        choices = []
        for qos in dict.fromkeys(q for q in names if q):
            if refusal:
                reason = refusal
            elif qos not in assoc.qos:
                reason = f"Your association with account {account} does not include QOS {qos}"
            else:
                reason = policy.qos_refusal(qos) if policy else ""
                if not reason and qos in self.qos:
                    reason = self.qos[qos].gpus_refusal(gpus)
            choices.append((qos, reason))
        return choices

    def default_qos(self, user, account, partition, gpus=None):
        """The QOS to offer first: the association's usual one (what Slurm
        gives a job that names none) when allowed there (for ``gpus``,
        when given), else the first allowed; "" when none is."""
        choices = self.qos_choices(user, account, partition, gpus)
        allowed = [q for q, reason in choices if not reason]
        assoc = self.association(user, account, partition)
        if assoc and assoc.usual_qos in allowed:
            return assoc.usual_qos
        return allowed[0] if allowed else ""

    def cpu_only(self, partition):
        """Whether the partition's own QOS allows no GPU per job (a CPU
        partition, whatever GPUs its nodes have)."""
        policy = self.partitions.get(partition)
        qos = self.qos.get(policy.qos) if policy and policy.qos else None
        return qos is not None and qos.max_gpus_per_job == 0

    def reservation_choices(self, user, accounts, now, groups=None):
        """``[(Reservation, reason)]`` of the reservations active or
        upcoming at ``now``, the active first, then by start; reason "" for
        those ``user`` (with one of ``accounts``) may use, else why not."""
        shown = [r for r in self.reservations if r.active(now) or r.upcoming(now)]
        shown.sort(key=lambda r: (not r.active(now), r.start, r.name))
        return [(r, r.refusal(user, accounts, groups)) for r in shown]

    def reservation_refusal(self, name, user, accounts, now, groups=None):
        """Why ``user`` (with one of ``accounts``) may not run in the
        reservation ``name`` at ``now``; "" when they may."""
        found = [r for r in self.reservations if r.name == name]
        if not found:
            return f"There is no reservation {name}"
        if not (found[0].active(now) or found[0].upcoming(now)):
            return f"Reservation {name} is over"
        return found[0].refusal(user, accounts, groups)

    def to_json(self):
        """The catalog as JSON text (``from_json`` reads it back)."""

        def reservation(r):
            d = asdict(r)
            d["start"] = r.start.isoformat()
            d["end"] = r.end.isoformat() if r.end else None
            return d

        return json.dumps(
            {
                "time": self.time.isoformat(timespec="seconds") if self.time else None,
                "error": self.error,
                "associations": [asdict(a) for a in self.associations],
                "default_accounts": self.default_accounts,
                "qos": [asdict(q) for q in self.qos.values()],
                "shares": [asdict(s) for s in self.shares.values()],
                "reservations": [reservation(r) for r in self.reservations],
                "partitions": [asdict(p) for p in self.partitions.values()],
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text):
        data = json.loads(text)

        def tuples(d, *keys):
            return {**d, **{k: None if d[k] is None else tuple(d[k]) for k in keys}}

        qos = (Qos(**tuples(q, "flags")) for q in data["qos"])
        shares = (Share(**s) for s in data["shares"])
        policies = (
            PartitionPolicy(
                **tuples(p, "allow_qos", "deny_qos", "allow_accounts", "deny_accounts",
                         "allow_groups")
            )
            for p in data["partitions"]
        )  # fmt: skip
        return cls(
            time=parse_time(data["time"]),
            error=data["error"],
            associations=tuple(Association(**tuples(a, "qos")) for a in data["associations"]),
            default_accounts=dict(data["default_accounts"]),
            qos={q.name: q for q in qos},
            shares={(s.account, s.user): s for s in shares},
            reservations=tuple(
                Reservation(
                    **{
                        **tuples(r, "nodes", "users", "accounts", "flags", "groups"),
                        "start": parse_time(r["start"]),
                        "end": parse_time(r["end"]),
                    }
                )
                for r in data["reservations"]
            ),
            partitions={p.name: p for p in policies},
        )
