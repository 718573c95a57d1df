# shellcheck shell=bash
# Sourced by the deploy scripts: the repository, the merged site settings as
# PORTAL_* variables, and small helpers. Run as root.
set -euo pipefail

DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$DEPLOY_DIR")
eval "$(/usr/bin/python3 "$REPO_DIR/portal/settings.py" --shell)"

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# wait_for SECONDS DESCRIPTION COMMAND...: retry COMMAND every 0.2 s.
wait_for() {
    local seconds=$1 what=$2; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || die "$what did not happen within ${seconds}s"
        sleep 0.2
    done
}

# proc_alive PID [COMM]: the process runs (and is named COMM). A zombie counts
# as gone: where pid 1 reaps orphans late (as here), a stopped daemon lingers
# as a zombie and kill -0 still succeeds on it.
proc_alive() {
    local state
    [ -n "$1" ] || return 1
    state=$(sed -E 's/.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] || return 1
    [ -z "${2:-}" ] || [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]
}

# pid_alive PIDFILE [COMM]: the process named in PIDFILE runs (and is COMM).
pid_alive() { proc_alive "$(cat "$1" 2>/dev/null)" "${2:-}"; }

# stop_pidfile PIDFILE NAME [COMM]: TERM the process, wait up to 10 s, then KILL.
stop_pidfile() {
    local pidfile=$1 name=$2 comm=${3:-} pid
    pid_alive "$pidfile" "$comm" || { rm -f "$pidfile"; return 0; }
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do proc_alive "$pid" "$comm" || break; sleep 0.1; done
    if proc_alive "$pid" "$comm"; then
        log "$name did not stop, killing it"
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
    log "$name stopped"
}

# ensure_account NAME: a system account with no login and no home.
ensure_account() {
    id -u "$1" >/dev/null 2>&1 && return 0
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin "$1" || die "could not create the system account $1"
    log "created the system account $1"
}

# The portal's service accounts ([hub] user and proxy_user), made before
# anything names them: Slurm resolves a user's uid when it first hears of
# the user, and keeps one it could not resolve as invalid (every request of
# the hub's account was then refused until slurmctld reloaded).
ensure_service_accounts() {
    ensure_account "$PORTAL_HUB_USER"
    ensure_account "$PORTAL_HUB_PROXY_USER"
}

# deploy_py MODULE ARGS...: a module of deploy/ (the configuration files and
# the changes, computed in Python), with Debian's python3 and no environment.
deploy_py() { PYTHONPATH=$REPO_DIR /usr/bin/python3 -P -m "deploy.$1" "${@:2}"; }

[ "$(id -u)" -eq 0 ] || die "run as root (the one-machine cluster starts system daemons)"
