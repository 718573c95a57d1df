"""Set up the embedded Slurm cluster's files and accounting, for deploy/slurm.sh.

Run with Debian's /usr/bin/python3 (standard library only) from the
repository's root, as deploy/slurm.sh does::

    python3 -m deploy.slurm_setup --help          # the commands
    python3 -m deploy.slurm_setup render /tmp/x   # the files it would write, to compare
    python3 -m deploy.slurm_setup sync-users --dry-run   # the sacctmgr commands it would run

The layer between the pure functions (deploy/slurm_conf.py: the files;
deploy/slurm_accounts.py: the sacctmgr changes) and the host: it reads the
state, writes the files and runs the commands. ``--dry-run`` prints the
commands it would run, one a line, and runs none. Errors are logged as
deploy/slurm.sh logs them, and exit 1.
"""

import argparse
import glob
import os
import secrets
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

from portal.settings import SettingsError, load
from portal.slurm.parse import expand_hostlist

from .base import logger, replace_file
from .slurm_accounts import (
    CLUSTER,
    QOS_FORMAT,
    SetupError,
    group_members,
    hub_uid_invalid,
    lab_accounts,
    parse_reservations,
    plan_admin_level,
    plan_qos,
    plan_qos_names,
    plan_registration,
    plan_removal,
    plan_reservation,
    plan_users,
    portal_account,
    portal_groups,
    qos_specs,
    reservations,
)
from .slurm_conf import (
    DB_PACKAGES,
    DB_PASS_FILE,
    DB_USER,
    GPU_DEV,
    GPU_MAJOR,
    LOG_DIR,
    MUNGE_KEY,
    MYSQL_CNF,
    SLURM_ETC,
    Cluster,
    check_cluster,
    config_files,
    db_init_sql,
    gres_ok,
    hosts_text,
    keep_gpu_file,
    layout,
    node_takes_jobs,
    node_to_resume,
    ours,
    shell_facts,
    slurmd_start_time,
    unchanged,
)

HOSTS = "/etc/hosts"
UNRESOLVED = 3  # sync-users: a group did not resolve; nothing was changed


log = logger("slurm")


def output(argv, timeout=None):
    """The stdout of ``argv``, or None when it fails (its stderr discarded)."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def sacctmgr_list(*args):
    """``sacctmgr list ARGS``, parsable, no header; None when slurmdbd does not answer."""
    return output(["sacctmgr", "-n", "-P", "list", *args], timeout=10)


class Runner:
    """Runs the planned changes, or prints them (``dry_run``)."""

    def __init__(self, dry_run=False):
        self.dry_run = dry_run

    def apply(self, change):
        if change is None:
            return
        if self.dry_run:
            print(shlex.join(change.argv))
            return
        log(change.message)
        if subprocess.run(change.argv, stdout=subprocess.DEVNULL).returncode == 0:
            return
        if change.fatal:
            raise SetupError(change.failure)
        log(f"error: {change.failure}")


# ---------------------------------------------------------------- files


def write_if_changed(path, text, mode=0o644):
    """Write ``path`` (root, ``mode``) when it differs; True if written. A
    file without our marker is never replaced; nobody can read the new one
    before its mode is set."""
    path = Path(path)
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = None
    if unchanged(current, text):
        return False
    if current is not None and not ours(current):
        raise SetupError(
            f"{path} was not written by this script;"
            " move it away to let the embedded cluster use its own"
        )
    replace_file(path, text, mode)
    log(f"wrote {path}")
    return True


def ensure_db_password():
    """The password of the database user: made once, kept in a root-only file."""
    path = Path(DB_PASS_FILE)
    if path.exists() and path.stat().st_size > 0:
        return
    replace_file(path, secrets.token_urlsafe(24) + "\n")
    log(f"new password of {DB_USER}@localhost in {DB_PASS_FILE}")


def db_password():
    return Path(DB_PASS_FILE).read_text().rstrip("\n")


def write_config(cluster):
    """Write every file; print three flags, 1 where slurmctld and slurmd,
    slurmdbd or mariadbd read a file that changed."""
    for folder in (SLURM_ETC, os.path.dirname(MYSQL_CNF)):
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, 0o755)
    ensure_db_password()
    files = config_files(cluster, db_password())
    changed = dict.fromkeys(("slurm", "slurmdbd", "mariadb"), 0)
    for file in files:
        if write_if_changed(file.path, file.text, file.mode):
            changed[file.restarts] = 1
    print(*changed.values())


def render(cluster, folder):
    """The files of :func:`write_config` into ``folder``, named as in /etc."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    password = db_password() if os.access(DB_PASS_FILE, os.R_OK) else "PASSWORD"
    for file in config_files(cluster, password):
        target = folder / os.path.basename(file.path)
        target.write_text(file.text)
        target.chmod(file.mode)


def make_gpu_devices(cluster, root=GPU_DEV):
    """Each node's GPU devices, root/NODE/gpu0..N-1 (char, 195:I, 0666);
    those of nodes or GPUs no longer configured go."""
    gpus = {shape.name: shape.gpus for shape in cluster.node_shapes()}
    nodes = list(gpus)
    for old in glob.glob(glob.escape(root) + "[0-9]*"):  # the single-host layout of old
        os.unlink(old)
    top = Path(root)
    for entry in top.iterdir() if top.is_dir() else ():
        if entry.name.startswith(".") or entry.name in nodes:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for node in nodes:
        folder = top / node
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
        for dev in folder.glob("gpu*"):
            if not keep_gpu_file(dev.name, gpus[node]):
                dev.unlink()
        for i in range(gpus[node]):
            dev, rdev = folder / f"gpu{i}", os.makedev(GPU_MAJOR, i)
            try:
                st = os.stat(dev)
            except FileNotFoundError:
                st = None
            if st is None or not stat.S_ISCHR(st.st_mode) or st.st_rdev != rdev:
                dev.unlink(missing_ok=True)
                os.mknod(dev, stat.S_IFCHR | 0o666, rdev)
            dev.chmod(0o666)


def ensure_layout(cluster):
    """The munge key (made once) and the folders of :func:`layout`."""
    key = Path(MUNGE_KEY)
    if not (key.exists() and key.stat().st_size > 0):
        log(f"creating {MUNGE_KEY}")
        os.makedirs(key.parent, mode=0o700, exist_ok=True)
        if shutil.which("mungekey"):
            subprocess.run(
                ["mungekey", "--create", f"--keyfile={MUNGE_KEY}", "--force"], check=True
            )
        else:
            key.write_bytes(os.urandom(1024))
    for entry in layout(cluster):
        path = Path(entry.path)
        if entry.kind == "log":
            if path.exists():
                continue
            path.touch()
        elif entry.kind == "dir":
            path.mkdir(parents=True, exist_ok=True)
        if entry.owner:
            user, group = entry.owner.split(":")
            shutil.chown(path, user, group)
        path.chmod(entry.mode)


def ensure_db_packages():
    """slurmdbd and mariadb-server, installed if missing (deploy/packages.sh
    lists them too). Their own services are never used: deploy/slurm.sh runs
    the daemons."""
    missing = [
        pkg
        for pkg in DB_PACKAGES
        if "install ok installed" not in (output(["dpkg-query", "-W", "-f=${Status}", pkg]) or "")
    ]
    if not missing:
        return
    log(f"installing {' '.join(missing)}")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        stdout=subprocess.DEVNULL,
        check=True,
    )


def update_hosts(cluster, remove=False):
    """/etc/hosts with our block of node names, rewritten in place (it may be
    a bind mount), only when it differs."""
    nodes = {} if remove or cluster.nodes <= 0 else cluster.node_addrs()
    with open(HOSTS) as f:
        new = hosts_text(f.read(), nodes)
    if new is None:
        return
    with open(HOSTS, "w") as f:
        f.write(new)
    log("updated the node names in /etc/hosts")


# ---------------------------------------------------------------- accounting


def register(settings):
    """The cluster, the accounts and the QOS names, added once; before
    slurmctld starts, whose slurm.conf names QOS (a partition's, DenyQos)."""
    cluster = settings["cluster"]
    runner = Runner()
    clusters = sacctmgr_list("cluster", CLUSTER, "format=cluster") or ""
    accounts = sacctmgr_list("account", "format=account")
    names = sacctmgr_list("qos", "format=name")
    if accounts is None or names is None:
        raise SetupError("slurmdbd does not answer (sacctmgr list account, qos)")
    wanted = [portal_account(cluster).name] + [a.name for a in lab_accounts(cluster)]
    for change in plan_registration(clusters, accounts, wanted):
        runner.apply(change)
    for change in plan_qos_names(names, qos_specs(cluster)):
        runner.apply(change)


def ensure_qos(settings, runner):
    """Every QOS with its limits: portal, cpu_qos, the lab accounts'."""
    listing = sacctmgr_list("qos", QOS_FORMAT)
    if listing is None:
        raise SetupError("slurmdbd does not answer (sacctmgr list qos)")
    for spec in qos_specs(settings["cluster"]):
        runner.apply(plan_qos(listing, spec))


class Groups:
    """``getent group`` of each group, asked once: its plain user names, or
    None when it does not resolve (logged, with the names left out)."""

    def __init__(self):
        self.seen = {}

    def members(self, group):
        if group not in self.seen:
            line = output(["getent", "group", group])
            if line is None:
                log(f"error: group '{group}' does not resolve (nslcd and slapd up?)")
                self.seen[group] = None
            else:
                names, odd = group_members(line)
                if odd:
                    log(f"left out of group '{group}', not plain user names: {' '.join(odd)}")
                self.seen[group] = names
        return self.seen[group]


def sync_account(spec, members, runner):
    """The account's users = ``members``, its QOS and fairshare as ``spec``
    says; who left is removed once their jobs in it have ended."""
    listing = sacctmgr_list(
        "assoc",
        f"account={spec.name}",
        f"cluster={CLUSTER}",
        "format=user,qos,defaultqos,fairshare",
    )
    if listing is None:
        raise SetupError("slurmdbd does not answer (sacctmgr list assoc)")
    plan = plan_users(members, listing, spec)
    runner.apply(plan.account)
    runner.apply(plan.add)
    if plan.leaving:
        active = output(["squeue", "-h", "-A", spec.name, "-o", "%u"]) or ""
        busy, change = plan_removal(plan.leaving, active, spec.name)
        for name in busy:
            log(
                f"{name} is no longer a member but has active jobs in account {spec.name}:"
                " removed from it once they end"
            )
        runner.apply(change)


def sync_users(settings, runner):
    """The accounts' users: the account portal's are root, the hub's account
    and the members of the portal's groups; a lab account's, root, the hub's
    account and the members of its group. An account one of whose groups does
    not resolve is left as it is, and :data:`UNRESOLVED` returned."""
    cluster, hub = settings["cluster"], settings["hub"]["user"]
    groups, rc = Groups(), 0
    service = {"root", hub} - {""}
    portal = [groups.members(g) for g in portal_groups(settings["ldap"]["allowed_groups"])]
    if None in portal:
        log("associations of account portal left as they are")
        rc = UNRESOLVED
    else:
        sync_account(portal_account(cluster), service.union(*portal), runner)
    if hub:
        level = sacctmgr_list("user", hub, "format=adminlevel")
        if level is None:
            raise SetupError("slurmdbd does not answer (sacctmgr list user)")
        runner.apply(plan_admin_level(hub, level))
    for spec in lab_accounts(cluster):
        members = groups.members(spec.group)
        if members is None:
            log(f"associations of account {spec.name} left as they are")
            rc = UNRESOLVED
            continue
        sync_account(spec, service.union(members), runner)
    return rc


def sync_reservations(settings, runner):
    """Each reservation for the members of its group (slurmctld up). Returns
    :data:`UNRESOLVED` when a group does not resolve (that one left as it is)."""
    specs = reservations(settings["cluster"])
    if not specs:
        return 0
    shown = output(["scontrol", "-o", "show", "reservation"], timeout=10)
    if shown is None:
        raise SetupError("slurmctld does not answer (scontrol show reservation)")
    groups, rc = Groups(), 0
    for spec in specs:
        members = groups.members(spec.group)
        if members is None:
            log(f"reservation {spec.name} left as it is")
            rc = UNRESOLVED
            continue
        runner.apply(plan_reservation(parse_reservations(shown), spec, members, expand_hostlist))
    return rc


def ensure_limits(settings, script):
    """The QOS, then the accounts' users. A group that does not resolve
    leaves those users as they were, and Slurm up."""
    ensure_qos(settings, Runner())
    if sync_users(settings, Runner()) == UNRESOLVED:
        log(
            "warning: associations not synchronised;"
            f" run {script} sync-users once the groups resolve"
        )


def check_gres(cluster):
    """Each node shows the GPUs (of the model) it is configured with."""
    for shape in cluster.node_shapes():
        if not shape.gres:
            continue
        shown = output(["sinfo", "-h", "-N", "-n", shape.name, "-O", "Gres:40"]) or ""
        if not gres_ok(shown, shape.gres):
            raise SetupError(
                f"node {shape.name} shows gres '{' '.join(shown.split())}', expected {shape.gres}"
                f" (see {LOG_DIR}/slurmd-{shape.name}.log)"
            )


def node_state(node):
    """The node's state as sinfo prints it: idle, mixed, allocated, down*..."""
    return (output(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]) or "").split("\n")[0]


def nodes_ready(cluster, wait=0):
    """Every node takes jobs. With ``wait`` seconds, waits that long for each
    node, putting one that is down or drained back in service."""
    for node in cluster.node_addrs():
        deadline = time.monotonic() + wait
        while not node_takes_jobs(state := node_state(node)):
            if not wait:
                return False
            if node_to_resume(state):
                log(f"node {node} is {state}, resuming it")
                subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"])
            if time.monotonic() >= deadline:
                raise SetupError(
                    f"node {node} is '{state or 'unknown'}', not idle, after {wait}s"
                    f" (see {LOG_DIR}/slurmd-{node}.log)"
                )
            time.sleep(0.2)
    return True


def slurmd_registered(node, since):
    """The node's slurmd registered having started at ``since`` (epoch) or
    later (slurmctld may still show the old registration for a while)."""
    shown = output(["scontrol", "-o", "show", "node", node]) or ""
    started = slurmd_start_time(shown)
    return started is not None and started >= since


def hub_uid(settings):
    hub = settings["hub"]["user"]
    if not hub:
        return
    assoc_mgr = output(["scontrol", "show", "assoc_mgr", f"users={hub}", "flags=users"])
    if not hub_uid_invalid(assoc_mgr or "", hub):
        return
    log(f"slurmctld holds {hub} with no uid: scontrol reconfigure")
    if subprocess.run(["scontrol", "reconfigure"]).returncode != 0:
        raise SetupError("scontrol reconfigure failed")


# ---------------------------------------------------------------- command line


def parser():
    p = argparse.ArgumentParser(
        prog="python3 -m deploy.slurm_setup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in [
        ("shell", "deploy/slurm.sh's paths and nodes, as lines for its eval"),
        ("check", "refuse [cluster] settings that cannot work, naming the fix"),
        ("packages", "install slurmdbd and mariadb-server if missing"),
        ("gpu-devices", "the nodes' GPU device files, /dev/portal-gpu/NODE/gpuI"),
        ("layout", "the daemons' folders and the munge key, owners and modes"),
        ("write-config", "write the files that differ; print SLURM DBD DB, 1 if changed"),
        ("db-sql", "the SQL of the database and its user, for mariadb's stdin"),
        ("register", "the cluster, the accounts and the QOS names in slurmdbd, once"),
        ("check-gres", "each node shows the GPUs it is configured with"),
        ("hub-uid", "scontrol reconfigure if slurmctld holds the hub with no uid"),
    ]:
        sub.add_parser(name, help=text, description=text)
    cmd = sub.add_parser("hosts", help="the node names in /etc/hosts (a marked block)")
    cmd.add_argument("--remove", action="store_true", help="remove the block")
    cmd = sub.add_parser("render", help="the files write-config writes, into FOLDER")
    cmd.add_argument("folder")
    cmd = sub.add_parser("ensure-limits", help="ensure-qos, then sync-users")
    cmd.add_argument("--script", default="deploy/slurm.sh", help="named in a warning")
    for name, text in [
        ("ensure-qos", "every QOS with the [cluster] qos_max_* limits"),
        (
            "sync-users",
            "the accounts' users, then the reservations'; exit 3 if a group does not resolve",
        ),
        (
            "reservations",
            "each [[cluster.reservations]] for its group's members (slurmctld"
            " up); exit 3 if a group does not resolve",
        ),
    ]:
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("--dry-run", action="store_true", help="print the commands only")
    cmd = sub.add_parser("nodes-ready", help="exit 0 if every node takes jobs")
    cmd.add_argument("--wait", type=int, default=0, help="seconds per node, resuming")
    cmd = sub.add_parser("registered", help="exit 0 if NODE's slurmd registered since EPOCH")
    cmd.add_argument("node")
    cmd.add_argument("since", type=int, metavar="EPOCH")
    return p


def run(args, settings):
    cluster = Cluster.from_settings(settings, socket.gethostname().split(".")[0])
    match args.command:
        case "shell":
            print(shell_facts(cluster))
        case "check":
            check_cluster(settings["cluster"])
            qos_specs(settings["cluster"])
            reservations(settings["cluster"])
        case "gpu-devices":
            make_gpu_devices(cluster)
        case "layout":
            ensure_layout(cluster)
        case "hosts":
            update_hosts(cluster, remove=args.remove)
        case "write-config":
            write_config(cluster)
        case "render":
            render(cluster, args.folder)
        case "db-sql":
            print(db_init_sql(db_password()), end="")
        case "register":
            register(settings)
        case "ensure-qos":
            ensure_qos(settings, Runner(args.dry_run))
        case "sync-users":
            rc = sync_users(settings, Runner(args.dry_run))
            return sync_reservations(settings, Runner(args.dry_run)) or rc
        case "reservations":
            return sync_reservations(settings, Runner(args.dry_run))
        case "ensure-limits":
            ensure_limits(settings, args.script)
        case "nodes-ready":
            return 0 if nodes_ready(cluster, args.wait) else 1
        case "registered":
            return 0 if slurmd_registered(args.node, args.since) else 1
        case "packages":
            ensure_db_packages()
        case "check-gres":
            check_gres(cluster)
        case "hub-uid":
            hub_uid(settings)
    return 0


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return run(args, load())
    except (SettingsError, SetupError) as e:
        log(f"error: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
