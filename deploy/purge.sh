#!/usr/bin/env bash
# `make purge`: back to a machine where `make up` never ran, so that the next
# `make up` or `make test` is a first start (.ci/run starts with it: a warm
# machine has hidden first-start bugs before). Removes what `make up` and the
# tests made: every job and the portal's processes, the hubs' state, the
# service accounts (portal, portal-proxy), the sudoers rules, the extension
# helper and the hubs' registrations with it, the certificates
# and the local CA, and, for the embedded cluster ([cluster] embedded), the
# LDAP directory with the demo and test accounts and their homes, Slurm's
# state and configuration, the accounting database (MariaDB's data), the
# munge key, the nodes (namespaces, bridge, /etc/hosts lines, GPU device
# files, Slurm's cgroups) and the shared data links. Keeps the installed
# Debian packages and the Python environments under [envs] prefix (rebuilt
# only when their lists change). A site's own files (a slurm.conf, a
# certificate or data that the portal did not make) are never removed.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

STATE_ROOT=$(dirname "$PORTAL_HUB_STATE_DIR")   # /var/lib/portal: every hub's state
LDAP_DIR=$PORTAL_CLUSTER_LDAP_DIR
HOME_ROOT=$PORTAL_CLUSTER_HOME_ROOT
MARKER="# Written by deploy/slurm.sh of the Data Scientist Portal."
SERVICE_USERS=("$PORTAL_HUB_USER" "$PORTAL_HUB_PROXY_USER")

embedded() { [ "$PORTAL_CLUSTER_EMBEDDED" = 1 ]; }

# Every job (the tests', the bench's, the users'), then the daemons.
stop_everything() {
    if embedded && command -v squeue >/dev/null && scontrol ping >/dev/null 2>&1; then
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

# The LDAP people's homes under [cluster] home_root that are theirs (owned
# by their uid), with their files in /tmp: read from the directory itself
# (slapcat, whether slapd runs or not) before it goes.
remove_people() {
    local conf=$LDAP_DIR/slapd.conf name uid home
    [ -f "$conf" ] || return 0
    while IFS=: read -r name uid home; do
        [[ $name =~ ^[a-z_][a-z0-9_-]*$ && $uid =~ ^[0-9]+$ ]] || continue
        [ "$uid" -ge 1000 ] || continue
        find /tmp /var/tmp /dev/shm -xdev -uid "$uid" -delete 2>/dev/null || true
        case "$home" in "$HOME_ROOT"/*) ;; *) continue ;; esac
        if [ -d "$home" ] && [ ! -L "$home" ] && [ "$(stat -c %u "$home")" = "$uid" ]; then
            rm -rf "$home"
            log "removed $home"
        fi
    done < <(slapcat -f "$conf" -b "$PORTAL_LDAP_BASE_DN" -a '(objectClass=posixAccount)' 2>/dev/null |
        awk -F': ' '/^uid: /{u=$2} /^uidNumber: /{n=$2} /^homeDirectory: /{h=$2}
                    /^$/{if (u != "") print u ":" n ":" h; u=n=h=""}')
}

# remove_ours FILE...: each file that deploy/slurm.sh wrote (it holds the marker).
remove_ours() {
    local file
    for file in "$@"; do
        if [ -f "$file" ] && grep -qxF "$MARKER" "$file"; then
            rm -f "$file"
            log "removed $file"
        fi
    done
}

purge_cluster() {
    remove_people
    rm -rf "$LDAP_DIR" "$PORTAL_CLUSTER_ACCOUNTS_FILE"
    # nslcd resolves no one without slapd: NSS goes back to files alone
    [ -f /etc/nsswitch.conf ] && sed -i -E '/^(passwd|group|shadow):/s/[[:space:]]+ldap\b//' /etc/nsswitch.conf
    # *.localhost back to what the resolver makes of it (hub.sh local_names)
    [ -f /etc/nsswitch.conf ] && sed -i -E '/^hosts:/s/[[:space:]]+myhostname\b//' /etc/nsswitch.conf
    remove_ours /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/cgroup.conf \
        /etc/slurm/job_container.conf \
        /etc/slurm/slurmdbd.conf /etc/mysql/portal-slurm.cnf
    rm -f /etc/slurm/slurmdbd.password
    rm -rf /var/lib/slurm/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm /var/lib/mysql \
        /run/mysqld /etc/munge/munge.key /run/portal/netns /dev/portal-gpu
    local cg
    for cg in /sys/fs/cgroup/*/slurm_*; do   # left by the nodes' slurmd
        [ -d "$cg" ] || continue
        find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || log "warning: $cg is still in use"
    done
    # the shared data folder, where it holds only the links data.sh made
    local data=$PORTAL_DATA_SHARED_DATA
    if [ -n "$data" ] && [ -d "$data" ]; then
        find "$data" -mindepth 1 -maxdepth 1 -type l -lname '/usr/share/datasets/*' -delete
        if rmdir "$data" 2>/dev/null; then log "removed $data"; fi
    fi
}

# The certificates, where the portal made them (its CA's key beside the CA).
purge_tls() {
    local ca_dir
    ca_dir=$(dirname "$PORTAL_TLS_CA_CERT")
    [ -f "$ca_dir/ca.key" ] || { log "[tls] files are a site's own: kept"; return 0; }
    rm -f "$PORTAL_TLS_CA_CERT" "$ca_dir/ca.key" "$ca_dir/ca.srl" "$PORTAL_TLS_CERT" "$PORTAL_TLS_KEY" \
        "$(dirname "$PORTAL_TLS_KEY")/proxy.key"
    rmdir "$ca_dir" "$(dirname "$ca_dir")" 2>/dev/null || true
    if [ -f /usr/local/share/ca-certificates/data-scientist-portal.crt ]; then
        rm -f /usr/local/share/ca-certificates/data-scientist-portal.crt
        update-ca-certificates --fresh >/dev/null 2>&1 || log "warning: update-ca-certificates failed"
    fi
    log "removed the local CA and the portal's certificate"
}

purge_portal() {
    rm -rf "$STATE_ROOT" /run/portal /var/log/portal /etc/sudoers.d/portal
    extend_helper_facts
    rm -rf "$EXTEND_REGISTRY" "$EXTEND_HELPER"
    rmdir "$(dirname "$EXTEND_HELPER")" "$(dirname "$EXTEND_REGISTRY")" 2>/dev/null || true
    local user
    for user in "${SERVICE_USERS[@]}"; do
        id -u "$user" >/dev/null 2>&1 || continue
        userdel "$user" 2>/dev/null || log "warning: userdel $user failed"
        if getent group "$user" >/dev/null; then groupdel "$user" 2>/dev/null || true; fi
        log "removed the system account $user"
    done
}

start=$SECONDS
stop_everything
embedded && purge_cluster
purge_tls
purge_portal
log "purged in $((SECONDS - start)) s: packages and $PORTAL_ENVS_PREFIX kept; make up starts afresh"
