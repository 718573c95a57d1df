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

from .base import logger, replace_file
from .slurm_accounts import (
    ACCOUNT,
    CLUSTER,
    QOS,
    SetupError,
    group_members,
    hub_uid_invalid,
    plan_admin_level,
    plan_qos,
    plan_registration,
    plan_removal,
    plan_users,
    portal_groups,
    qos_limits,
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
    nodes, gpus = list(cluster.node_addrs()), cluster.gpus
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
            if not keep_gpu_file(dev.name, gpus):
                dev.unlink()
        for i in range(gpus):
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


def register():
    clusters = sacctmgr_list("cluster", CLUSTER, "format=cluster") or ""
    accounts = sacctmgr_list("account", ACCOUNT, "format=account") or ""
    runner = Runner()
    for change in plan_registration(clusters, accounts):
        runner.apply(change)


def ensure_qos(settings, runner):
    wall, gpus = qos_limits(settings["cluster"])
    listing = sacctmgr_list("qos", QOS, "format=name,maxwall,maxtrespu,mintres,flags")
    if listing is None:
        raise SetupError("slurmdbd does not answer (sacctmgr list qos)")
    runner.apply(plan_qos(listing, wall, gpus))


def sync_users(settings, runner):
    """The account's users: root, the hub's account, the members of the
    portal's groups. Returns :data:`UNRESOLVED`, changing nothing, when a
    group does not resolve."""
    hub = settings["hub"]["user"]
    members, odd = {"root", hub} - {""}, []
    for group in portal_groups(settings["ldap"]["allowed_groups"]):
        line = output(["getent", "group", group])
        if line is None:
            log(
                f"error: group '{group}' does not resolve (nslcd and slapd up?);"
                " associations left as they are"
            )
            return UNRESOLVED
        names, others = group_members(line)
        members.update(names)
        odd += others
    if odd:
        log(f"left out, not plain user names: {' '.join(odd)}")
    listing = sacctmgr_list(
        "assoc", f"account={ACCOUNT}", f"cluster={CLUSTER}", "format=user,qos,defaultqos"
    )
    if listing is None:
        raise SetupError("slurmdbd does not answer (sacctmgr list assoc)")
    plan = plan_users(members, listing)
    runner.apply(plan.account)
    runner.apply(plan.add)
    if hub:
        level = sacctmgr_list("user", hub, "format=adminlevel")
        if level is None:
            raise SetupError("slurmdbd does not answer (sacctmgr list user)")
        runner.apply(plan_admin_level(hub, level))
    if plan.leaving:
        active = output(["squeue", "-h", "-A", ACCOUNT, "-o", "%u"]) or ""
        busy, change = plan_removal(plan.leaving, active)
        for name in busy:
            log(
                f"{name} is not in the portal's groups but has active jobs:"
                f" removed from {ACCOUNT} once they end"
            )
        runner.apply(change)
    return 0


def ensure_limits(settings, script):
    """The QOS, then the account's users. A group that does not resolve
    leaves the users as they were, and Slurm up."""
    ensure_qos(settings, Runner())
    if sync_users(settings, Runner()) == UNRESOLVED:
        log(
            "warning: associations not synchronised;"
            f" run {script} sync-users once the groups resolve"
        )


def check_gres(cluster):
    """Each node shows the GPUs it is configured with."""
    for node in cluster.node_addrs() if cluster.gpus > 0 else ():
        shown = output(["sinfo", "-h", "-N", "-n", node, "-O", "Gres:40"]) or ""
        if not gres_ok(shown, cluster.gpus):
            raise SetupError(
                f"node {node} shows gres '{''.join(shown.split())}', expected gpu:{cluster.gpus}"
                f" (see {LOG_DIR}/slurmd-{node}.log)"
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
        ("register", "the cluster and the account in slurmdbd, once"),
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
        ("ensure-qos", "the QOS portal with the [cluster] qos_max_* limits"),
        ("sync-users", "the account's users; exit 3 if a group does not resolve"),
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
            qos_limits(settings["cluster"])
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
            register()
        case "ensure-qos":
            ensure_qos(settings, Runner(args.dry_run))
        case "sync-users":
            return sync_users(settings, Runner(args.dry_run))
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
