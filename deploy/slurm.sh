#!/bin/bash
# The embedded Slurm cluster: a login node (this host: munge, MariaDB,
# slurmdbd, slurmctld) and [cluster] nodes compute nodes n1, n2, ..., each in
# a network and UTS namespace of its own (its own address on a bridge of this
# host, its own hostname, its own slurmd and GPU device files), each
# advertising the [cluster] node settings of portal.toml (cores, memory, GPUs)
# whatever the machine really has. With nodes = 0, this host is the only node.
#
# The network: the bridge [cluster] bridge holds NETWORK.1 (this host, where
# slurmctld and the hub's API listen for the nodes); node i is NETWORK.(i+1)
# on the veth pair pnI (host side) / eth0 (inside its namespace). The node
# names are added to /etc/hosts (a marked block), so the hub, the proxy and
# every node resolve them. Files and users are shared with the host (one
# filesystem, NSS through nslcd's socket, munge's socket), as on a cluster
# with a shared /home. `ip netns exec` is not used: it remounts /sys, and
# slurmd then fails on cgroups.
#
#     deploy/slurm.sh start     # write /etc/slurm, start munged, mariadbd,
#                               # slurmdbd, slurmctld, slurmd (installs slurmdbd
#                               # and mariadb-server if missing)
#     deploy/slurm.sh stop      # stop them, remove the nodes' namespaces, veths, the
#                               # bridge and the /etc/hosts block (Slurm's state and
#                               # the database are kept)
#     deploy/slurm.sh status    # exit 0 if all run and the node takes jobs, else 3
#     deploy/slurm.sh sync-users  # the users of the account "portal" = the
#                               # members of the portal's LDAP groups, root, the hub
#
# The configuration lives in /etc/slurm, where the commands look by default,
# so sinfo, squeue, scontrol, sbatch and sacct work for every user with no
# extra environment. A slurm.conf that this script did not write is never
# replaced.
#
# Accounting: slurmdbd keeps the jobs in MariaDB (database slurm_acct_db, user
# slurm@localhost), so `sacct` tells how a job ended, and a job's TRES include
# its GPUs (gres/gpu=N: Slurm accepts AccountingStorageTRES=gres/gpu only with
# slurmdbd). mariadbd runs as mysql on /var/lib/mysql, with its own options
# file (/etc/mysql/portal-slurm.cnf), and listens on its Unix socket only
# (skip-networking). The password of slurm@localhost is made once and kept in
# /etc/slurm/slurmdbd.password and slurmdbd.conf (both root, 0600). The first
# start initialises an empty /var/lib/mysql, creates the database and the
# user, and registers the cluster and the account "portal".
#
# Slurm enforces its own limits, whoever submits (AccountingStorageEnforce=
# associations,limits,qos,safe): a job needs an association, and the account
# "portal" runs its jobs under the QOS "portal" only (its default), which caps
# GPUs per user and the wall time per job ([cluster] qos_max_gpus_per_user,
# qos_max_wall; set with sacctmgr at every start, modified when they differ).
# With Flags=DenyOnLimit a job over a per-job limit is refused at submission;
# jobs over the per-user total pend until the user's others end.
# `sync-users` (also run by every start, before slurmctld restarts) gives
# every member of the portal's groups (the cn of [ldap] allowed_groups,
# members as `getent group` lists them), root and the hub's account ([hub]
# user, for its `sbatch --test-only`) an association with the account, and
# removes those who left (once their jobs have ended); root also keeps its
# association with the account root. The hub's account holds no Slurm admin
# level (AdminLevel=None; an earlier version made it Operator, which could
# change or cancel any job): it lengthens a session through the root helper
# portal-extend (deploy/hub.sh), never by itself. Anyone else is refused:
#     sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified
# To start accounting over: stop, remove /var/lib/mysql, start.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

SLURM_ETC=/etc/slurm
SLURM_CONF=$SLURM_ETC/slurm.conf
GRES_CONF=$SLURM_ETC/gres.conf
CGROUP_CONF=$SLURM_ETC/cgroup.conf
JOB_CONTAINER_CONF=$SLURM_ETC/job_container.conf
RUN_DIR=/run/slurm
CTLD_PID=$RUN_DIR/slurmctld.pid
DBD_PID=$RUN_DIR/slurmdbd.pid
SLURMDBD_CONF=$SLURM_ETC/slurmdbd.conf
DBD_PORT=6819
STATE_DIR=/var/lib/slurm/slurmctld
SPOOL_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm
MUNGE_KEY=/etc/munge/munge.key
MUNGE_PID=/run/munge/munged.pid
GPU_DEV=/dev/portal-gpu       # fake GPU character devices: $GPU_DEV/NODE/gpu0, 1, ...
NETNS_MARKS=/run/portal/netns   # one file per namespace this script made
BRIDGE_ALIAS=portal-embedded     # the bridge's alias: only ours is ever deleted
HOSTS_BEGIN="# BEGIN portal embedded cluster (deploy/slurm.sh)"
HOSTS_END="# END portal embedded cluster"
MARKER="# Written by deploy/slurm.sh of the Data Scientist Portal."

# The accounting database: mariadbd as user mysql, on its Unix socket only.
# The socket is the client library's default, which slurmdbd (StorageHost=
# localhost) and the mariadb client use; root connects by unix_socket auth.
DB_PACKAGES=(slurmdbd mariadb-server)
MYSQL_CNF=/etc/mysql/portal-slurm.cnf
MYSQL_DATA=/var/lib/mysql
MYSQL_RUN=/run/mysqld
MYSQL_SOCK=$MYSQL_RUN/mysqld.sock
MYSQL_PID=$MYSQL_RUN/mysqld.pid
MYSQL_LOG=$LOG_DIR/mariadb.log
DB_NAME=slurm_acct_db
DB_USER=slurm
DB_PASS_FILE=$SLURM_ETC/slurmdbd.password   # root, 0600; never in the repository
CLUSTER=portal
ACCOUNT=portal
QOS=portal                    # the account's only QOS: the limits below

LOGIN=$(hostname -s)
NODES=$PORTAL_CLUSTER_NODES
NETWORK=$PORTAL_CLUSTER_NETWORK
BRIDGE=$PORTAL_CLUSTER_BRIDGE
HOST_ADDR=$NETWORK.1
CPUS=$PORTAL_CLUSTER_NODE_CPUS
MEM_MB=$PORTAL_CLUSTER_NODE_MEM_MB
GPUS=$PORTAL_CLUSTER_NODE_GPUS
PARTITION=$PORTAL_SLURM_PARTITION
MAX_TIME=$PORTAL_CLUSTER_MAX_TIME
QOS_MAX_GPUS=$PORTAL_CLUSTER_QOS_MAX_GPUS_PER_USER
QOS_MAX_WALL=$PORTAL_CLUSTER_QOS_MAX_WALL
# The compute nodes: n1..nN at NETWORK.2.., or this host alone at 127.0.0.1.
NODE_NAMES=()
if [ "$NODES" -gt 0 ]; then
    for ((i = 1; i <= NODES; i++)); do NODE_NAMES+=("n$i"); done
else
    NODE_NAMES=("$LOGIN")
fi
# node_addr NAME: the address slurmctld and the hub reach the node at.
node_addr() {
    if [ "$NODES" -gt 0 ]; then echo "$NETWORK.$((${1#n} + 1))"; else echo 127.0.0.1; fi
}
slurmd_pid() { echo "$RUN_DIR/slurmd-$1.pid"; }
slurmd_log() { echo "$LOG_DIR/slurmd-$1.log"; }

# The hub's own account: its `sbatch --test-only` (the spawn page's expected
# starts) needs an association too; it holds no admin level (hub_admin_level).
HUB_USER=${PORTAL_HUB_USER:-}

# ---------------------------------------------------------------- processes

# launch COMMAND...: run a daemon that forks itself into the background, with
# no file descriptor of ours but stdout and stderr, which it points at
# /dev/null once detached (not this script's lock, not a pipe of whatever
# called us, which would then wait for the daemon).
close_fds() {
    local fd
    for fd in "/proc/$BASHPID/fd/"*; do
        fd=${fd##*/}
        if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
    done
}
launch() { ( close_fds; exec "$@" </dev/null ); }

# launch_bg COMMAND...: the same for a daemon that stays in the foreground: in
# the background, in a session of its own, its output discarded (it logs to a
# file of its own).
launch_bg() { ( close_fds; exec setsid "$@" </dev/null >/dev/null 2>&1 ) & }

# stop_slow PIDFILE NAME SECONDS: stop_pidfile for a daemon that may need more
# than 10 s to stop cleanly (mariadbd): TERM, wait up to SECONDS, then KILL.
stop_slow() {
    local pidfile=$1 name=$2 seconds=$3 pid i
    pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < seconds * 10; i++)); do proc_alive "$pid" || break; sleep 0.1; done
    proc_alive "$pid" && { log "$name did not stop, killing"; kill -9 "$pid" || true; }
    rm -f "$pidfile"
    log "$name stopped"
}

# ---------------------------------------------------------------- packages

# slurmdbd and mariadb-server, installed if missing (deploy/packages.sh lists
# them too). Their own services are never used: this script runs the daemons.
ensure_db_packages() {
    local pkg missing=()
    for pkg in "${DB_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ---------------------------------------------------------------- munge

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    if [ ! -s "$MUNGE_KEY" ]; then
        log "creating $MUNGE_KEY"
        install -d -o munge -g munge -m 0700 /etc/munge
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile="$MUNGE_KEY" --force
        else
            dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge /etc/munge "$MUNGE_KEY"
    chmod 0700 /etc/munge
    chmod 0400 "$MUNGE_KEY"
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/log/munge
    install -d -o munge -g munge -m 0711 /var/lib/munge
    if ! pid_alive "$MUNGE_PID"; then
        rm -f "$MUNGE_PID"
        log "starting munged"
        launch runuser -u munge -- /usr/sbin/munged --force
    fi
    wait_for 15 "munge credentials" munge_ok
}

# ---------------------------------------------------------------- configuration

# Each node's GPU devices: /dev/portal-gpu/NODE/gpu0..N-1, major 195 like
# NVIDIA's (a node's own /dev/nvidiaN on a real cluster), and like them
# 0666: the devices cgroup (ConstrainDevices) is what keeps a job to its own.
# Slurm needs File= entries to register GPUs, and hands a job's devices to
# it as CUDA_VISIBLE_DEVICES.
make_gpu_devices() {
    local i dev node
    rm -f "$GPU_DEV"[0-9]* # the single-host layout of earlier versions
    for dev in "$GPU_DEV"/*; do  # nodes no longer configured
        [ -e "$dev" ] || continue
        [[ " ${NODE_NAMES[*]} " == *" ${dev##*/} "* ]] || rm -rf "$dev"
    done
    for node in "${NODE_NAMES[@]}"; do
        install -d -m 0755 "$GPU_DEV/$node"
        for dev in "$GPU_DEV/$node"/gpu*; do  # beyond [cluster] node_gpus now
            [ -e "$dev" ] || continue
            i=${dev##*/gpu}
            [[ $i =~ ^[0-9]+$ ]] && [ "$i" -lt "$GPUS" ] || rm -f "$dev"
        done
        for ((i = 0; i < GPUS; i++)); do
            dev=$GPU_DEV/$node/gpu$i
            if [ ! -c "$dev" ] || [ "$(stat -c '%t:%T' "$dev")" != "c3:$(printf '%x' "$i")" ]; then
                rm -f "$dev"
                mknod -m 0666 "$dev" c 195 "$i"
            fi
            chmod 0666 "$dev"
        done
    done
}

# ---------------------------------------------------------------- the nodes' network

in_node() { local node=$1; shift; nsenter --net="/var/run/netns/$node" "$@"; }

# The bridge, each node's namespace and veth pair, and the /etc/hosts block.
# Idempotent: what exists is kept.
net_up() {
    # a single host: what an earlier start with compute nodes made goes
    [ "$NODES" -gt 0 ] || { net_down; return 0; }
    local node addr block=""
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        log "creating bridge $BRIDGE ($HOST_ADDR/24)"
        ip link add "$BRIDGE" type bridge
        ip link set "$BRIDGE" alias "$BRIDGE_ALIAS"
    fi
    our_bridge || die "[cluster] bridge = '$BRIDGE' is an existing link this script did not make; name another"
    ip addr replace "$HOST_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for node in "${NODE_NAMES[@]}"; do
        addr=$(node_addr "$node")
        if [ ! -e "/var/run/netns/$node" ]; then
            log "creating network namespace $node ($addr)"
            ip netns add "$node"
            install -d -m 0755 "$NETNS_MARKS"
            touch "$NETNS_MARKS/$node"
        fi
        [ -e "$NETNS_MARKS/$node" ] || die "network namespace $node exists and was not made by this script"
        if ! in_node "$node" ip link show eth0 >/dev/null 2>&1; then
            ip link del "p$node" 2>/dev/null || true
            ip link add "p$node" type veth peer name eth0 netns "$node"
        fi
        ip link set "p$node" master "$BRIDGE" up
        in_node "$node" ip addr replace "$addr/24" dev eth0
        in_node "$node" ip link set eth0 up
        in_node "$node" ip link set lo up
        block+="$addr $node"$'\n'
    done
    hosts_block "$block"
}

# hosts_block LINES: /etc/hosts with our marked block holding LINES (none:
# no block). Rewritten in place (it may be a bind mount), only when it differs.
hosts_block() {
    local lines=$1 current new begins ends tmp
    current=$(cat /etc/hosts)
    # exactly one BEGIN before one END, or none of either: anything else was
    # edited by hand, and a rewrite could drop the lines after it
    begins=$(grep -cxF "$HOSTS_BEGIN" /etc/hosts || true)
    ends=$(grep -cxF "$HOSTS_END" /etc/hosts || true)
    if [ "$begins$ends" != 00 ] && { [ "$begins$ends" != 11 ] ||
        [ "$(grep -nxF "$HOSTS_BEGIN" /etc/hosts | cut -d: -f1)" -gt "$(grep -nxF "$HOSTS_END" /etc/hosts | cut -d: -f1)" ]; }; then
        die "/etc/hosts: the lines between '$HOSTS_BEGIN' and '$HOSTS_END' were edited; put them back as one block (or remove both) and start again"
    fi
    new=$(awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b { skip = 1 } !skip { print } $0 == e { skip = 0 }' /etc/hosts)
    [ -z "$lines" ] || new+=$'\n'"$HOSTS_BEGIN"$'\n'"${lines%$'\n'}"$'\n'"$HOSTS_END"
    [ "$new" != "$current" ] || return 0
    # written whole, then copied over in place (it may be a bind mount)
    tmp=$(mktemp /etc/.hosts.portal.XXXXXX)
    printf '%s\n' "$new" >"$tmp"
    cat "$tmp" >/etc/hosts
    rm -f "$tmp"
    log "updated the node names in /etc/hosts"
}

# The bridge is the one this script made (its alias says so).
our_bridge() { ip -d link show "$BRIDGE" 2>/dev/null | grep -q "alias $BRIDGE_ALIAS"; }

# Our namespaces (n1, n2, ...: configured now or earlier), their processes
# first (a job's steps outlive a stopped slurmd), the veths and the bridge.
net_down() {
    remove_namespaces
    if our_bridge; then
        ip link del "$BRIDGE"
        log "removed bridge $BRIDGE"
    fi
    hosts_block ""
}

# The namespaces of nodes no longer configured ([cluster] nodes went down).
net_prune() { remove_namespaces "${NODE_NAMES[@]}"; }

# remove_namespaces [KEEP...]: remove each namespace this script made but
# those named.
remove_namespaces() {
    local node pids mark
    local -A keep=()
    for node in "$@"; do keep[$node]=1; done
    for mark in "$NETNS_MARKS"/*; do
        [ -e "$mark" ] || continue
        node=${mark##*/}
        [ -z "${keep[$node]:-}" ] || continue
        rm -f "$mark"
        [ -e "/var/run/netns/$node" ] || continue
        pids=$(ip netns pids "$node" 2>/dev/null || true)
        # shellcheck disable=SC2086
        [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
        ip netns del "$node"
        ip link del "p$node" 2>/dev/null || true
        log "removed node $node's network namespace"
    done
}

# This host as the nodes reach it (localhost there is the node's own loopback).
login_addr() {
    if [ "$NODES" -gt 0 ]; then echo "$HOST_ADDR"; else echo localhost; fi
}

# slurmctld on this host: reached by the nodes at the bridge's address.
ctld_host() {
    if [ "$NODES" -gt 0 ]; then echo "$LOGIN($HOST_ADDR)"; else echo "$LOGIN"; fi
}

render_slurm_conf() {
    local gres=""
    [ "$GPUS" -gt 0 ] && gres=" Gres=gpu:$GPUS"
    cat <<EOF
$MARKER
# Regenerated from portal.toml ([cluster], [slurm]) on every start; edit the
# settings, not this file.
ClusterName=$CLUSTER
SlurmctldHost=$(ctld_host)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$RUN_DIR/slurmd-%n.pid
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR/%n
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true

# A job is held to its slice by the kernel (cgroup.conf): its processes
# are tracked in cgroups, it opens only its own GPUs and uses only its memory.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
# Each job has a /tmp and /dev/shm of its own (job_container.conf), removed
# when it ends: what one user leaves in /tmp another cannot read, plant or
# squat. Contain: the job's namespace exists from its start, for every step.
JobContainerType=job_container/tmpfs
PrologFlags=Contain
# The node advertises the configured cores, memory and GPUs, not the machine's.
SlurmdParameters=config_overrides
# A node that went down (an unclean stop) returns when its slurmd registers.
ReturnToService=2

# Timers: failures show quickly, scancel ends a job within seconds.
MessageTimeout=10
SlurmctldTimeout=120
# A node whose slurmd stops answering is down after 30 s (its jobs end as
# NODE_FAIL); a site keeps Slurm's default (300) or its own.
SlurmdTimeout=30
# A session is never requeued onto another node after a node failure.
JobRequeue=0
InactiveLimit=0
KillWait=5
MinJobAge=300
Waittime=0

# Scheduling: cores, memory and GPUs are consumed; pending jobs start as soon
# as resources free up.
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1,bf_resolution=60
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((MEM_MB / CPUS))
# A job beyond the partition's limits (MaxTime, the node's size) is refused at
# submission rather than left pending forever.
EnforcePartLimits=ALL
GresTypes=gpu

# Accounting in slurmdbd (sacct); a job's TRES include its GPUs (gres/gpu=N).
# Finished jobs are also listed in $LOG_DIR/jobcomp.log.
# Slurm's own limits, for jobs submitted outside the portal too: a job needs
# an association (sync-users), and the limits of its association and QOS
# (the QOS "$QOS": GPUs per user, wall time per job) hold.
AccountingStorageEnforce=associations,limits,qos,safe
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$(login_addr)
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log

$(for node in "${NODE_NAMES[@]}"; do
        echo "NodeName=$node NodeAddr=$(node_addr "$node") CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM_MB$gres State=UNKNOWN"
    done)
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=$MAX_TIME State=UP OverSubscribe=NO
EOF
}

render_slurmdbd_conf() {
    cat <<EOF
$MARKER
# Regenerated on every start. Holds the database password: root, 0600.
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DBD_PID
LogFile=$LOG_DIR/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=$DB_NAME
StorageUser=$DB_USER
StoragePass=$(cat "$DB_PASS_FILE")
EOF
}

# mariadbd's only options file (--defaults-file): Debian's /etc/mysql/my.cnf,
# which listens on 127.0.0.1:3306, is not read.
render_mysql_cnf() {
    cat <<EOF
$MARKER
# The accounting database of slurmdbd. Regenerated on every start.
[mysqld]
user = mysql
datadir = $MYSQL_DATA
socket = $MYSQL_SOCK
pid-file = $MYSQL_PID
log-error = $MYSQL_LOG
skip-networking
character-set-server = utf8mb4
collation-server = utf8mb4_general_ci
# slurmdbd logs an error below half its recommendations (1 GiB, 64 MiB, 900 s).
# The buffer pool is only an upper bound: memory is taken as it fills.
innodb_buffer_pool_size = 512M
innodb_log_file_size = 64M
innodb_lock_wait_timeout = 900
EOF
}

# cgroup.conf: the slice is enforced by the kernel (cgroup v1, which this
# host mounts; Slurm 22.05 also has cgroup/v2). Devices: a job opens only its
# own GPUs' device files (EPERM for the others). Memory: its --mem, no swap
# beyond it (OUT_OF_MEMORY past it). Cores are not constrained here: each
# node advertises $CPUS cores on a host that has fewer, and a cpuset of
# cores the host lacks fails the job's start; a site whose nodes have the
# cores they advertise sets ConstrainCores=yes (and TaskPlugin
# task/affinity,task/cgroup).
render_cgroup_conf() {
    cat <<EOF
$MARKER
CgroupPlugin=cgroup/v1
ConstrainDevices=yes
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
AllowedSwapSpace=0
ConstrainCores=no
EOF
}

# job_container.conf: each node keeps its jobs' private /tmp and /dev/shm in
# a folder of its own spool (the nodes share this host's disk).
render_job_container_conf() {
    echo "$MARKER"
    echo "AutoBasePath=true"
    local node
    for node in "${NODE_NAMES[@]}"; do
        echo "NodeName=$node BasePath=$SPOOL_DIR/$node/job_containers"
    done
}

render_gres_conf() {
    echo "$MARKER"
    [ "$GPUS" -gt 0 ] || return 0
    local node
    for node in "${NODE_NAMES[@]}"; do
        echo "NodeName=$node Name=gpu File=$GPU_DEV/$node/gpu[0-$((GPUS - 1))]"
    done
}

# write_if_changed FILE CONTENT [MODE]: write FILE (root, MODE, by default
# 0644) when it differs; status 0 if written. Nobody else can read it meanwhile.
write_if_changed() {
    local file=$1 content=$2 mode=${3:-0644}
    [ -f "$file" ] && [ "$(cat "$file")" = "$content" ] && return 1
    if [ -f "$file" ] && ! grep -qxF "$MARKER" "$file"; then
        die "$file was not written by this script; move it away to let the embedded cluster use its own"
    fi
    (umask 077 && printf '%s\n' "$content" >"$file.tmp")
    chown root:root "$file.tmp"
    chmod "$mode" "$file.tmp"
    mv -f "$file.tmp" "$file"
    log "wrote $file"
}

# The password of $DB_USER@localhost: made once, kept in a root-only file.
ensure_db_password() {
    [ -s "$DB_PASS_FILE" ] && return 0
    (umask 077 && /usr/bin/python3 -c 'import secrets; print(secrets.token_urlsafe(24))' >"$DB_PASS_FILE.tmp")
    mv -f "$DB_PASS_FILE.tmp" "$DB_PASS_FILE"
    log "new password of $DB_USER@localhost in $DB_PASS_FILE"
}

# Write the configuration. Sets SLURM_CHANGED (slurm.conf, gres.conf),
# DBD_CHANGED (slurmdbd.conf) and DB_CHANGED (mariadbd's options) to 1 where
# a file changed, else to 0.
write_config() {
    local conf gres cgroup containers dbd cnf
    install -d -m 0755 "$SLURM_ETC" "$(dirname "$MYSQL_CNF")"
    ensure_db_password
    conf=$(render_slurm_conf)
    gres=$(render_gres_conf)
    cgroup=$(render_cgroup_conf)
    containers=$(render_job_container_conf)
    dbd=$(render_slurmdbd_conf)
    cnf=$(render_mysql_cnf)
    SLURM_CHANGED=0 DBD_CHANGED=0 DB_CHANGED=0
    if write_if_changed "$SLURM_CONF" "$conf"; then SLURM_CHANGED=1; fi
    if write_if_changed "$GRES_CONF" "$gres"; then SLURM_CHANGED=1; fi
    if write_if_changed "$CGROUP_CONF" "$cgroup"; then SLURM_CHANGED=1; fi
    if write_if_changed "$JOB_CONTAINER_CONF" "$containers"; then SLURM_CHANGED=1; fi
    if write_if_changed "$SLURMDBD_CONF" "$dbd" 0600; then DBD_CHANGED=1; fi
    if write_if_changed "$MYSQL_CNF" "$cnf"; then DB_CHANGED=1; fi
}

# ---------------------------------------------------------------- daemons

# node_state NODE: its state as sinfo prints it: idle, mixed, allocated, down*...
node_state() { sinfo -h -N -n "$1" -o '%T' 2>/dev/null | head -n1 || true; }

# node_ready NODE: it takes jobs.
node_ready() {
    case "$(node_state "$1")" in
        idle | mixed | allocated | completing) return 0 ;;
        *) return 1 ;;
    esac
}

ctld_ok() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

# slurmd_registered NODE EPOCH: the node's slurmd registered having started at
# EPOCH or later (slurmctld may still show the old registration for a while).
slurmd_registered() {
    local node=$1 since=$2 started
    started=$(scontrol -o show node "$node" 2>/dev/null | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)
    case "$started" in "" | None | Unknown) return 1 ;; esac
    [ "$(date -d "$started" +%s 2>/dev/null || echo 0)" -ge "$since" ]
}

# wait_daemon SECONDS NAME PIDFILE COMMAND...: wait for COMMAND to succeed,
# failing early (with the end of the daemon's log) when the daemon has died.
wait_daemon() {
    local seconds=$1 name=$2 pidfile=$3; shift 3
    local start=$SECONDS
    until "$@" >/dev/null 2>&1; do
        if [ $((SECONDS - start)) -ge 2 ] && ! pid_alive "$pidfile"; then
            tail -n 5 "$LOG_DIR/$name.log" >&2 || true
            die "$name exited (see $LOG_DIR/$name.log)"
        fi
        [ $((SECONDS - start)) -lt "$seconds" ] || die "$name not ready within ${seconds}s (see $LOG_DIR/$name.log)"
        sleep 0.2
    done
}

# ---------------------------------------------------------------- MariaDB

# db_sql ARGS...: the mariadb client, as root (unix_socket auth), on the socket.
db_sql() { mariadb --no-defaults --socket="$MYSQL_SOCK" -u root -N -B "$@"; }

db_ok() { [ "$(db_sql -e 'SELECT 1' 2>/dev/null)" = 1 ]; }

start_mariadb() {
    install -d -o mysql -g mysql -m 0755 "$MYSQL_RUN"
    install -d -m 0755 "$LOG_DIR"
    [ -e "$MYSQL_LOG" ] || install -o mysql -g adm -m 0640 /dev/null "$MYSQL_LOG"
    if [ "$DB_CHANGED" = 1 ] && pid_alive "$MYSQL_PID"; then
        log "$MYSQL_CNF changed, restarting mariadbd"
        stop_slow "$MYSQL_PID" mariadbd 60
    fi
    if ! pid_alive "$MYSQL_PID"; then
        rm -f "$MYSQL_PID"
        install -d -o mysql -g mysql -m 0755 "$MYSQL_DATA"
        if [ ! -d "$MYSQL_DATA/mysql" ]; then
            log "empty $MYSQL_DATA: initialising it (mariadb-install-db)"
            mariadb-install-db --defaults-file="$MYSQL_CNF" --user=mysql --datadir="$MYSQL_DATA" \
                --auth-root-authentication-method=socket --skip-test-db >>"$MYSQL_LOG" 2>&1 ||
                die "mariadb-install-db failed (see $MYSQL_LOG)"
        fi
        log "starting mariadbd"
        launch_bg /usr/sbin/mariadbd --defaults-file="$MYSQL_CNF"
        # The pid file comes once mariadbd runs; wait_daemon needs it.
        wait_for 30 "mariadbd writing $MYSQL_PID (see $MYSQL_LOG)" test -s "$MYSQL_PID"
    fi
    wait_daemon 60 mariadb "$MYSQL_PID" db_ok
    # The database and its user, idempotently; the password from its file goes
    # through stdin, never on a command line.
    db_sql <<EOF || die "creating $DB_NAME and $DB_USER@localhost failed"
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$(cat "$DB_PASS_FILE")';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$(cat "$DB_PASS_FILE")';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
EOF
}

# ---------------------------------------------------------------- slurmdbd

# sacctmgr_list ARGS...: `sacctmgr list ARGS`, parsable, no header; fails when
# slurmdbd does not answer.
sacctmgr_list() { timeout 10 sacctmgr -n -P list "$@" 2>/dev/null; }

dbd_ok() { sacctmgr_list cluster format=cluster >/dev/null; }

start_slurmdbd() {
    install -d -m 0755 "$RUN_DIR" "$LOG_DIR"
    if [ "$DBD_CHANGED" = 1 ] && pid_alive "$DBD_PID"; then
        log "$SLURMDBD_CONF changed, restarting slurmdbd"
        stop_pidfile "$DBD_PID" slurmdbd
    fi
    if ! pid_alive "$DBD_PID"; then
        rm -f "$DBD_PID"
        log "starting slurmdbd"
        launch /usr/sbin/slurmdbd
    fi
    # Its first start creates the tables: allow for that.
    wait_daemon 120 slurmdbd "$DBD_PID" dbd_ok
}

# The cluster and the account, once.
register_cluster() {
    if ! sacctmgr_list cluster "$CLUSTER" format=cluster | grep -qxF "$CLUSTER"; then
        log "registering cluster $CLUSTER in slurmdbd"
        sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER failed"
    fi
    if ! sacctmgr_list account "$ACCOUNT" format=account | grep -qxF "$ACCOUNT"; then
        log "adding account $ACCOUNT"
        sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" \
            description="Data Scientist Portal" organization=portal >/dev/null ||
            die "sacctmgr add account $ACCOUNT failed"
    fi
}

# slurm_time TIME: a Slurm duration (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM,
# D-HH:MM:SS) as sacctmgr prints a limit: whole minutes (seconds round up, as
# Slurm keeps them), D-HH:MM:00, or HH:MM:00 under a day.
slurm_time() {
    local re='^(([0-9]+)-)?([0-9]+)(:([0-9]+))?(:([0-9]+))?$' d h=0 m=0 s=0 x y z
    [[ $1 =~ $re ]] || return 1
    d=${BASH_REMATCH[2]:-0} x=${BASH_REMATCH[3]} y=${BASH_REMATCH[5]} z=${BASH_REMATCH[7]}
    if [ -n "${BASH_REMATCH[1]}" ]; then h=$x m=${y:-0} s=${z:-0}
    elif [ -n "$z" ]; then h=$x m=$y s=$z
    elif [ -n "$y" ]; then m=$x s=$y
    else m=$x
    fi
    m=$(((10#$d * 24 + 10#$h) * 60 + 10#$m + (10#$s + 59) / 60))
    if [ $((m / 1440)) -gt 0 ]; then
        printf '%d-%02d:%02d:00\n' $((m / 1440)) $((m % 1440 / 60)) $((m % 60))
    else
        printf '%02d:%02d:00\n' $((m / 60)) $((m % 60))
    fi
}

# check_limits: the QOS limits of [cluster] qos_max_* (0 and "": none) in
# sacctmgr's terms, QOS_WALL and QOS_GPUS; refused before anything starts.
check_limits() {
    QOS_WALL="" QOS_GPUS=""
    if [ -n "$QOS_MAX_WALL" ]; then
        QOS_WALL=$(slurm_time "$QOS_MAX_WALL") ||
            die "[cluster] qos_max_wall = '$QOS_MAX_WALL' is not a Slurm time such as \"1-00:00:00\" (\"\": no limit)"
    fi
    [[ $QOS_MAX_GPUS =~ ^[0-9]+$ ]] ||
        die "[cluster] qos_max_gpus_per_user = $QOS_MAX_GPUS: use a number of GPUs (0: no limit)"
    [ "$QOS_MAX_GPUS" -eq 0 ] || QOS_GPUS=gres/gpu=$QOS_MAX_GPUS
}

# The QOS of the account's jobs, with the limits of check_limits and
# DenyOnLimit. Added, or modified where it differs: one sacctmgr list when it
# is as configured. TRES limits and flags that a site added itself are kept.
ensure_qos() {
    local wall=$QOS_WALL gpus=$QOS_GPUS have name maxwall maxtrespu mintres flags
    # Every job takes a GPU: a GPU-less job could otherwise hold a node's
    # cores and memory for the whole wall time.
    local min=gres/gpu=1
    have=$(sacctmgr_list qos "$QOS" format=name,maxwall,maxtrespu,mintres,flags) ||
        die "slurmdbd does not answer (sacctmgr list qos)"
    IFS='|' read -r name maxwall maxtrespu mintres flags <<<"$have"
    maxtrespu=$(grep -o 'gres/gpu=[0-9]*' <<<"$maxtrespu" || true)
    mintres=$(grep -o 'gres/gpu=[0-9]*' <<<"$mintres" || true)
    if [ "$name" = "$QOS" ] && [ "$maxwall|$maxtrespu|$mintres" = "$wall|$gpus|$min" ] &&
        [[ ,$flags, == *,DenyOnLimit,* ]]; then
        return 0
    fi
    local limits=(MaxWall="${wall:--1}" MaxTRESPerUser="${gpus:-gres/gpu=-1}" MinTRESPerJob="$min")
    if [ "$name" != "$QOS" ]; then
        log "adding QOS $QOS: MaxWall=${wall:-none} MaxTRESPerUser=${gpus:-none} MinTRESPerJob=$min Flags=DenyOnLimit"
        sacctmgr -i add qos "$QOS" "${limits[@]}" Flags=DenyOnLimit >/dev/null ||
            die "sacctmgr add qos $QOS failed"
    else
        log "QOS $QOS: MaxWall=${wall:-none} MaxTRESPerUser=${gpus:-none} MinTRESPerJob=$min Flags+=DenyOnLimit" \
            "(was ${maxwall:-none}, ${maxtrespu:-none}, ${mintres:-none}, ${flags:-no flags})"
        sacctmgr -i modify qos "$QOS" set "${limits[@]}" Flags+=DenyOnLimit >/dev/null ||
            die "sacctmgr modify qos $QOS failed"
    fi
}

# The portal's Unix groups: the cn of each [ldap] allowed_groups DN, as
# spawners/auth.py's group_name reads it (nslcd names LDAP groups by their cn).
portal_groups() {
    /usr/bin/python3 - "$REPO_DIR" <<'EOF'
import sys

sys.path.insert(0, sys.argv[1])
from portal.settings import load

for dn in load()["ldap"]["allowed_groups"]:
    attr, _, value = dn.split(",", 1)[0].partition("=")
    print(value.strip() if attr.strip().lower() == "cn" else dn)
EOF
}

# sync_users: the users of the account are root, the hub's account and the
# members of the portal's groups as NSS lists them (`getent group`), and the
# account's only QOS (its users inherit it) is $QOS. One sacctmgr list when
# nothing changes; one add and one remove for any number of users. A user who
# left keeps the association while a job of theirs is active (slurmdbd
# refuses to remove it); a later sync removes it. Fails, changing nothing,
# when a group does not resolve: nslcd or slapd down must not look like an
# empty group.
sync_users() {
    local groups group line name qos defqos current busy names=() add=() remove=() keep=() odd=()
    local -A member=([root]=1) listed=()
    if [ -n "$HUB_USER" ]; then
        ensure_service_accounts   # a uid before slurmctld hears of it
        member[$HUB_USER]=1
    fi
    groups=$(portal_groups) || die "cannot read [ldap] allowed_groups"
    while read -r group; do
        [ -n "$group" ] || continue
        line=$(getent group "$group") || {
            log "error: group '$group' does not resolve (nslcd and slapd up?); associations left as they are"
            return 1
        }
        IFS=, read -ra names <<<"$(cut -d: -f4 <<<"$line")"
        for name in "${names[@]}"; do
            if [[ $name =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]]; then member[$name]=1; else odd+=("$name"); fi
        done
    done <<<"$groups"
    [ ${#odd[@]} -eq 0 ] || log "left out, not plain user names: ${odd[*]}"
    current=$(sacctmgr_list assoc account="$ACCOUNT" cluster="$CLUSTER" format=user,qos,defaultqos) ||
        die "slurmdbd does not answer (sacctmgr list assoc)"
    while IFS='|' read -r name qos defqos; do
        if [ -z "$name" ]; then                    # the account's own association
            [ "$qos|$defqos" != "$QOS|$QOS" ] || continue
            log "account $ACCOUNT: QOS $QOS only (was ${qos:-none}, default ${defqos:-none})"
            sacctmgr -i modify account "$ACCOUNT" where cluster="$CLUSTER" \
                set qos="$QOS" defaultqos="$QOS" >/dev/null || die "sacctmgr modify account $ACCOUNT failed"
            continue
        fi
        listed[$name]=1
        [ -n "${member[$name]:-}" ] || remove+=("$name")
    done <<<"$current"
    for name in "${!member[@]}"; do
        [ -n "${listed[$name]:-}" ] || add+=("$name")
    done
    if [ ${#add[@]} -gt 0 ]; then
        mapfile -t add < <(printf '%s\n' "${add[@]}" | sort)
        log "adding to account $ACCOUNT: ${add[*]}"
        sacctmgr -i add user "$(IFS=,; echo "${add[*]}")" account="$ACCOUNT" cluster="$CLUSTER" >/dev/null ||
            die "sacctmgr add user failed"
    fi
    hub_admin_level
    [ ${#remove[@]} -gt 0 ] || return 0
    busy=" $(squeue -h -A "$ACCOUNT" -o %u 2>/dev/null | sort -u | tr '\n' ' ')"
    for name in "${remove[@]}"; do
        if [[ $busy == *" $name "* ]]; then
            log "$name is not in the portal's groups but has active jobs: removed from $ACCOUNT once they end"
        else
            keep+=("$name")
        fi
    done
    [ ${#keep[@]} -gt 0 ] || return 0
    mapfile -t keep < <(printf '%s\n' "${keep[@]}" | sort)
    log "removing from account $ACCOUNT: ${keep[*]}"
    sacctmgr -i remove user where name="$(IFS=,; echo "${keep[*]}")" account="$ACCOUNT" cluster="$CLUSTER" >/dev/null ||
        log "error: sacctmgr remove user failed (a job started meanwhile?); the next sync tries again"
}

# hub_admin_level: the hub's account ([hub] user) holds no Slurm admin level
# (AdminLevel=None). An Operator may update, hold or cancel any job of the
# cluster and edit its accounting; the hub needs none of it: it lengthens a
# session through the root helper portal-extend, which re-checks the job
# (deploy/hub.sh), and cancels its users' jobs as them through sudo. An
# earlier version made the account Operator: a start or a sync-users sets it
# back to None, only when it differs. The account keeps its association
# (its `sbatch --test-only`).
hub_admin_level() {
    [ -n "$HUB_USER" ] || return 0
    local level
    level=$(sacctmgr_list user "$HUB_USER" format=adminlevel) ||
        die "slurmdbd does not answer (sacctmgr list user)"
    if [ -z "$level" ] || [ "$level" = None ]; then return 0; fi   # "": no such user yet
    log "$HUB_USER (the hub's account): Slurm AdminLevel None (was $level): it extends sessions through the root helper portal-extend"
    sacctmgr -i modify user "$HUB_USER" set adminlevel=None >/dev/null ||
        die "sacctmgr modify user $HUB_USER set adminlevel=None failed"
}

# hub_uid: slurmctld knows the hub's account by its uid. One it heard of
# before the account existed (an earlier version made Slurm's users first)
# stays invalid (uid 4294967294: every request of the hub refused) until
# slurmctld reads its users again, which `scontrol reconfigure` does.
hub_uid() {
    [ -n "$HUB_USER" ] || return 0
    scontrol show assoc_mgr users="$HUB_USER" flags=users 2>/dev/null |
        grep -q "UserName=$HUB_USER(4294967294)" || return 0
    log "slurmctld holds $HUB_USER with no uid: scontrol reconfigure"
    scontrol reconfigure || die "scontrol reconfigure failed"
}

# ---------------------------------------------------------------- slurmctld, slurmd

# Every slurmd (of the nodes configured now or earlier, and of the earlier
# single-node layout), then slurmctld.
stop_slurm_daemons() {
    local pidfile name
    for pidfile in "$RUN_DIR"/slurmd-*.pid "$RUN_DIR/slurmd.pid"; do
        [ -e "$pidfile" ] || continue
        name=$(basename "$pidfile" .pid)
        stop_pidfile "$pidfile" "$name"
    done
    stop_pidfile "$CTLD_PID" slurmctld
}

# start_slurmd NODE: its slurmd, in the node's namespaces when there are
# compute nodes (hostname NODE, the node's network), else on this host.
start_slurmd() {
    local node=$1
    rm -f "$(slurmd_pid "$node")"
    # 0755, as slurmd itself makes it: jobs exec their script from there as
    # their user. (0700 here, on a start that leaves slurmd running, made
    # every job fail with "execve(): .../slurm_script: Permission denied".)
    install -d -m 0755 "$SPOOL_DIR" "$SPOOL_DIR/$node"
    log "starting slurmd of $node"
    if [ "$NODES" -gt 0 ]; then
        # shellcheck disable=SC2016
        launch nsenter --net="/var/run/netns/$node" unshare --uts \
            sh -c 'hostname "$1" && exec /usr/sbin/slurmd -f "$2" -N "$1"' sh "$node" "$SLURM_CONF"
    else
        launch /usr/sbin/slurmd -f "$SLURM_CONF" -N "$node"
    fi
}

# wait_node_ready NODE: it takes jobs; a node left down or drained by an
# earlier unclean stop, whose slurmd runs again, is put back in service.
wait_node_ready() {
    local node=$1 deadline=$((SECONDS + 60)) state
    until node_ready "$node"; do
        state=$(node_state "$node")
        case "$state" in
            *drain* | down | down~ | fail*)
                log "node $node is $state, resuming it"
                scontrol update nodename="$node" state=resume || true
                ;;
        esac
        [ "$SECONDS" -lt "$deadline" ] ||
            die "node $node is '${state:-unknown}', not idle, after 60s (see $(slurmd_log "$node"))"
        sleep 0.2
    done
}

start_slurm_daemons() {
    local node since started=()
    install -d -m 0755 "$RUN_DIR" "$LOG_DIR"
    install -d -m 0700 "$STATE_DIR"
    if ! pid_alive "$CTLD_PID"; then
        rm -f "$CTLD_PID"
        log "starting slurmctld"
        launch /usr/sbin/slurmctld -f "$SLURM_CONF"
    fi
    wait_daemon 30 slurmctld "$CTLD_PID" ctld_ok
    since=$(date +%s)
    for node in "${NODE_NAMES[@]}"; do
        pid_alive "$(slurmd_pid "$node")" && continue
        start_slurmd "$node"
        started+=("$node")
    done
    for node in "${started[@]}"; do
        wait_daemon 30 "slurmd-$node" "$(slurmd_pid "$node")" slurmd_registered "$node" "$since"
    done
    for node in "${NODE_NAMES[@]}"; do wait_node_ready "$node"; done
}

check_gres() {
    [ "$GPUS" -gt 0 ] || return 0
    local node gres
    for node in "${NODE_NAMES[@]}"; do
        gres=$(sinfo -h -N -n "$node" -O 'Gres:40' | tr -d ' ')
        case "$gres" in
            gpu:"$GPUS" | gpu:"$GPUS"\(*) ;;
            *) die "node $node shows gres '$gres', expected gpu:$GPUS (see $(slurmd_log "$node"))" ;;
        esac
    done
}

all_up() {
    local node
    pid_alive "$MUNGE_PID" && pid_alive "$MYSQL_PID" && pid_alive "$DBD_PID" &&
        pid_alive "$CTLD_PID" || return 1
    for node in "${NODE_NAMES[@]}"; do
        pid_alive "$(slurmd_pid "$node")" && node_ready "$node" || return 1
    done
}

# ---------------------------------------------------------------- commands

# slurmdbd knows gres/gpu (slurmctld registers AccountingStorageTRES at its
# first start with a new database; a QOS naming it is refused before that).
gpu_tres_known() { sacctmgr_list tres format=type,name | grep -qx 'gres|gpu'; }

# The QOS's limits and the account's users. A group that does not resolve
# leaves the users as they were, and Slurm up.
ensure_limits() {
    ensure_qos
    sync_users || log "warning: associations not synchronised; run $0 sync-users once the groups resolve"
}

# check_cluster: the [cluster] settings that name the nodes' network, before
# any of them reaches ip(8): refused with what to set.
check_cluster() {
    [[ $NODES =~ ^[0-9]+$ ]] && [ "$NODES" -le 253 ] ||
        die "[cluster] nodes = $NODES: use 0 to 253"
    [ "$NODES" -gt 0 ] || return 0
    local re='^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$' part
    [[ $NETWORK =~ $re ]] || die "[cluster] network = '$NETWORK': use the first three numbers of a /24, such as \"10.200.0\""
    for part in "${BASH_REMATCH[@]:1}"; do
        [ "$((10#$part))" -le 255 ] || die "[cluster] network = '$NETWORK': $part is not 0 to 255"
    done
    [[ $BRIDGE =~ ^[a-z][a-z0-9_-]{0,14}$ ]] ||
        die "[cluster] bridge = '$BRIDGE': use a link name of up to 15 letters, digits, _ or -"
}

cmd_start() {
    check_cluster
    check_limits
    make_gpu_devices
    net_up
    write_config
    if [ "$SLURM_CHANGED$DBD_CHANGED$DB_CHANGED" = 000 ] && all_up; then
        ensure_limits                              # the fast path
        hub_uid
        return 0
    fi
    ensure_db_packages
    start_munge
    # The database and slurmdbd first, while slurmctld still runs: a changed
    # slurm.conf then costs only the restart of slurmctld and slurmd.
    start_mariadb
    start_slurmdbd
    register_cluster
    # Before slurmctld (re)starts enforcing them; on a new database, once
    # slurmctld has registered the gres/gpu TRES that the QOS limits name.
    local limits=0
    if gpu_tres_known; then ensure_limits; limits=1; fi
    if [ "$SLURM_CHANGED" = 1 ]; then
        # Node and gres definitions need restarts, not `scontrol reconfigure`.
        log "configuration changed, restarting slurmctld and every slurmd"
        stop_slurm_daemons
        net_prune
    fi
    start_slurm_daemons
    if [ "$limits" = 0 ]; then
        wait_for 30 "slurmctld registering the gres/gpu TRES with slurmdbd" gpu_tres_known
        ensure_limits
    fi
    check_gres
    hub_uid
    log "up: login node $LOGIN, compute nodes:"
    sinfo -h -N -O 'NodeList:8,StateLong:12,Gres:20,CPUsState:16,Memory:10' | sed 's/^/    /' >&2
}

cmd_stop() {
    stop_slurm_daemons
    net_down
    rm -rf "$GPU_DEV"
    stop_pidfile "$DBD_PID" slurmdbd
    stop_slow "$MYSQL_PID" mariadbd 60
    stop_pidfile "$MUNGE_PID" munged
}

cmd_status() {
    local rc=0 name pidfile node state
    for name in munged mariadbd slurmdbd slurmctld; do
        case $name in
            munged) pidfile=$MUNGE_PID ;;
            mariadbd) pidfile=$MYSQL_PID ;;
            slurmdbd) pidfile=$DBD_PID ;;
            slurmctld) pidfile=$CTLD_PID ;;
        esac
        if pid_alive "$pidfile"; then
            echo "$name: running (pid $(cat "$pidfile"))"
        else
            echo "$name: stopped"
            rc=3
        fi
    done
    for node in "${NODE_NAMES[@]}"; do
        state=""
        pid_alive "$CTLD_PID" && state=$(node_state "$node")
        pidfile=$(slurmd_pid "$node")
        if pid_alive "$pidfile"; then
            echo "node $node ($(node_addr "$node")): slurmd running (pid $(cat "$pidfile")), ${state:-unknown}"
        else
            echo "node $node ($(node_addr "$node")): slurmd stopped, ${state:-unknown}"
            rc=3
        fi
        case "$state" in
            idle | mixed | allocated | completing) ;;
            *) rc=3 ;;
        esac
    done
    if pid_alive "$CTLD_PID"; then
        sinfo -N -O 'NodeList:12,Partition:10,StateLong:12,Gres:20,GresUsed:30,CPUsState:16,AllocMem:10,Memory:10'
    fi
    return $rc
}

# One start, stop or sync-users at a time.
lock() {
    exec 9>/run/lock/portal-slurm.lock
    flock -w 60 9 || die "another slurm.sh start, stop or sync-users holds /run/lock/portal-slurm.lock"
}

case "${1:-}" in
    start) lock; cmd_start ;;
    stop) lock; cmd_stop ;;
    status) cmd_status ;;
    sync-users) lock; sync_users ;;
    *) echo "usage: $0 start|stop|status|sync-users" >&2; exit 2 ;;
esac
