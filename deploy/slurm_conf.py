"""The embedded Slurm cluster's configuration, as pure functions of the settings.

deploy/slurm.sh starts and stops the daemons; what they read is computed
here, from the merged site settings (``portal.settings``) and a few facts of
this host (its short hostname, the database password), and written by
deploy/slurm_setup.py. Everything here is testable without Slurm.

The cluster: a login node (this host: munge, MariaDB, slurmdbd, slurmctld) and
``[cluster] nodes`` compute nodes n1, n2, ..., each in a network and UTS
namespace of its own (its own address on a bridge of this host, its own
hostname, its own slurmd and GPU device files), each advertising the
``[cluster]`` node settings (cores, memory, GPUs) whatever the machine really
has, or its own (``[cluster.node_shapes.NODE]``: a GPU model as typed GRES,
features, its own counts: :class:`NodeShape`), in the partitions of
``[[cluster.partitions]]`` (:class:`PartitionSpec`). With ``nodes = 0``, this
host is the only node, at 127.0.0.1, with untyped GPUs, in ``[slurm]
partition`` alone.

The network: the bridge ``[cluster] bridge`` holds NETWORK.1 (this host, where
slurmctld and the hub's API listen for the nodes); node nI is NETWORK.(I+1).
The node names are added to /etc/hosts (a marked block, :func:`hosts_text`),
so the hub, the proxy and every node resolve them. Files and users are shared
with the host (one filesystem, NSS through nslcd's socket, munge's socket), as
on a cluster with a shared /home.

The configuration lives in /etc/slurm, where the commands look by default, so
sinfo, squeue, scontrol, sbatch and sacct work for every user with no extra
environment. Each file is rendered from deploy/templates/slurm/ (a
:class:`string.Template`; its lines starting with ``##`` are notes left out)
and starts with :data:`MARKER`: a file without it was not written by us and is
never replaced (deploy/purge.sh removes only files holding it).

Accounting: slurmdbd keeps the jobs in MariaDB (database slurm_acct_db, user
slurm@localhost), so ``sacct`` tells how a job ended, and a job's TRES include
its GPUs (gres/gpu=N: Slurm accepts AccountingStorageTRES=gres/gpu only with
slurmdbd). mariadbd runs as mysql on /var/lib/mysql, with its own options
file (/etc/mysql/portal-slurm.cnf), and listens on its Unix socket only
(skip-networking). The password of slurm@localhost is made once and kept in
/etc/slurm/slurmdbd.password and slurmdbd.conf (both root, 0600).

The nodes' state as Slurm reports it (``sinfo``, ``scontrol show node``) is
read here too: :func:`node_takes_jobs`, :func:`node_to_resume`,
:func:`gres_ok`, :func:`slurmd_start_time`.

GPUs: each node's devices are /dev/portal-gpu/NODE/gpu0..N-1, major 195 like
NVIDIA's (a node's own /dev/nvidiaN on a real cluster), and like them 0666:
the devices cgroup (ConstrainDevices) is what keeps a job to its own.
"""

import re
import shlex
import string
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .slurm_accounts import CLUSTER, QOS, SetupError, check_table, slurm_name

TEMPLATES = Path(__file__).resolve().parent / "templates" / "slurm"

# Marks the files we write; deploy/purge.sh matches it too.
MARKER = "# Written by deploy/slurm.sh of the Data Scientist Portal."

SLURM_ETC = "/etc/slurm"
SLURM_CONF = f"{SLURM_ETC}/slurm.conf"
SLURMDBD_CONF = f"{SLURM_ETC}/slurmdbd.conf"
GRES_CONF = f"{SLURM_ETC}/gres.conf"
CGROUP_CONF = f"{SLURM_ETC}/cgroup.conf"
JOB_CONTAINER_CONF = f"{SLURM_ETC}/job_container.conf"
DB_PASS_FILE = f"{SLURM_ETC}/slurmdbd.password"  # root, 0600; never in the repository
RUN_DIR = "/run/slurm"
LOG_DIR = "/var/log/slurm"
SPOOL_DIR = "/var/spool/slurmd"
DBD_PORT = 6819
GPU_DEV = "/dev/portal-gpu"  # fake GPU character devices: GPU_DEV/NODE/gpu0, 1, ...
GPU_MAJOR = 195
MYSQL_RUN = "/run/mysqld"
MYSQL_CNF = "/etc/mysql/portal-slurm.cnf"
# Every file deploy/slurm.sh writes (config_files), which make purge removes.
FILES = (SLURM_CONF, GRES_CONF, CGROUP_CONF, JOB_CONTAINER_CONF, SLURMDBD_CONF, MYSQL_CNF)
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
DB_PACKAGES = ("slurmdbd", "mariadb-server")

# The paths deploy/slurm.sh uses too: it reads them from `slurm_setup shell`,
# so that a pid file it waits on is the one slurm.conf names.
PATHS = {
    "SLURM_CONF": SLURM_CONF,
    "SLURMDBD_CONF": SLURMDBD_CONF,
    "RUN_DIR": RUN_DIR,
    "CTLD_PID": f"{RUN_DIR}/slurmctld.pid",
    "DBD_PID": f"{RUN_DIR}/slurmdbd.pid",
    "STATE_DIR": "/var/lib/slurm/slurmctld",
    "SPOOL_DIR": SPOOL_DIR,
    "LOG_DIR": LOG_DIR,
    "GPU_DEV": GPU_DEV,
    "MUNGE_PID": "/run/munge/munged.pid",
    "MYSQL_CNF": MYSQL_CNF,
    "MYSQL_DATA": "/var/lib/mysql",
    "MYSQL_RUN": MYSQL_RUN,
    "MYSQL_SOCK": f"{MYSQL_RUN}/mysqld.sock",
    "MYSQL_PID": f"{MYSQL_RUN}/mysqld.pid",
    "MYSQL_LOG": f"{LOG_DIR}/mariadb.log",
}

MUNGE_KEY = "/etc/munge/munge.key"

HOSTS_BEGIN = "# BEGIN portal embedded cluster (deploy/slurm.sh)"
HOSTS_END = "# END portal embedded cluster"


@dataclass(frozen=True)
class NodeShape:
    """One compute node as slurm.conf and gres.conf declare it."""

    name: str
    addr: str
    cpus: int
    mem_mb: int
    gpus: int
    gpu_type: str = ""  # "": untyped GPUs (gres gpu:N)
    features: tuple = ()

    @property
    def gres(self):
        """The node's GRES as slurm.conf names it (and sinfo shows it), "" for none.

        >>> NodeShape("n1", "10.0.0.2", 32, 1024, 4, "v100-sxm2").gres
        'gpu:v100-sxm2:4'
        >>> NodeShape("n1", "10.0.0.2", 32, 1024, 2).gres, NodeShape("n1", "x", 8, 8, 0).gres
        ('gpu:2', '')
        """
        if self.gpus <= 0:
            return ""
        return f"gpu:{self.gpu_type}:{self.gpus}" if self.gpu_type else f"gpu:{self.gpus}"


@dataclass(frozen=True)
class PartitionSpec:
    """One partition of ``[[cluster.partitions]]``."""

    name: str
    nodes: tuple
    deny_qos: tuple = ()
    cpu_only: bool = False


@dataclass(frozen=True)
class Cluster:
    """What the configuration is rendered from: ``[cluster]``, ``[slurm]`` and the host."""

    login: str  # this host's short name
    nodes: int
    network: str
    bridge: str
    cpus: int
    mem_mb: int
    gpus: int
    partition: str
    max_time: str
    shapes: dict = field(default_factory=dict)  # node name: its [cluster.node_shapes] table
    partitions: tuple = ()  # PartitionSpec; none: [slurm] partition over every node
    cpu_qos: str = ""

    @classmethod
    def from_settings(cls, settings, login):
        c = settings["cluster"]
        partition = settings["slurm"]["partition"]
        cluster = cls(
            login=login,
            nodes=c["nodes"],
            network=c["network"],
            bridge=c["bridge"],
            cpus=c["node_cpus"],
            mem_mb=c["node_mem_mb"],
            gpus=c["node_gpus"],
            partition=partition,
            max_time=c["max_time"],
            shapes=c["node_shapes"],
            partitions=partition_specs(c["partitions"], partition) if c["nodes"] > 0 else (),
            cpu_qos=c["cpu_qos"],
        )
        cluster.node_shapes()  # refuses a shape it cannot use
        cluster.partition_nodes()
        return cluster

    @property
    def host_addr(self):
        """This host on the bridge."""
        return f"{self.network}.1"

    def node_addrs(self):
        """The compute nodes and their addresses: n1..nN at NETWORK.2.., or
        this host alone at 127.0.0.1.

        >>> Cluster("vm", 2, "10.200.0", "br0", 32, 1024, 4, "gpu", "1:00:00").node_addrs()
        {'n1': '10.200.0.2', 'n2': '10.200.0.3'}
        >>> Cluster("vm", 0, "10.200.0", "br0", 32, 1024, 4, "gpu", "1:00:00").node_addrs()
        {'vm': '127.0.0.1'}
        """
        if self.nodes > 0:
            return {f"n{i}": f"{self.network}.{i + 1}" for i in range(1, self.nodes + 1)}
        return {self.login: "127.0.0.1"}

    def node_shapes(self):
        """Each node with its own counts, GPU model and features (those of
        ``[cluster.node_shapes]``, else the ``node_*`` settings). A single
        host takes the ``node_*`` settings alone.

        >>> c = Cluster("vm", 2, "10.0.0", "br0", 32, 1024, 4, "gpu", "1:00:00",
        ...             {"n2": {"gpu_type": "v100-pcie", "gpus": 2, "features": ["pcie"]}})
        >>> [(s.name, s.gres, s.features) for s in c.node_shapes()]
        [('n1', 'gpu:4', ()), ('n2', 'gpu:v100-pcie:2', ('pcie',))]
        """
        addrs = self.node_addrs()
        shapes = self.shapes if self.nodes > 0 else {}
        unknown = sorted(set(shapes) - set(addrs))
        if unknown:
            raise SetupError(
                f"[cluster.node_shapes.{unknown[0]}]: no such node with nodes = {self.nodes}"
                f" (n1 to n{self.nodes}); remove it or raise [cluster] nodes"
            )
        return [node_shape(name, addr, shapes.get(name, {}), self) for name, addr in addrs.items()]

    def partition_nodes(self):
        """``[(PartitionSpec, its nodes as slurm.conf names them)]``: those of
        ``[[cluster.partitions]]``, or, for a single host or none listed,
        ``[slurm] partition`` over every node ("ALL")."""
        if self.nodes <= 0 or not self.partitions:
            return [(PartitionSpec(self.partition, ()), "ALL")]
        addrs = self.node_addrs()
        for spec in self.partitions:
            missing = [n for n in spec.nodes if n not in addrs]
            if missing:
                raise SetupError(
                    f"[[cluster.partitions]] {spec.name}: node {missing[0]} is not one of"
                    f" n1 to n{self.nodes} ([cluster] nodes = {self.nodes})"
                )
        return [(spec, ",".join(spec.nodes)) for spec in self.partitions]

    def gpu_types(self):
        """The GPU models of the nodes, in the order they first appear.

        >>> c = Cluster("vm", 3, "10.0.0", "br0", 32, 1024, 4, "gpu", "1:00:00",
        ...             {n: {"gpu_type": t} for n, t in (("n1", "b"), ("n2", "a"), ("n3", "b"))})
        >>> c.gpu_types()
        ['b', 'a']
        """
        types = [s.gpu_type for s in self.node_shapes() if s.gpu_type and s.gpus > 0]
        return list(dict.fromkeys(types))

    @property
    def ctld_host(self):
        """slurmctld on this host, reached by the nodes at the bridge's address."""
        return f"{self.login}({self.host_addr})" if self.nodes > 0 else self.login

    @property
    def login_addr(self):
        """This host as the nodes reach it (localhost there is the node's own)."""
        return self.host_addr if self.nodes > 0 else "localhost"


SHAPE_KEYS = {"gpu_type": str, "gpus": int, "cpus": int, "mem_mb": int, "features": list}
PARTITION_KEYS = {"name": str, "nodes": list, "deny_qos": list, "cpu_only": bool}


def node_shape(name, addr, table, cluster):
    """The :class:`NodeShape` of node ``name`` from its
    ``[cluster.node_shapes.NAME]`` table (possibly empty) and the defaults."""
    where = f"[cluster.node_shapes.{name}]"
    check_table(where, table, SHAPE_KEYS)
    shape = NodeShape(
        name=name,
        addr=addr,
        cpus=table.get("cpus", cluster.cpus),
        mem_mb=table.get("mem_mb", cluster.mem_mb),
        gpus=table.get("gpus", cluster.gpus),
        gpu_type=slurm_name(f"{where} gpu_type", table["gpu_type"]) if "gpu_type" in table else "",
        features=tuple(slurm_name(f"{where} features", f) for f in table.get("features", ())),
    )
    if shape.cpus < 1 or shape.mem_mb < 1 or shape.gpus < 0:
        raise SetupError(f"{where}: cpus and mem_mb must be 1 or more, gpus 0 or more")
    return shape


def partition_specs(tables, default):
    """``[[cluster.partitions]]`` as :class:`PartitionSpec` s; the one named
    ``default`` ([slurm] partition) must be among them.

    >>> [p.name for p in partition_specs([{"name": "gpu", "nodes": ["n1"]}], "gpu")]
    ['gpu']
    >>> partition_specs([{"name": "cpu", "nodes": ["n1"]}], "gpu")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    deploy.slurm_accounts.SetupError: [slurm] partition = 'gpu' is none of ... (cpu): add it ...
    """
    specs = []
    for table in tables:
        check_table("[[cluster.partitions]]", table, PARTITION_KEYS, ("name", "nodes"))
        name = slurm_name("[[cluster.partitions]] name", table["name"])
        where = f"[[cluster.partitions]] {name}"
        if not table["nodes"]:
            raise SetupError(f"{where}: nodes is empty; name one node at least")
        specs.append(
            PartitionSpec(
                name=name,
                nodes=tuple(slurm_name(f"{where} nodes", n) for n in table["nodes"]),
                deny_qos=tuple(
                    slurm_name(f"{where} deny_qos", q) for q in table.get("deny_qos", ())
                ),
                cpu_only=table.get("cpu_only", False),
            )
        )
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise SetupError(f"[[cluster.partitions]]: a partition is named twice ({', '.join(names)})")
    if specs and default not in names:
        raise SetupError(
            f"[slurm] partition = {default!r} is none of [[cluster.partitions]]"
            f" ({', '.join(names)}): add it there, or name one of them"
        )
    return tuple(specs)


def check_cluster(c):
    """Refuse the ``[cluster]`` settings that name the nodes' network before
    any of them reaches ip(8), or that no slurm.conf can hold.

    >>> check_cluster({"nodes": 2, "network": "10.200.0", "bridge": "portal0", "node_cpus": 8})
    >>> check_cluster({"nodes": 2, "network": "10.300.0", "bridge": "portal0", "node_cpus": 8})
    Traceback (most recent call last):
    ...
    deploy.slurm_accounts.SetupError: [cluster] network = '10.300.0': 300 is not 0 to 255
    """
    nodes = c["nodes"]
    if not 0 <= nodes <= 253:
        raise SetupError(f"[cluster] nodes = {nodes}: use 0 to 253")
    if c["node_cpus"] < 1:
        raise SetupError(f"[cluster] node_cpus = {c['node_cpus']}: use 1 or more")
    if nodes == 0:
        return
    network = c["network"]
    m = re.fullmatch(r"([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})", network)
    if not m:
        raise SetupError(
            f"[cluster] network = '{network}': use the first three numbers of a /24,"
            ' such as "10.200.0"'
        )
    for part in m.groups():
        if int(part) > 255:
            raise SetupError(f"[cluster] network = '{network}': {part} is not 0 to 255")
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,14}", c["bridge"]):
        raise SetupError(
            f"[cluster] bridge = '{c['bridge']}': use a link name of up to 15 letters,"
            " digits, _ or -"
        )


def template(name, **values):
    """deploy/templates/slurm/NAME with ``values`` substituted, its ``##`` notes left out."""
    text = (TEMPLATES / name).read_text()
    kept = [line for line in text.split("\n") if not line.startswith("##")]
    return string.Template("\n".join(kept)).substitute(values)


def config_file(name, **values):
    """A configuration file: the marker, then the template; one final newline."""
    return f"{MARKER}\n{template(name, **values)}".rstrip("\n") + "\n"


def node_line(shape):
    """The node's slurm.conf line.

    >>> print(node_line(NodeShape("n3", "10.0.0.4", 16, 98304, 2, "v100-sxm2", ("v100", "nv"))))
    ... # doctest: +NORMALIZE_WHITESPACE
    NodeName=n3 NodeAddr=10.0.0.4 CPUs=16 Sockets=1 CoresPerSocket=16 ThreadsPerCore=1
    RealMemory=98304 Gres=gpu:v100-sxm2:2 Features=v100,nv State=UNKNOWN
    """
    gres = f" Gres={shape.gres}" if shape.gres else ""
    features = f" Features={','.join(shape.features)}" if shape.features else ""
    return (
        f"NodeName={shape.name} NodeAddr={shape.addr} CPUs={shape.cpus} Sockets=1"
        f" CoresPerSocket={shape.cpus} ThreadsPerCore=1 RealMemory={shape.mem_mb}{gres}{features}"
        " State=UNKNOWN"
    )


def partition_line(spec, nodes, cluster):
    """The partition's slurm.conf line: the default one is [slurm] partition;
    a cpu_only one runs every job under the partition QOS cpu_qos, the
    others deny cpu_qos (and their deny_qos).

    >>> c = Cluster("vm", 2, "10.0.0", "br0", 32, 1024, 4, "gpu", "1:00:00", cpu_qos="cpu")
    >>> partition_line(PartitionSpec("gpu", ("n1", "n2")), "n1,n2", c)[:52]
    'PartitionName=gpu Nodes=n1,n2 Default=YES MaxTime=1:'
    >>> partition_line(PartitionSpec("gpu", ("n1", "n2")), "n1,n2", c)[52:]
    '00:00 State=UP OverSubscribe=NO DenyQos=cpu'
    >>> partition_line(PartitionSpec("pcie", ("n2",), ("nlp",)), "n2", c)
    'PartitionName=pcie Nodes=n2 MaxTime=1:00:00 State=UP OverSubscribe=NO DenyQos=cpu,nlp'
    >>> partition_line(PartitionSpec("cpu", ("n1",), (), True), "n1", c)
    'PartitionName=cpu Nodes=n1 MaxTime=1:00:00 State=UP OverSubscribe=NO QOS=cpu'
    """
    default = " Default=YES" if spec.name == cluster.partition else ""
    line = (
        f"PartitionName={spec.name} Nodes={nodes}{default} MaxTime={cluster.max_time}"
        " State=UP OverSubscribe=NO"
    )
    if spec.cpu_only and cluster.cpu_qos:
        return f"{line} QOS={cluster.cpu_qos}"
    denied = [q for q in (cluster.cpu_qos, *spec.deny_qos) if q]
    return f"{line} DenyQos={','.join(dict.fromkeys(denied))}" if denied else line


def accounting_tres(cluster):
    """AccountingStorageTRES: every job's GPUs, and each model's.

    >>> shapes = {"n1": {"gpu_type": "a"}}
    >>> c = Cluster("vm", 2, "10.0.0", "br0", 32, 1024, 4, "gpu", "1:00:00", shapes)
    >>> accounting_tres(c)
    'gres/gpu,gres/gpu:a'
    """
    return ",".join(["gres/gpu", *(f"gres/gpu:{t}" for t in cluster.gpu_types())])


def slurm_conf(cluster):
    partitions = [partition_line(spec, nodes, cluster) for spec, nodes in cluster.partition_nodes()]
    return config_file(
        "slurm.conf",
        cluster=CLUSTER,
        ctld_host=cluster.ctld_host,
        ctld_pid=PATHS["CTLD_PID"],
        run_dir=RUN_DIR,
        state_dir=PATHS["STATE_DIR"],
        spool_dir=SPOOL_DIR,
        log_dir=LOG_DIR,
        def_mem_per_cpu=cluster.mem_mb // cluster.cpus,
        qos=QOS,
        login_addr=cluster.login_addr,
        dbd_port=DBD_PORT,
        tres=accounting_tres(cluster),
        node_lines="\n".join(node_line(shape) for shape in cluster.node_shapes()),
        partition_lines="\n".join(partitions),
    )


def gres_line(shape):
    """The node's gres.conf line (its device files), "" without GPUs.

    >>> gres_line(NodeShape("n1", "x", 32, 1024, 4, "v100-sxm2"))
    'NodeName=n1 Name=gpu Type=v100-sxm2 File=/dev/portal-gpu/n1/gpu[0-3]'
    >>> gres_line(NodeShape("n1", "x", 32, 1024, 1)), gres_line(NodeShape("n1", "x", 32, 1024, 0))
    ('NodeName=n1 Name=gpu File=/dev/portal-gpu/n1/gpu[0-0]', '')
    """
    if shape.gpus <= 0:
        return ""
    kind = f" Type={shape.gpu_type}" if shape.gpu_type else ""
    return (
        f"NodeName={shape.name} Name=gpu{kind} File={GPU_DEV}/{shape.name}/gpu[0-{shape.gpus - 1}]"
    )


def gres_conf(cluster):
    node_lines = [line for line in map(gres_line, cluster.node_shapes()) if line]
    return config_file("gres.conf", node_lines="\n".join(node_lines))


def cgroup_conf(cluster):
    return config_file("cgroup.conf")


def job_container_conf(cluster):
    node_lines = [
        f"NodeName={node} BasePath={SPOOL_DIR}/{node}/job_containers"
        for node in cluster.node_addrs()
    ]
    return config_file("job_container.conf", node_lines="\n".join(node_lines))


def slurmdbd_conf(password):
    return config_file(
        "slurmdbd.conf",
        dbd_port=DBD_PORT,
        dbd_pid=PATHS["DBD_PID"],
        log_dir=LOG_DIR,
        db_name=DB_NAME,
        db_user=DB_USER,
        password=password,
    )


def mysql_cnf():
    return config_file(
        "portal-slurm.cnf",
        mysql_data=PATHS["MYSQL_DATA"],
        mysql_sock=PATHS["MYSQL_SOCK"],
        mysql_pid=PATHS["MYSQL_PID"],
        mysql_log=PATHS["MYSQL_LOG"],
    )


def db_init_sql(password):
    """The SQL that creates the database and its user, for the mariadb client's stdin."""
    return template("db-init.sql", db_name=DB_NAME, db_user=DB_USER, password=password)


@dataclass(frozen=True)
class ConfigFile:
    path: str
    text: str
    mode: int
    restarts: str  # the daemons that read it: "slurm", "slurmdbd" or "mariadb"


def config_files(cluster, password):
    """Every file we write, in the order they are written."""
    return [
        ConfigFile(SLURM_CONF, slurm_conf(cluster), 0o644, "slurm"),
        ConfigFile(GRES_CONF, gres_conf(cluster), 0o644, "slurm"),
        ConfigFile(CGROUP_CONF, cgroup_conf(cluster), 0o644, "slurm"),
        ConfigFile(JOB_CONTAINER_CONF, job_container_conf(cluster), 0o644, "slurm"),
        ConfigFile(SLURMDBD_CONF, slurmdbd_conf(password), 0o600, "slurmdbd"),
        ConfigFile(MYSQL_CNF, mysql_cnf(), 0o644, "mariadb"),
    ]


@dataclass(frozen=True)
class Entry:
    """A folder or file the daemons need, with its owner and mode."""

    path: str
    mode: int
    owner: str | None = None  # "user:group"; None: as made (root), or as it is
    kind: str = "dir"  # "dir": made if missing; "file": exists; "log": made empty if missing


def layout(cluster):
    """What the daemons need before they start, in order: applied at every
    start that starts a daemon (a "log" entry only when it is made). The
    spool folders are 0755, as slurmd makes them: jobs exec their script from
    there as their user (0700, set on a start that left slurmd running, made
    every job fail with "execve(): .../slurm_script: Permission denied")."""
    return [
        Entry("/etc/munge", 0o700, "munge:munge"),
        Entry(MUNGE_KEY, 0o400, "munge:munge", "file"),
        Entry("/run/munge", 0o755, "munge:munge"),
        Entry("/var/log/munge", 0o700, "munge:munge"),
        Entry("/var/lib/munge", 0o711, "munge:munge"),
        Entry(MYSQL_RUN, 0o755, "mysql:mysql"),
        Entry(LOG_DIR, 0o755, None),
        Entry(PATHS["MYSQL_LOG"], 0o640, "mysql:adm", "log"),
        Entry(PATHS["MYSQL_DATA"], 0o755, "mysql:mysql"),
        Entry(RUN_DIR, 0o755, None),
        Entry(PATHS["STATE_DIR"], 0o700, None),
        Entry(SPOOL_DIR, 0o755, None),
        *(Entry(f"{SPOOL_DIR}/{node}", 0o755, None) for node in cluster.node_addrs()),
    ]


def unchanged(current, text):
    """A file holding ``current`` needs no rewrite to hold ``text`` (final
    newlines aside, as the shell compared them)."""
    return current is not None and current.rstrip("\n") == text.rstrip("\n")


def ours(current):
    """The file's text holds :data:`MARKER` as a line of its own."""
    return MARKER in current.split("\n")


def _lines(text):
    """The lines of a file as awk and grep read them."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def hosts_text(current, nodes):
    """/etc/hosts holding ``current`` with our marked block listing ``nodes``
    ({name: address}; none: no block), or None when it already does.

    >>> hosts = "127.0.0.1 localhost\\n"
    >>> print(hosts_text(hosts, {"n1": "10.0.0.2"}), end="")
    127.0.0.1 localhost
    # BEGIN portal embedded cluster (deploy/slurm.sh)
    10.0.0.2 n1
    # END portal embedded cluster
    >>> hosts_text(hosts_text(hosts, {"n1": "10.0.0.2"}), {}) == hosts
    True
    >>> hosts_text(hosts, {}) is None
    True
    """
    lines = _lines(current)
    begins = [i for i, line in enumerate(lines) if line == HOSTS_BEGIN]
    ends = [i for i, line in enumerate(lines) if line == HOSTS_END]
    # Exactly one BEGIN before one END, or none of either: anything else was
    # edited by hand, and a rewrite could drop the lines after it.
    if (begins or ends) and (len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]):
        raise SetupError(
            f"/etc/hosts: the lines between '{HOSTS_BEGIN}' and '{HOSTS_END}' were edited;"
            " put them back as one block (or remove both) and start again"
        )
    kept = lines[: begins[0]] + lines[ends[0] + 1 :] if begins else lines
    new = "\n".join(kept).rstrip("\n")
    if nodes:
        block = [f"{addr} {name}" for name, addr in nodes.items()]
        new += "\n" + "\n".join([HOSTS_BEGIN, *block, HOSTS_END])
    return None if new == current.rstrip("\n") else new + "\n"


def keep_gpu_file(name, gpus):
    """A node's device file NAME stays with ``gpus`` GPUs configured.

    >>> [keep_gpu_file(n, 2) for n in ("gpu0", "gpu1", "gpu2", "gpux", "gpu")]
    [True, True, False, False, False]
    """
    index = name.removeprefix("gpu")
    return index.isascii() and index.isdigit() and int(index) < gpus


def gres_ok(shown, gres):
    """``sinfo -h -N -n NODE -O Gres:40`` shows the node's ``gres``
    (:attr:`NodeShape.gres`); sinfo lists a node once per partition.

    >>> [gres_ok(s, "gpu:4") for s in ("gpu:4      \\n", "gpu:4(S:0)\\n", "gpu:2\\n")]
    [True, True, False]
    >>> gres_ok("gpu:v100-sxm2:4(S:0)\\ngpu:v100-sxm2:4(S:0)\\n", "gpu:v100-sxm2:4")
    True
    >>> [gres_ok(s, "gpu:v100-sxm2:4") for s in ("gpu:v100-pcie:4(S:0)\\n", "gpu:4\\n", "")]
    [False, False, False]
    """
    lines = [line.strip() for line in shown.split("\n") if line.strip()]
    return bool(lines) and all(line == gres or line.startswith(f"{gres}(") for line in lines)


def slurmd_start_time(shown):
    """The epoch of SlurmdStartTime in ``scontrol -o show node`` output (local
    time, as slurmctld prints it), or None when it has none.

    >>> import time
    >>> slurmd_start_time("NodeName=n1 SlurmdStartTime=None State=DOWN") is None
    True
    >>> t = slurmd_start_time("NodeName=n1 SlurmdStartTime=2024-11-25T02:38:00 LastBusy")
    >>> time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))
    '2024-11-25T02:38:00'
    """
    m = re.search(r"SlurmdStartTime=(\S+)", shown)
    try:
        return datetime.fromisoformat(m.group(1)).timestamp() if m else None
    except ValueError:  # None, Unknown
        return None


# "reserved": idle in an active reservation (it takes the reservation's jobs);
# "planned": idle, held by the backfill scheduler for a pending job.
TAKES_JOBS = ("idle", "mixed", "allocated", "completing", "reserved", "planned")


def node_takes_jobs(state):
    """A node in ``state`` (``sinfo -o %T``) takes jobs.

    >>> [node_takes_jobs(s) for s in ("idle", "mixed", "reserved", "down*", "drained", "")]
    [True, True, True, False, False, False]
    """
    return state in TAKES_JOBS


def node_to_resume(state):
    """A node left in ``state`` by an unclean stop, to put back in service
    once its slurmd runs again.

    >>> [node_to_resume(s) for s in ("down", "down~", "drained", "fail", "down*", "idle")]
    [True, True, True, True, False, False]
    """
    return "drain" in state or state in ("down", "down~") or state.startswith("fail")


def shell_facts(cluster):
    """deploy/slurm.sh's paths and nodes, as lines for its ``eval``."""
    nodes = cluster.node_addrs()
    lines = [f"{name}={shlex.quote(value)}" for name, value in PATHS.items()]
    lines.append(f"NODES={cluster.nodes}")
    lines.append(f"BRIDGE={shlex.quote(cluster.bridge)}")
    lines.append(f"HOST_ADDR={shlex.quote(cluster.host_addr)}")
    lines.append(f"NODE_NAMES=({' '.join(shlex.quote(n) for n in nodes)})")
    addrs = " ".join(f"[{shlex.quote(n)}]={shlex.quote(a)}" for n, a in nodes.items())
    lines.append(f"declare -A NODE_ADDR=({addrs})")
    return "\n".join(lines)
