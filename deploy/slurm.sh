#!/bin/bash
# The embedded one-machine Slurm cluster: munge, slurmctld and slurmd on this
# host, with one node that advertises the [cluster] settings of portal.toml
# (cores, memory, GPUs) whatever the machine really has.
#
#     deploy/slurm.sh start     # write /etc/slurm, start munged, slurmctld, slurmd
#     deploy/slurm.sh stop      # stop them (Slurm's state files are kept)
#     deploy/slurm.sh status    # exit 0 if all run and the node takes jobs, else 3
#
# The configuration lives in /etc/slurm, where the commands look by default,
# so sinfo, squeue, scontrol and sbatch work for every user with no extra
# environment. A slurm.conf that this script did not write is never replaced.
source "$(dirname "$0")/common.sh"

SLURM_ETC=/etc/slurm
SLURM_CONF=$SLURM_ETC/slurm.conf
GRES_CONF=$SLURM_ETC/gres.conf
RUN_DIR=/run/slurm
CTLD_PID=$RUN_DIR/slurmctld.pid
SLURMD_PID=$RUN_DIR/slurmd.pid
STATE_DIR=/var/lib/slurm/slurmctld
SPOOL_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm
MUNGE_KEY=/etc/munge/munge.key
MUNGE_PID=/run/munge/munged.pid
GPU_DEV=/dev/portal-gpu       # fake GPU character devices: ${GPU_DEV}0, 1, ...
MARKER="# Written by deploy/slurm.sh of the Data Scientist Portal."

NODE=$(hostname -s)
CPUS=$PORTAL_CLUSTER_NODE_CPUS
MEM_MB=$PORTAL_CLUSTER_NODE_MEM_MB
GPUS=$PORTAL_CLUSTER_NODE_GPUS
PARTITION=$PORTAL_SLURM_PARTITION
MAX_TIME=$PORTAL_CLUSTER_MAX_TIME

# ---------------------------------------------------------------- processes

# launch COMMAND...: run a daemon that forks itself into the background, with
# no file descriptor of ours but stdout and stderr, which it points at
# /dev/null once detached (not this script's lock, not a pipe of whatever
# called us, which would then wait for the daemon).
launch() {
    (
        local fd
        for fd in "/proc/$BASHPID/fd/"*; do
            fd=${fd##*/}
            if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
        done
        exec "$@" </dev/null
    )
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

# The node's GPU devices: /dev/portal-gpu0..N-1, major 195 like NVIDIA's.
# Slurm needs File= entries to register GPUs, and hands a job's devices to it
# as CUDA_VISIBLE_DEVICES.
make_gpu_devices() {
    local i dev
    for ((i = 0; i < GPUS; i++)); do
        dev=$GPU_DEV$i
        if [ ! -c "$dev" ] || [ "$(stat -c '%t:%T' "$dev")" != "c3:$(printf '%x' "$i")" ]; then
            rm -f "$dev"
            mknod -m 0660 "$dev" c 195 "$i"
        fi
    done
}

render_slurm_conf() {
    local gres=""
    [ "$GPUS" -gt 0 ] && gres=" Gres=gpu:$GPUS"
    cat <<EOF
$MARKER
# Regenerated from portal.toml ([cluster], [slurm]) on every start; edit the
# settings, not this file.
ClusterName=portal
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true

# No cgroups here: processes are tracked by parent pid, nothing is confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# The node advertises the configured cores, memory and GPUs, not the machine's.
SlurmdParameters=config_overrides
# A node that went down (an unclean stop) returns when its slurmd registers.
ReturnToService=2

# Timers: failures show quickly, scancel ends a job within seconds.
MessageTimeout=10
SlurmctldTimeout=120
SlurmdTimeout=300
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

# No accounting daemon; finished jobs are listed in $LOG_DIR/jobcomp.log.
# (AccountingStorageTRES=gres/gpu would need slurmdbd: slurmctld refuses to
# start with it. A job's GPUs show as TresPerNode=gres:gpu:N instead.)
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log

NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM_MB$gres State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=$MAX_TIME State=UP OverSubscribe=NO
EOF
}

render_gres_conf() {
    echo "$MARKER"
    if [ "$GPUS" -gt 0 ]; then
        echo "NodeName=$NODE Name=gpu File=${GPU_DEV}[0-$((GPUS - 1))]"
    fi
}

# write_if_changed FILE CONTENT: write FILE when it differs; status 0 if written.
write_if_changed() {
    local file=$1 content=$2
    [ -f "$file" ] && [ "$(cat "$file")" = "$content" ] && return 1
    if [ -f "$file" ] && ! grep -qxF "$MARKER" "$file"; then
        die "$file was not written by this script; move it away to let the embedded cluster use /etc/slurm"
    fi
    printf '%s\n' "$content" >"$file.tmp"
    chmod 0644 "$file.tmp"
    mv -f "$file.tmp" "$file"
    log "wrote $file"
}

# Write the configuration; status 0 if anything changed.
write_config() {
    local changed=1 conf gres
    conf=$(render_slurm_conf)
    gres=$(render_gres_conf)
    install -d -m 0755 "$SLURM_ETC"
    write_if_changed "$SLURM_CONF" "$conf" && changed=0
    write_if_changed "$GRES_CONF" "$gres" && changed=0
    return $changed
}

# ---------------------------------------------------------------- daemons

# The node's state as sinfo prints it: idle, mixed, allocated, down*, drained...
node_state() { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1 || true; }

node_ready() {
    case "$(node_state)" in
        idle | mixed | allocated | completing) return 0 ;;
        *) return 1 ;;
    esac
}

ctld_ok() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

# slurmd_registered EPOCH: the node's slurmd registered having started at
# EPOCH or later (slurmctld may still show the old registration for a while).
slurmd_registered() {
    local since=$1 started
    started=$(scontrol -o show node "$NODE" 2>/dev/null | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)
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

stop_slurm_daemons() {
    stop_pidfile "$SLURMD_PID" slurmd
    stop_pidfile "$CTLD_PID" slurmctld
}

start_slurm_daemons() {
    install -d -m 0755 "$RUN_DIR" "$LOG_DIR"
    install -d -m 0700 "$STATE_DIR" "$SPOOL_DIR"
    if ! pid_alive "$CTLD_PID"; then
        rm -f "$CTLD_PID"
        log "starting slurmctld"
        launch /usr/sbin/slurmctld -f "$SLURM_CONF"
    fi
    wait_daemon 30 slurmctld "$CTLD_PID" ctld_ok
    if ! pid_alive "$SLURMD_PID"; then
        rm -f "$SLURMD_PID"
        log "starting slurmd"
        local since
        since=$(date +%s)
        launch /usr/sbin/slurmd -f "$SLURM_CONF"
        wait_daemon 30 slurmd "$SLURMD_PID" slurmd_registered "$since"
    fi
    local deadline=$((SECONDS + 60)) state
    until node_ready; do
        state=$(node_state)
        case "$state" in
            *drain* | down | down~ | fail*)
                # Left down or drained by an earlier unclean stop, while its
                # slurmd runs again: put it back in service.
                log "node $NODE is $state, resuming it"
                scontrol update nodename="$NODE" state=resume || true
                ;;
        esac
        [ "$SECONDS" -lt "$deadline" ] ||
            die "node $NODE is '${state:-unknown}', not idle, after 60s (see $LOG_DIR/slurmd.log)"
        sleep 0.2
    done
}

check_gres() {
    [ "$GPUS" -gt 0 ] || return 0
    local gres
    gres=$(sinfo -h -N -n "$NODE" -O 'Gres:40' | tr -d ' ')
    case "$gres" in
        gpu:"$GPUS" | gpu:"$GPUS"\(*) ;;
        *) die "node $NODE shows gres '$gres', expected gpu:$GPUS (see $LOG_DIR/slurmd.log)" ;;
    esac
}

all_up() {
    pid_alive "$MUNGE_PID" && pid_alive "$CTLD_PID" && pid_alive "$SLURMD_PID" && node_ready
}

# ---------------------------------------------------------------- commands

cmd_start() {
    make_gpu_devices
    local changed=1
    write_config && changed=0
    if [ "$changed" -ne 0 ] && all_up; then
        return 0                                   # the fast path
    fi
    start_munge
    if [ "$changed" -eq 0 ] && { pid_alive "$CTLD_PID" || pid_alive "$SLURMD_PID"; }; then
        # Node and gres definitions need restarts, not `scontrol reconfigure`.
        log "configuration changed, restarting slurmctld and slurmd"
        stop_slurm_daemons
    fi
    start_slurm_daemons
    check_gres
    log "up: $(sinfo -h -N -n "$NODE" -O 'NodeList:12,StateLong:12,Gres:20,GresUsed:30,CPUsState:16' | tr -s ' ')"
}

cmd_stop() {
    stop_slurm_daemons
    stop_pidfile "$MUNGE_PID" munged
}

cmd_status() {
    local rc=0 name pidfile
    for name in munged slurmctld slurmd; do
        case $name in
            munged) pidfile=$MUNGE_PID ;;
            slurmctld) pidfile=$CTLD_PID ;;
            slurmd) pidfile=$SLURMD_PID ;;
        esac
        if pid_alive "$pidfile"; then
            echo "$name: running (pid $(cat "$pidfile"))"
        else
            echo "$name: stopped"
            rc=3
        fi
    done
    local state=""
    pid_alive "$CTLD_PID" && state=$(node_state)
    echo "node $NODE: ${state:-unknown}"
    case "$state" in
        idle | mixed | allocated | completing) ;;
        *) rc=3 ;;
    esac
    if [ "$rc" -eq 0 ]; then
        sinfo -N -O 'NodeList:12,Partition:10,StateLong:12,Gres:20,GresUsed:30,CPUsState:16,AllocMem:10,Memory:10'
    fi
    return $rc
}

# One start or stop at a time.
lock() {
    exec 9>/run/lock/portal-slurm.lock
    flock -w 60 9 || die "another slurm.sh start/stop holds /run/lock/portal-slurm.lock"
}

case "${1:-}" in
    start) lock; cmd_start ;;
    stop) lock; cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
