#!/bin/bash
# The embedded Slurm cluster: a login node (this host: munge, MariaDB,
# slurmdbd, slurmctld) and [cluster] nodes compute nodes n1, n2, ..., each in
# network and UTS namespaces of its own (an address on a bridge of this host,
# a hostname, a slurmd). With nodes = 0, this host is the only node.
#
#     deploy/slurm.sh start   # write /etc/slurm, start munged, mariadbd, slurmdbd,
#                             # slurmctld, each slurmd (installs what is missing)
#     deploy/slurm.sh stop    # stop them; remove the namespaces, veths, bridge and
#                             # /etc/hosts block (Slurm's state, the database kept)
#     deploy/slurm.sh status  # exit 0 if all run and the nodes take jobs, else 3
#     deploy/slurm.sh sync-users  # the accounts' users (LDAP groups, root, the hub)
#                                 # and the reservations' (an LDAP group's members)
#
# This script starts and stops processes; deploy/slurm_setup.py writes the files
# (deploy/templates/slurm), computes the accounting changes and says why. To
# start accounting over: stop, remove /var/lib/mysql, start.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

# slurm_py ARGS...: deploy/slurm_setup.py of this repository (-P: not a deploy/
# of the working directory; the settings file is found from it, as common.sh's).
slurm_py() { PYTHONPATH=$REPO_DIR /usr/bin/python3 -B -P -m deploy.slurm_setup "$@"; }
# The paths (SLURM_CONF, CTLD_PID, ...) and nodes (NODES, NODE_NAMES, NODE_ADDR,
# BRIDGE, HOST_ADDR) as deploy/slurm_conf.py names them in its files.
facts=$(slurm_py shell) || exit 1
eval "$facts"
NETNS_MARKS=/run/portal/netns    # one file per namespace this script made
BRIDGE_ALIAS=portal-embedded     # the bridge's alias: only ours is ever deleted

# launch COMMAND...: a daemon that forks itself, with no file descriptor of ours
# (our lock, a pipe of our caller, who would then wait for the daemon).
close_fds() { local fd; for fd in "/proc/$BASHPID/fd/"*; do fd=${fd##*/}; [ "$fd" -le 2 ] || eval "exec $fd>&-"; done; }
launch() { ( close_fds; exec "$@" </dev/null ); }
# launch_bg COMMAND...: the same for a daemon that stays in the foreground.
launch_bg() { ( close_fds; exec setsid "$@" </dev/null >/dev/null 2>&1 ) & }

# start_daemon PIDFILE NAME COMMAND...: run COMMAND unless the daemon runs.
start_daemon() {
    local pidfile=$1 name=$2; shift 2
    pid_alive "$pidfile" || { rm -f "$pidfile"; log "starting $name"; "$@"; }
}

# stop_slow PIDFILE NAME SECONDS: TERM, wait up to SECONDS, then KILL (mariadbd
# may need more than stop_pidfile's 10 s to stop cleanly).
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

# wait_daemon SECONDS NAME PIDFILE COMMAND...: wait for COMMAND to succeed,
# failing early (with the end of the daemon's log) when the daemon has died.
wait_daemon() {
    local seconds=$1 name=$2 pidfile=$3 start=$SECONDS; shift 3
    until "$@" >/dev/null 2>&1; do
        if [ $((SECONDS - start)) -ge 2 ] && ! pid_alive "$pidfile"; then
            tail -n 5 "$LOG_DIR/$name.log" >&2 || true
            die "$name exited (see $LOG_DIR/$name.log)"
        fi
        [ $((SECONDS - start)) -lt "$seconds" ] || die "$name not ready within ${seconds}s (see $LOG_DIR/$name.log)"
        sleep 0.2
    done
}

# `ip netns exec` is not used: it remounts /sys, and slurmd then fails on cgroups.
in_node() { local node=$1; shift; nsenter --net="/var/run/netns/$node" "$@"; }
our_bridge() { ip -d link show "$BRIDGE" 2>/dev/null | grep -q "alias $BRIDGE_ALIAS"; }

# The bridge, each node's namespace, veth pair pnI/eth0 and /etc/hosts name.
# Idempotent: what exists is kept.
net_up() {
    [ "$NODES" -gt 0 ] || { net_down; return 0; }  # what an earlier start made goes
    local node addr
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        log "creating bridge $BRIDGE ($HOST_ADDR/24)"
        ip link add "$BRIDGE" type bridge
        ip link set "$BRIDGE" alias "$BRIDGE_ALIAS"
    fi
    our_bridge || die "[cluster] bridge = '$BRIDGE' is an existing link this script did not make; name another"
    ip addr replace "$HOST_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for node in "${NODE_NAMES[@]}"; do
        addr=${NODE_ADDR[$node]}
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
    done
    slurm_py hosts
}
net_down() {
    remove_namespaces
    if our_bridge; then ip link del "$BRIDGE"; log "removed bridge $BRIDGE"; fi
    slurm_py hosts --remove
}

# remove_namespaces [KEEP...]: remove each namespace this script made but those
# named, its processes first (a job's steps outlive a stopped slurmd).
remove_namespaces() {
    local node pids mark; local -A keep=()
    for node in "$@"; do keep[$node]=1; done
    for mark in "$NETNS_MARKS"/*; do
        node=${mark##*/}
        { [ -e "$mark" ] && [ -z "${keep[$node]:-}" ]; } || continue
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

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
db_sql() { mariadb --no-defaults --socket="$MYSQL_SOCK" -u root -N -B "$@"; }
db_ok() { [ "$(db_sql -e 'SELECT 1' 2>/dev/null)" = 1 ]; }
sacctmgr_list() { timeout 10 sacctmgr -n -P list "$@" 2>/dev/null; }
dbd_ok() { sacctmgr_list cluster format=cluster >/dev/null; }
# slurmctld registers gres/gpu at its first start with a new database.
gpu_tres_known() { sacctmgr_list tres format=type,name | grep -qx 'gres|gpu'; }
ctld_ok() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
node_state() { sinfo -h -N -n "$1" -o '%T' 2>/dev/null | head -n1 || true; }
slurmd_pid() { echo "$RUN_DIR/slurmd-$1.pid"; }

start_mariadb() {
    if [ "$DB_CHANGED" = 1 ] && pid_alive "$MYSQL_PID"; then
        log "$MYSQL_CNF changed, restarting mariadbd"
        stop_slow "$MYSQL_PID" mariadbd 60
    fi
    if ! pid_alive "$MYSQL_PID"; then
        if [ ! -d "$MYSQL_DATA/mysql" ]; then
            log "empty $MYSQL_DATA: initialising it (mariadb-install-db)"
            mariadb-install-db --defaults-file="$MYSQL_CNF" --user=mysql --datadir="$MYSQL_DATA" \
                --auth-root-authentication-method=socket --skip-test-db >>"$MYSQL_LOG" 2>&1 ||
                die "mariadb-install-db failed (see $MYSQL_LOG)"
        fi
        start_daemon "$MYSQL_PID" mariadbd launch_bg /usr/sbin/mariadbd --defaults-file="$MYSQL_CNF"
        wait_for 30 "mariadbd writing $MYSQL_PID (see $MYSQL_LOG)" test -s "$MYSQL_PID"
    fi
    wait_daemon 60 mariadb "$MYSQL_PID" db_ok
    # The password reaches the client on stdin, never on a command line.
    slurm_py db-sql | db_sql || die "creating the database of slurmdbd and its user failed"
}

start_slurmdbd() {
    if [ "$DBD_CHANGED" = 1 ] && pid_alive "$DBD_PID"; then
        log "$SLURMDBD_CONF changed, restarting slurmdbd"
        stop_pidfile "$DBD_PID" slurmdbd
    fi
    start_daemon "$DBD_PID" slurmdbd launch /usr/sbin/slurmdbd
    wait_daemon 120 slurmdbd "$DBD_PID" dbd_ok  # its first start creates the tables
}

# slurm_users sync-users|ensure-limits...: once the hub's account has a uid.
slurm_users() { [ -z "${PORTAL_HUB_USER:-}" ] || ensure_service_accounts; slurm_py "$@"; }

# Every slurmd (of nodes configured now or earlier, or single-host), slurmctld.
stop_slurm_daemons() {
    local pidfile
    for pidfile in "$RUN_DIR"/slurmd-*.pid "$RUN_DIR/slurmd.pid"; do
        [ ! -e "$pidfile" ] || stop_pidfile "$pidfile" "$(basename "$pidfile" .pid)"
    done
    stop_pidfile "$CTLD_PID" slurmctld
}

# start_slurmd NODE: in the node's namespaces (hostname, network), or on this host.
start_slurmd() {
    local node=$1 pidfile; pidfile=$(slurmd_pid "$1")
    if [ "$NODES" -gt 0 ]; then
        # shellcheck disable=SC2016
        start_daemon "$pidfile" "slurmd of $node" launch nsenter --net="/var/run/netns/$node" unshare --uts \
            sh -c 'hostname "$1" && exec /usr/sbin/slurmd -f "$2" -N "$1"' sh "$node" "$SLURM_CONF"
    else
        start_daemon "$pidfile" "slurmd of $node" launch /usr/sbin/slurmd -f "$SLURM_CONF" -N "$node"
    fi
}

start_slurm_daemons() {
    local node since started=()
    start_daemon "$CTLD_PID" slurmctld launch /usr/sbin/slurmctld -f "$SLURM_CONF"
    wait_daemon 30 slurmctld "$CTLD_PID" ctld_ok
    since=$(date +%s)
    for node in "${NODE_NAMES[@]}"; do
        pid_alive "$(slurmd_pid "$node")" && continue
        start_slurmd "$node"
        started+=("$node")
    done
    for node in "${started[@]}"; do
        wait_daemon 30 "slurmd-$node" "$(slurmd_pid "$node")" slurm_py registered "$node" "$since"
    done
    slurm_py nodes-ready --wait 60  # resuming a node an unclean stop left down
}

all_up() {
    local node
    pid_alive "$MUNGE_PID" && pid_alive "$MYSQL_PID" && pid_alive "$DBD_PID" && pid_alive "$CTLD_PID" || return 1
    for node in "${NODE_NAMES[@]}"; do pid_alive "$(slurmd_pid "$node")" || return 1; done
    slurm_py nodes-ready
}

cmd_start() {
    local changes limits=0
    slurm_py check
    slurm_py gpu-devices
    net_up
    changes=$(slurm_py write-config)  # 1 where Slurm's, slurmdbd's, mariadbd's files changed
    read -r SLURM_CHANGED DBD_CHANGED DB_CHANGED <<<"$changes"
    if [ "$SLURM_CHANGED$DBD_CHANGED$DB_CHANGED" = 000 ] && all_up; then
        slurm_users ensure-limits --script "$0"  # the fast path
        slurm_py reservations || log "warning: reservations not synchronised; run $0 sync-users"
        slurm_py hub-uid
        return 0
    fi
    slurm_py packages  # slurmdbd, mariadb-server
    slurm_py layout
    start_daemon "$MUNGE_PID" munged launch runuser -u munge -- /usr/sbin/munged --force
    wait_for 15 "munge credentials" munge_ok
    # The database and slurmdbd first, while slurmctld still runs: a changed
    # slurm.conf then costs only the restart of slurmctld and slurmd.
    start_mariadb
    start_slurmdbd
    slurm_py register  # with the QOS names slurm.conf gives (a partition's, DenyQos)
    # Before slurmctld (re)starts enforcing them; on a new database, once
    # slurmctld has registered the gres/gpu TRES that the QOS limits name.
    if gpu_tres_known; then slurm_users ensure-limits --script "$0"; limits=1; fi
    if [ "$SLURM_CHANGED" = 1 ]; then
        # Node and gres definitions need restarts, not `scontrol reconfigure`.
        log "configuration changed, restarting slurmctld and every slurmd"
        stop_slurm_daemons
        remove_namespaces "${NODE_NAMES[@]}"  # of nodes no longer configured
    fi
    start_slurm_daemons
    if [ "$limits" = 0 ]; then
        wait_for 30 "slurmctld registering the gres/gpu TRES with slurmdbd" gpu_tres_known
        slurm_users ensure-limits --script "$0"
    fi
    slurm_py check-gres
    # Once slurmctld knows the nodes they hold.
    slurm_py reservations || log "warning: reservations not synchronised; run $0 sync-users"
    slurm_py hub-uid
    log "up: login node $(hostname -s), compute nodes:"
    sinfo -h -N -O 'NodeList:6,Partition:8,StateLong:12,Gres:24,CPUsState:16,Memory:10' | sed 's/^/    /' >&2
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
    for name in munged:"$MUNGE_PID" mariadbd:"$MYSQL_PID" slurmdbd:"$DBD_PID" slurmctld:"$CTLD_PID"; do
        pidfile=${name#*:} name=${name%%:*}
        if pid_alive "$pidfile"; then echo "$name: running (pid $(cat "$pidfile"))"; else echo "$name: stopped"; rc=3; fi
    done
    for node in "${NODE_NAMES[@]}"; do
        state="" pidfile=$(slurmd_pid "$node")
        pid_alive "$CTLD_PID" && state=$(node_state "$node")
        if pid_alive "$pidfile"; then state="running (pid $(cat "$pidfile")), ${state:-unknown}"; else state="stopped, ${state:-unknown}"; rc=3; fi
        echo "node $node (${NODE_ADDR[$node]}): slurmd $state"
    done
    pid_alive "$CTLD_PID" || return 3
    slurm_py nodes-ready || rc=3
    sinfo -N -O 'NodeList:12,Partition:10,StateLong:12,Gres:24,GresUsed:34,CPUsState:16,AllocMem:10,Memory:10'
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
    sync-users) lock; slurm_users sync-users || exit 1 ;;
    *) echo "usage: $0 start|stop|status|sync-users" >&2; exit 2 ;;
esac
