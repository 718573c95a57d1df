#!/usr/bin/env bash
# `make purge`: back to a machine where `make up` never ran. Every job and
# the portal's processes stop here; then deploy/purge.py removes what `make
# up` and the tests made (and says what it keeps: packages, environments).
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

SERVICE_USERS=("$PORTAL_HUB_USER" "$PORTAL_HUB_PROXY_USER")

# Every job (the tests', the bench's, the users'), then the daemons.
stop_everything() {
    if [ "$PORTAL_CLUSTER_EMBEDDED" = 1 ] && command -v squeue >/dev/null && scontrol ping >/dev/null 2>&1; then
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            log "cancelling $(wc -w <<<"$jobs") jobs"
            # shellcheck disable=SC2086
            scancel $jobs || true
            for _ in $(seq 300); do
                [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
                sleep 0.2
            done
        fi
    fi
    "$DEPLOY_DIR/cluster.sh" down || log "warning: make down failed; going on"
    local user
    for user in "${SERVICE_USERS[@]}"; do   # test and bench hubs, services, proxies
        id -u "$user" >/dev/null 2>&1 || continue
        pkill -TERM -u "$user" 2>/dev/null || true
    done
    sleep 1
    for user in "${SERVICE_USERS[@]}"; do
        pkill -KILL -u "$user" 2>/dev/null || true
    done
    pkill -KILL -x slurmstepd 2>/dev/null || true
}

start=$SECONDS
stop_everything
deploy_py purge files
log "purged in $((SECONDS - start)) s: packages and $PORTAL_ENVS_PREFIX kept; make up starts afresh"
