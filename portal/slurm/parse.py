"""Every parser of Slurm's output, pure functions tested without Slurm."""

import re
from datetime import UTC

from .model import (
    Association,
    Job,
    Node,
    Partition,
    PartitionPolicy,
    Qos,
    Reservation,
    Share,
    parse_time,
)

JOB_ID_RE = re.compile(r"^(\d+)(?:;[\w.-]+)?$")
BRACKET_RE = re.compile(r"^([^\[]*)\[([^\]]*)\](.*)$")
# A detail line of `scontrol show job -d`, and nothing else: a user's own
# fields (Comment=, the job name) are printed on lines of their own and may
# hold any text, "Nodes=" and "GRES=" included.
DETAIL_LINE_RE = re.compile(r"^\s+Nodes=(\S+) CPU_IDs=\S+ Mem=\d+ GRES=(\S+)$")
GPU_IDX_RE = re.compile(r"(?:^|[=,])gpu[^,(\s]*\(IDX:([\d,-]+)\)")
# The most names a host list may expand to: far above any session's nodes, far
# below what would stall the hub ("x[0-999999999]" is 14 characters).
MAX_HOSTS = 4096


class SlurmError(RuntimeError):
    """A Slurm command failed or timed out, or printed what cannot be read;
    ``str()`` says which and why, ``returncode`` is the exit status of a
    command that failed (None otherwise)."""

    def __init__(self, message, returncode=None):
        super().__init__(message)
        self.returncode = returncode


def parse_job_id(output):
    """The job id printed by ``sbatch --parsable`` (``123`` or ``123;cluster``)."""
    lines = output.strip().splitlines()
    match = JOB_ID_RE.match(lines[-1].strip()) if lines else None
    if not match:
        raise SlurmError(f"sbatch printed no job id: {output.strip()[:200]!r}")
    return match.group(1)


def expand_hostlist(text):
    """Slurm's compressed host list (squeue's ``%N``, scontrol's ``Nodes=``) as
    a tuple of node names, in Slurm's order; ``""`` and ``(null)``: ``()``.

    >>> expand_hostlist("n[1-2]"), expand_hostlist("n1,n3")
    (('n1', 'n2'), ('n1', 'n3'))
    >>> expand_hostlist("gpu[01-03,07],vm")
    ('gpu01', 'gpu02', 'gpu03', 'gpu07', 'vm')
    >>> expand_hostlist("rack[1-2]-n[1,3]")
    ('rack1-n1', 'rack1-n3', 'rack2-n1', 'rack2-n3')

    Raises ValueError for a range it cannot read, or one of more than
    MAX_HOSTS names (counted before anything is expanded).
    """
    text = (text or "").strip()
    if text in ("", "(null)"):
        return ()
    if _count_names(text) > MAX_HOSTS:
        raise ValueError(f"host list {text[:80]!r} names more than {MAX_HOSTS} hosts")
    names, depth, start = [], 0, 0
    for i, char in enumerate(text + ","):
        depth += (char == "[") - (char == "]")
        if depth not in (0, 1):
            break
        if char == "," and depth == 0:
            names.extend(_expand_name(text[start:i].strip()))
            start = i + 1
    if depth != 0:
        raise ValueError(f"unbalanced brackets in host list {text[:80]!r}")
    return tuple(name for name in names if name)


def _expand_name(name):
    """One host list item (``gpu[01-03,07]``): every name it stands for."""
    match = BRACKET_RE.match(name)
    if not match:
        if "[" in name or "]" in name:
            raise ValueError(f"not a host list: {name[:80]!r}")
        return [name]
    prefix, ranges, rest = match.groups()
    return [
        prefix + number + tail for number in _range_numbers(ranges) for tail in _expand_name(rest)
    ]


def _count_names(text):
    """How many names the host list ``text`` stands for, without expanding it:
    per item, the product of its bracket ranges' sizes."""
    total = 0
    for item in re.split(r",(?![^\[]*\])", text):
        count = 1
        for ranges in re.findall(r"\[([^\]]*)\]", item):
            size = 0
            for part in ranges.split(","):
                low, _, high = part.strip().partition("-")
                if not low.isdigit() or not (high or low).isdigit():
                    raise ValueError(f"not a host range: {ranges[:80]!r}")
                size += max(int(high or low) - int(low) + 1, 0)
            count *= size
        total += count
    return total


def _range_numbers(ranges):
    """``01-03,07`` -> 01, 02, 03, 07 (zero-padded as the range's lower bound is)."""
    numbers = []
    for part in ranges.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or not (high or low).isdigit():
            raise ValueError(f"not a host range: {ranges[:80]!r}")
        numbers += [str(n).zfill(len(low)) for n in range(int(low), int(high or low) + 1)]
    return numbers


def parse_squeue(text):
    """``squeue -o SQUEUE_FORMAT`` output -> ``{job_id: Job}``."""
    jobs = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 10 or not parts[0].isdigit():
            continue
        job_id, user, state, nodes, reason, start, end, gres, partition, limit = parts
        try:
            nodes = expand_hostlist(nodes)
        except ValueError:
            nodes = (nodes,)  # never seen; the job stays listed, its node as Slurm wrote it
        jobs[job_id] = Job(
            id=job_id,
            user=user,
            state=state,
            nodes=nodes,
            reason="" if reason in ("None", "(null)") else reason,
            start=parse_time(start),
            end=parse_time(end),
            gres=gres,
            partition=partition,
            time_limit=max_time_minutes(limit),
        )
    return jobs


def gpu_count(gres):
    """GPUs in a Gres or GresUsed value: ``gpu:4``, ``gpu:a100:2(IDX:0-1)``, ``gpu:0,shard:8``."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres or ""):
        item = re.sub(r"\([^()]*\)$", "", item.strip())
        parts = item.split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def gpu_types(gres, gres_used=""):
    """The GPUs of a node by type, from sinfo's Gres and GresUsed:
    ``((type, total, used), ...)`` in Gres's order, ``""`` the type of
    untyped GPUs (``gpu:4``).

    >>> gpu_types("gpu:v100-sxm2:4", "gpu:v100-sxm2:2(IDX:0-1)")
    (('v100-sxm2', 4, 2),)
    >>> gpu_types("gpu:a:2(S:0),gpu:b:2(S:1)", "gpu:a:0(IDX:N/A),gpu:b:1(IDX:3)")
    (('a', 2, 0), ('b', 2, 1))
    >>> gpu_types("gpu:4", "gpu:0"), gpu_types("(null)", "gpu:0")
    ((('', 4, 0),), ())

    Slurm 22.05 writes an untyped GPU's type as ``(null)`` in places:

    >>> gpu_types("gpu:(null):2", "gpu:(null):1(IDX:0)")
    (('', 2, 1),)
    """
    totals = _typed_gres(gres)
    used = dict(_typed_gres(gres_used))
    return tuple((kind, total, used.get(kind, 0)) for kind, total in totals)


def _typed_gres(text):
    """``[(type, count)]`` of the GPUs in a Gres or GresUsed value, merged by type."""
    counts = {}
    for item in re.split(r",(?![^()]*\))", text or ""):
        parts = re.sub(r"\([^()]*\)$", "", item.strip()).split(":")
        if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
            continue
        kind = parts[1] if len(parts) >= 3 and parts[1] != "(null)" else ""
        counts[kind] = counts.get(kind, 0) + int(parts[-1])
    return list(counts.items())


def names_list(text):
    """A comma list as Slurm prints it (features, users, accounts, QOS),
    as a tuple; ``(null)``, ``N/A`` and ``""``: ``()``.

    >>> names_list("v100,nvlink"), names_list("(null)"), names_list("")
    (('v100', 'nvlink'), (), ())
    """
    text = (text or "").strip()
    if text in ("", "(null)", "N/A", "None"):
        return ()
    return tuple(name for name in (n.strip() for n in text.split(",")) if name)


def parse_sinfo(text):
    """``sinfo -N -O SINFO_FIELDS`` output -> ``{partition: Partition}``.

    Nodes appear once per partition; each is combined from its own line, so
    partitions of mixed node types are right (jupyterhub-moss #97). The
    last field, the node's features, may be missing (an older field list).
    """
    nodes_by_partition = {}
    times = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 9:
            parts.append("(null)")
        if len(parts) != 10:
            continue
        name, partition, gres, gres_used, cpus_state, state, mem, alloc_mem, max_time = parts[:9]
        features = names_list(parts[9])
        partition = partition.rstrip("*")
        try:
            alloc, _idle, _other, total = (int(x) for x in cpus_state.split("/"))
            mem_mb, alloc_mb = int(mem), int(alloc_mem)
        except ValueError:
            continue
        node = Node(
            name=name,
            partitions=(partition,),
            gpus=gpu_count(gres),
            gpus_used=gpu_count(gres_used),
            cpus=total,
            cpus_alloc=alloc,
            mem_mb=mem_mb,
            mem_alloc_mb=alloc_mb,
            state=state,
            gpu_types=gpu_types(gres, gres_used),
            features=features,
        )
        nodes_by_partition.setdefault(partition, []).append(node)
        times[partition] = max_time
    return {
        p: Partition(name=p, nodes=tuple(nodes), max_time=times[p])
        for p, nodes in nodes_by_partition.items()
    }


WILL_RUN_RE = re.compile(r"to start at (\S+)")


def parse_will_run(text):
    """``sbatch --test-only`` output -> the expected start, or None."""
    match = WILL_RUN_RE.search(text)
    return parse_time(match.group(1)) if match else None


def parse_end_reason(text):
    """``sacct -X -n -P -o State,ExitCode,Reason`` output -> "STATE, exit code X:Y" (or "").

    >>> parse_end_reason("FAILED|1:0|NonZeroExitCode")
    'FAILED, exit code 1:0'
    """
    fields = text.splitlines()[0].split("|") if text.strip() else []
    if len(fields) >= 2 and fields[0].strip():
        return f"{fields[0].split()[0]}, exit code {fields[1]}"
    return ""


def private_data(text):
    """The kinds of data Slurm keeps private (``PrivateData``) in
    ``scontrol show config`` or ``sacctmgr show config`` output, every
    ``PrivateData`` line's together (sacctmgr's has slurm.conf's and
    slurmdbd's), lower case; "none" names none.

    >>> sorted(private_data("PrivateData             = jobs,usage\\nSLURM_CONF = /etc/x.conf"))
    ['jobs', 'usage']
    >>> sorted(private_data("PrivateData = none\\nPrivateData            = Jobs"))
    ['jobs']
    >>> private_data("ClusterName = x")
    set()
    """
    kinds = set()
    for line in text.splitlines():
        key, equals, value = line.partition("=")
        if equals and key.strip() == "PrivateData":
            kinds |= {k.strip().lower() for k in value.split(",") if k.strip()}
    return kinds - {"none"}


def parse_gpu_indices(text, nodes):
    """The GPU indices of each of ``nodes`` (the job's, as squeue lists them)
    in ``scontrol show job -d`` output; the detail lines only.

    >>> line = "     Nodes=n[1-2] CPU_IDs=0-7 Mem=49152 GRES=gpu:1(IDX:0)"
    >>> parse_gpu_indices(line, ("n1", "n2"))
    {'n1': '0', 'n2': '0'}
    >>> line = "     Nodes=n1 CPU_IDs=0-15 Mem=98304 GRES=gpu:a100:2(IDX:1-2)"
    >>> parse_gpu_indices(line, ("n1",))
    {'n1': '1-2'}

    What a user may write into their job's own fields is not a detail line,
    and names outside ``nodes`` are dropped:

    >>> parse_gpu_indices("   Comment= Nodes=x[0-9] GRES=gpu:1(IDX:9)", ("n1",))
    {}
    """
    indices = {}
    for line in text.splitlines():
        detail = DETAIL_LINE_RE.match(line)
        gpus = GPU_IDX_RE.search(detail.group(2)) if detail else None
        if not gpus:
            continue
        try:
            names = expand_hostlist(detail.group(1))
        except ValueError:
            continue
        indices.update((name, gpus.group(1)) for name in names if name in nodes)
    return indices


def parse_running_limit(text, job_id):
    """``squeue -h -j JOB -o %i|%l|%e`` output -> ``(limit_minutes, end)`` of
    ``job_id``, or None when it is not listed; the limit is None when unlimited.

    >>> parse_running_limit("42|2:00:00|2026-11-23T20:00:00", "42")
    (120, datetime.datetime(2026, 11, 23, 20, 0))
    >>> parse_running_limit("", "42") is None
    True
    """
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0] == str(job_id):
            return max_time_minutes(parts[1]), parse_time(parts[2])
    return None


def parse_job_fields(text):
    """``scontrol show job -o JOB`` output -> ``{"JobState": ..., ...}``."""
    return dict(field.split("=", 1) for field in text.split() if "=" in field)


def max_time_minutes(text):
    """A partition's MaxTime or a job's TimeLimit in minutes; None when
    unlimited or unknown.

    Slurm writes ``UNLIMITED``, ``infinite``, ``MM``, ``MM:SS``, ``HH:MM:SS``,
    ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``.

    >>> max_time_minutes("5:00:00"), max_time_minutes("1-02:00:00"), max_time_minutes("30:00")
    (300, 1560, 30)
    """
    text = (text or "").strip().lower()
    if not text or text in ("unlimited", "infinite", "n/a"):
        return None
    days, _, rest = text.rpartition("-")
    try:
        day_count = int(days) if days else 0
        parts = [int(p) for p in rest.split(":")]
    except ValueError:
        return None
    if days:  # D-HH[:MM[:SS]]
        hours, minutes = parts[0], parts[1] if len(parts) > 1 else 0
    elif len(parts) == 3:
        hours, minutes = parts[0], parts[1]
    else:  # MM or MM:SS
        hours, minutes = 0, parts[0]
    return day_count * 1440 + hours * 60 + minutes


# A user record of `scontrol show assoc_mgr users=NAME flags=users`:
# "UserName=NAME(UID) DefAccount=..."; Slurm's NO_VAL (4294967294) for a
# user slurmctld found no Unix account of when it heard of it.
ASSOC_USER_RE = re.compile(r"^UserName=([^\s(]+)(?:\((\d+)\))?(?:\s|$)")
NO_VAL = 4294967294


def parse_assoc_uids(text):
    """The users of ``scontrol show assoc_mgr users=NAME flags=users`` and the
    uid slurmctld holds for each: ``{name: uid}``, None where it holds none.

    >>> parse_assoc_uids("User Records\\n\\nUserName=portal(998) DefAccount=portal AdminLevel=None")
    {'portal': 998}
    >>> parse_assoc_uids("UserName=portal(4294967294) DefAccount=portal AdminLevel=Not Set")
    {'portal': None}
    >>> parse_assoc_uids("No users currently cached in Slurm.")
    {}
    """
    users = {}
    for line in text.splitlines():
        match = ASSOC_USER_RE.match(line.strip())
        if match:
            uid = int(match.group(2)) if match.group(2) else NO_VAL
            users[match.group(1)] = None if uid == NO_VAL else uid
    return users


def parse_end(output, job_id):
    """``(end, reason)`` from the output of ``squeue -h -j JOB -o %e`` run with
    TZ=UTC (``commands.job_end``): the end as an aware datetime and "", or
    None and why not.

    >>> parse_end("2026-11-23T15:20:44", "7")[0].isoformat()
    '2026-11-23T15:20:44+00:00'
    >>> parse_end("", "7")
    (None, 'Slurm no longer lists job 7: it has ended')
    >>> parse_end("N/A", "7")
    (None, 'Slurm gives job 7 no end time (N/A)')
    """
    lines = output.strip().splitlines()
    if not lines:
        return None, f"Slurm no longer lists job {job_id}: it has ended"
    end = parse_time(lines[0])
    if end is None:
        return None, f"Slurm gives job {job_id} no end time ({lines[0].strip()[:40]})"
    return end.replace(tzinfo=UTC), ""


# -- the GPUs a QOS lets one user hold at once --------------------------------

QOS_RECORD_RE = re.compile(r"^QOS=(\S+?)\(\d+\)$")
# A user's MaxTRESPU in `scontrol show assoc_mgr flags=qos`: "gres/gpu=4(2)"
# (limit 4, 2 held), "gres/gpu=N(2)" (no limit).
USER_GPUS_RE = re.compile(r"(?:^|[=,])gres/gpu=(\d+|N)\((\d+)\)")
QOS_GPU_LIMIT_RE = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")


def parse_qos_usage(text):
    """The GPUs each user holds in each QOS, as slurmctld counts them against
    the QOS's per-user limit (its running jobs), from ``scontrol show
    assoc_mgr flags=qos``: ``{qos: {uid: gpus}}``. A user with no record in a
    QOS holds none there.

    >>> parse_qos_usage('''QOS Records
    ...
    ... QOS=portal(2)
    ...     MinTRESPJ=gres/gpu=1
    ...     User Limits
    ...       20001
    ...         MaxJobsPU=N(1) MaxJobsAccruePU=N(0) MaxSubmitJobsPU=N(1)
    ...         MaxTRESPU=cpu=N(2),mem=N(12288),node=N(1),gres/gpu=4(2)
    ...       23001
    ...         MaxTRESPU=cpu=N(0),mem=N(0),gres/gpu=4(0)
    ... QOS=normal(1)
    ...     User Limits
    ...       20001
    ...         MaxTRESPU=cpu=N(1),gres/gpu=N(1)''')
    {'portal': {20001: 2, 23001: 0}, 'normal': {20001: 1}}
    """
    usage, qos, uid = {}, None, None
    for line in text.splitlines():
        line = line.strip()
        if match := QOS_RECORD_RE.match(line):
            qos, uid = match.group(1), None
            usage[qos] = {}
        elif qos is not None and line.isdigit():
            uid = int(line)
        elif qos is not None and uid is not None and line.startswith("MaxTRESPU="):
            found = USER_GPUS_RE.search(line[len("MaxTRESPU=") :])
            usage[qos][uid] = int(found.group(2)) if found else 0
    return usage


def parse_qos_gpu_limits(text):
    """Each QOS's GPUs per user (``MaxTRESPerUser``), None for no limit, from
    ``sacctmgr -n -P show qos format=Name,MaxTRESPU``.

    >>> parse_qos_gpu_limits("normal|\\nportal|gres/gpu=4\\nbig|cpu=64,gres/gpu=16")
    {'normal': None, 'portal': 4, 'big': 16}
    """
    limits = {}
    for line in text.splitlines():
        name, sep, tres = line.strip().partition("|")
        if name and sep:
            found = QOS_GPU_LIMIT_RE.search(tres)
            limits[name] = int(found.group(1)) if found else None
    return limits


def parse_default_qos(text, partition):
    """The QOS a job of the user gets when sbatch names none, from ``sacctmgr
    -n -P show user NAME withassoc
    format=DefaultAccount,Account,Partition,DefaultQOS,QOS``: the default
    account's association on ``partition`` (else its association for every
    partition), its default QOS or else its only QOS; "" when none is known.

    >>> parse_default_qos("portal|portal||portal|portal", "gpu")
    'portal'
    >>> rows = "lab|lab||normal|normal,long\\nlab|lab|gpu||gpuq\\nlab|other||x|x"
    >>> parse_default_qos(rows, "gpu"), parse_default_qos(rows, "cpu")
    ('gpuq', 'normal')
    >>> parse_default_qos("lab|lab|||a,b", "gpu")
    ''
    """
    chosen = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5:
            continue
        default_account, account, part, default_qos, qos_list = fields
        if account != default_account or part not in ("", partition):
            continue
        listed = [q for q in qos_list.split(",") if q]
        qos = default_qos or (listed[0] if len(listed) == 1 else "")
        chosen[part] = qos
    return chosen.get(partition, chosen.get("", ""))


# -- the site's catalog (model.SiteCatalog) ---------------------------------

# The field lists of the catalog's reads (commands.site_catalog), in the
# order the parsers below take them.
ASSOC_FIELDS = "User,Account,Partition,QOS,DefaultQOS"
USER_FIELDS = "User,DefaultAccount"
QOS_FIELDS = "Name,Priority,MaxWall,MaxTRESPerUser,MaxTRESPerJob,MinTRESPerJob,Flags"
SHARE_FIELDS = "Account,User,FairShare,GrpTRESRaw"
GPU_TRES_RE = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")


def _rows(text, width):
    """``sacctmgr``/``sshare -P`` output as rows of ``width`` fields."""
    rows = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) == width:
            rows.append([f.strip() for f in fields])
    return rows


def tres_gpus(tres):
    """The GPUs of a TRES list (``cpu=8,gres/gpu=4``); None when it names none.

    >>> tres_gpus("cpu=64,gres/gpu=16"), tres_gpus("gres/gpu:v100=2,gres/gpu=2"), tres_gpus("")
    (16, 2, None)
    """
    found = GPU_TRES_RE.search(tres or "")
    return int(found.group(1)) if found else None


def parse_associations(text):
    """``sacctmgr -n -P show assoc format=ASSOC_FIELDS`` -> Associations of
    users, in sacctmgr's order (the accounts' own lines, with no user, are
    left out).

    >>> rows = "|lab-nlp||nlp|\\nbob|lab-nlp||nlp,normal|nlp\\ncarol|lab-vision|pcie|vision|"
    >>> [(a.user, a.account, a.partition, a.qos, a.default_qos) for a in parse_associations(rows)]
    [('bob', 'lab-nlp', '', ('nlp', 'normal'), 'nlp'), ('carol', 'lab-vision', 'pcie', \
('vision',), '')]
    """
    return tuple(
        Association(user, account, partition, names_list(qos), default_qos)
        for user, account, partition, qos, default_qos in _rows(text, 5)
        if user and account
    )


def parse_default_accounts(text):
    """``sacctmgr -n -P show user format=User,DefaultAccount`` -> ``{user: account}``.

    >>> parse_default_accounts("alice|lab-vision\\nroot|root\\nnobody|")
    {'alice': 'lab-vision', 'root': 'root'}
    """
    return {user: account for user, account in _rows(text, 2) if user and account}


def parse_qos(text):
    """``sacctmgr -n -P show qos format=QOS_FIELDS`` -> ``{name: Qos}``.

    >>> qos = parse_qos("vision|10|1-00:00:00|gres/gpu=4|gres/gpu=2|gres/gpu=1|DenyOnLimit")
    >>> qos["vision"]
    Qos(name='vision', priority=10, max_wall_minutes=1440, max_gpus_per_user=4, \
max_gpus_per_job=2, min_gpus_per_job=1, flags=('DenyOnLimit',))
    >>> parse_qos("normal|0||||cpu=1|")["normal"].describe()
    'no limits'
    """
    found = {}
    for name, priority, wall, per_user, per_job, min_job, flags in _rows(text, 7):
        if not name:
            continue
        found[name] = Qos(
            name=name,
            priority=int(priority) if priority.isdigit() else 0,
            max_wall_minutes=max_time_minutes(wall),
            max_gpus_per_user=tres_gpus(per_user),
            max_gpus_per_job=tres_gpus(per_job),
            min_gpus_per_job=tres_gpus(min_job),
            flags=names_list(flags),
        )
    return found


def parse_shares(text):
    """``sshare -a -n -P -o SHARE_FIELDS`` -> ``{(account, user): Share}``;
    user "" for an account's own line. sshare indents accounts by depth;
    GrpTRESRaw is the decayed usage in TRES-minutes.

    >>> out = ("root|||cpu=60,gres/gpu=0\\n lab-nlp||0.5|cpu=600,gres/gpu=180\\n"
    ...        "  lab-nlp|bob|0.750000|cpu=600,mem=0,gres/gpu=180\\n  lab-nlp|carol||")
    >>> shares = parse_shares(out)
    >>> shares["lab-nlp", "bob"], shares["lab-nlp", "carol"].gpu_hours
    (Share(account='lab-nlp', user='bob', fairshare=0.75, gpu_hours=3.0), 0.0)
    """
    found = {}
    for account, user, fairshare, tres in _rows(text, 4):
        if not account:
            continue
        try:
            factor = float(fairshare) if fairshare else 0.0
        except ValueError:
            factor = 0.0
        found[account, user] = Share(account, user, factor, (tres_gpus(tres) or 0) / 60)
    return found


def scontrol_records(text):
    """``scontrol show ... -o`` output: one ``{key: value}`` per line (a
    value has no blank; ``(null)`` is kept as written)."""
    records = []
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if fields:
            records.append(fields)
    return records


def parse_reservations(text):
    """``scontrol show reservation -o`` -> Reservations, in scontrol's order.

    >>> out = ("ReservationName=vision-course StartTime=2026-11-28T09:00:00 "
    ...        "EndTime=2026-11-28T17:00:00 Duration=08:00:00 Nodes=n3 NodeCnt=1 CoreCnt=16 "
    ...        "Features=(null) PartitionName=sxm2 Flags=SPEC_NODES TRES=cpu=16 Users=alice "
    ...        "Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) "
    ...        "Watts=n/a MaxStartDelay=(null)")
    >>> r, = parse_reservations(out)
    >>> r.name, r.nodes, r.partition, r.users, r.accounts, r.flags, r.window()
    ('vision-course', ('n3',), 'sxm2', ('alice',), (), ('SPEC_NODES',), 'Sat 28 Nov 09:00 to 17:00')
    >>> parse_reservations("No reservations in the system")
    ()
    """
    found = []
    for fields in scontrol_records(text):
        start = parse_time(fields.get("StartTime"))
        if not fields.get("ReservationName") or start is None:
            continue
        try:
            nodes = expand_hostlist(fields.get("Nodes", ""))
        except ValueError:
            nodes = (fields["Nodes"],)
        partition = fields.get("PartitionName", "")
        found.append(
            Reservation(
                name=fields["ReservationName"],
                start=start,
                end=parse_time(fields.get("EndTime")),
                nodes=nodes,
                partition="" if partition == "(null)" else partition,
                users=names_list(fields.get("Users")),
                accounts=names_list(fields.get("Accounts")),
                flags=names_list(fields.get("Flags")),
                groups=names_list(fields.get("Groups")),
            )
        )
    return tuple(found)


def parse_partition_policies(text):
    """``scontrol show partition -o`` -> ``{name: PartitionPolicy}``; a list
    of ``ALL`` (or none printed) is None.

    >>> out = ("PartitionName=pcie AllowGroups=ALL AllowAccounts=ALL DenyQos=nlp "
    ...        "AllocNodes=ALL Default=NO QoS=N/A MaxTime=1-00:00:00 Nodes=n2 State=UP")
    >>> parse_partition_policies(out)["pcie"]
    PartitionPolicy(name='pcie', allow_qos=None, deny_qos=('nlp',), allow_accounts=None, \
deny_accounts=(), allow_groups=None, qos='')
    """

    def allowed(value):
        return None if value in (None, "ALL") else names_list(value)

    found = {}
    for fields in scontrol_records(text):
        name = fields.get("PartitionName")
        if not name:
            continue
        qos = fields.get("QoS", "")
        found[name] = PartitionPolicy(
            name=name,
            allow_qos=allowed(fields.get("AllowQos")),
            deny_qos=names_list(fields.get("DenyQos")),
            allow_accounts=allowed(fields.get("AllowAccounts")),
            deny_accounts=names_list(fields.get("DenyAccounts")),
            allow_groups=allowed(fields.get("AllowGroups")),
            qos="" if qos in ("N/A", "(null)") else qos,
        )
    return found


# -- notebook jobs -----------------------------------------------------------

SACCT_TASK_FIELDS = "JobID,State,ExitCode,Submit,Start,End,Elapsed,NodeList,Reason"
ARRAY_ID_RE = re.compile(r"^(\d+)(?:_(\d+|\[[\d,%-]+\]))?$")


def _task_numbers(text):
    """An array's pending tasks as sacct writes them, ``[0-2,5%4]`` -> 0, 1, 2, 5."""
    ranges = text.strip("[]").split("%")[0]
    numbers = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (high or low).isdigit():
            numbers += range(int(low), min(int(high or low), int(low) + 10000) + 1)
    return numbers


def parse_sacct_tasks(text):
    r"""``sacct -X -n -P -o SACCT_TASK_FIELDS`` output -> ``{job_id: {task: fields}}``:
    task None for a job that is no array; a pending array's tasks one by one.

    >>> out = "812_[1-2]|PENDING|0:0|2026-11-27T09:00:00|Unknown|Unknown|00:00:00|"
    >>> out += "None assigned|Priority\n812_0|COMPLETED|0:0|2026-11-27T09:00:00|"
    >>> out += "2026-11-27T09:00:01|2026-11-27T09:01:01|00:01:00|n1|None"
    >>> tasks = parse_sacct_tasks(out)["812"]
    >>> sorted(tasks), tasks[0]["state"], tasks[0]["elapsed"], tasks[1]["state"], tasks[1]["reason"]
    ([0, 1, 2], 'COMPLETED', '00:01:00', 'PENDING', 'Priority')
    """
    jobs = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 9:
            continue
        match = ARRAY_ID_RE.match(parts[0])
        if not match:
            continue
        job_id, task = match.groups()
        _, state, exit_code, submit, start, end, elapsed, nodes, reason = parts
        fields = {
            "state": state.split()[0] if state.strip() else "UNKNOWN",
            "exit_code": exit_code,
            "submit": parse_time(submit),
            "start": parse_time(start),
            "end": parse_time(end),
            "elapsed": elapsed,
            "nodes": "" if nodes in ("None assigned", "(null)") else nodes,
            "reason": "" if reason in ("None", "(null)") else reason,
        }
        numbers = [None] if task is None else (
            _task_numbers(task) if task.startswith("[") else [int(task)]
        )  # fmt: skip
        for number in numbers:
            jobs.setdefault(job_id, {})[number] = dict(fields)
    return jobs


def parse_squeue_tasks(text):
    """``squeue -r -o %i|%T|%S|%e|%r`` output -> ``{job_id: {task: fields}}``
    (``start``: the expected start of a pending one, ``end``: when it ends
    at the latest).

    >>> task = parse_squeue_tasks("812_1|PENDING|2026-11-27T10:00:00|N/A|Resources")["812"][1]
    >>> task["state"], task["start"].isoformat(), task["end"], task["reason"]
    ('PENDING', '2026-11-27T10:00:00', None, 'Resources')
    """
    jobs = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5:
            continue
        match = ARRAY_ID_RE.match(parts[0])
        if not match or (match.group(2) or "").startswith("["):
            continue
        job_id, task = match.groups()
        jobs.setdefault(job_id, {})[None if task is None else int(task)] = {
            "state": parts[1],
            "start": parse_time(parts[2]),
            "end": parse_time(parts[3]),
            "reason": "" if parts[4] in ("None", "(null)") else parts[4],
        }
    return jobs
