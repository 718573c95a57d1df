#!/usr/bin/env bash
# The hub and its proxy: start | stop | restart (the hub alone) | status.
# `start` and `restart` pass any further arguments to jupyterhub (the
# benchmarks' lightweight sessions); `proxy` starts the proxy alone (the
# benchmarks' stock-batchspawner hub, which bench/hubs.py runs itself).
# configurable-http-proxy runs on its own so that restarting the hub keeps
# every session reachable.
#
# Least privilege: this script runs as root only to prepare. The hub (and the
# admin service it starts) runs as [hub] user, the proxy as [hub] proxy_user,
# both system accounts made here, each with an explicit environment (nothing
# of the caller's). The hub's elevated actions are the sudoers rules written
# here: sbatch and scancel as members of the portal's groups, never root; and,
# as root, the helper portal-extend (installed here, root's), which lengthens
# a running session after checking it again (portal/helper/extend.py). The hub
# holds no Slurm admin level (deploy/slurm.sh).
# The proxy's token is made anew whenever the proxy starts (so at every
# `make up`), in a file only the hub's account reads; the proxy alone gets
# it, in its environment.
# Inside the cluster ([tls] internal, JupyterHub's internal_ssl) the hub,
# the proxy, the admin service and the sessions speak mutual TLS: the hub's
# internal CAs and certificates are made in its state folder by the hub's
# account (`jupyterhub --generate-certs`, with the hub's own configuration)
# before the proxy starts, and the proxy gets copies, its keys readable by
# its account alone.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

STATE=$PORTAL_HUB_STATE_DIR
HUB_ENV=$PORTAL_ENVS_PREFIX/envs/hub
# Pid files and the proxy's log in folders of root's: root never writes by
# path into the state folder, which the hub's account owns (a link planted
# there would have root write any file).
RUN_DIR=/run/portal/$(basename "$STATE")
PROXY_PID=$RUN_DIR/proxy.pid
PROXY_INTERNAL=$RUN_DIR/proxy.internal-tls   # the running proxy's [tls] internal (1 or 0)
HUB_PID=$RUN_DIR/jupyterhub.pid
PROXY_LOG=/var/log/portal/$(basename "$STATE")-proxy.log
HUB_LOG=$STATE/jupyterhub.log   # opened by the hub's account itself
# Pid files of an earlier version, which kept them (root's) in the state folder.
for name in proxy.pid jupyterhub.pid; do
    if [ -f "$STATE/$name" ] && [ ! -L "$STATE/$name" ] && [ "$(stat -c %u "$STATE/$name")" = 0 ]; then
        install -d -m 0755 /run/portal "$RUN_DIR"
        mv -f "$STATE/$name" "$RUN_DIR/$name"
    fi
done
HUB_USER=$PORTAL_HUB_USER
PROXY_USER=$PORTAL_HUB_PROXY_USER
PROXY_KEY=$(dirname "$PORTAL_TLS_KEY")/proxy.key   # the proxy's copy of the TLS key
PROXY_TLS_DIR=$RUN_DIR/proxy-tls   # the proxy's copies of its internal certificates
SUDOERS=/etc/sudoers.d/portal
SLURM_BIN=/usr/bin
extend_helper_facts   # EXTEND_HELPER, EXTEND_REGISTRY, EXTEND_ARGS

# clean_env NAME...: drop every exported variable but NAMEs (in a subshell
# that then execs): the hub and the proxy inherit nothing of the caller's.
clean_env() {
    local name keep=" $* "
    for name in $(compgen -e); do
        [[ $keep == *" $name "* ]] || unset "$name" 2>/dev/null || true
    done
    export PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8
}
URL=$("$HUB_ENV/bin/python" -c 'import sys; from portal import settings; print(settings.public_url(settings.load()))')
INTERNAL_CERTS=$("$HUB_ENV/bin/python" -c 'from portal import settings; print(settings.internal_certs_location(settings.load()))')

# The notebook templates, where sessions copy them from (world-readable),
# replaced whole so a session never sees half a copy.
install_templates() {
    local dest=$PORTAL_ENVS_PREFIX/notebook_templates
    if [ -d "$dest" ] && diff -rq "$REPO_DIR/notebook_templates" "$dest" >/dev/null 2>&1; then
        return 0
    fi
    rm -rf "$dest.new"
    cp -r "$REPO_DIR/notebook_templates" "$dest.new"
    chmod -R a+rX "$dest.new"
    rm -rf "$dest.old"
    [ -d "$dest" ] && mv "$dest" "$dest.old"
    mv "$dest.new" "$dest"
    rm -rf "$dest.old"
    log "notebook templates installed in $dest"
}

# The root helper that lengthens a session: a copy of portal/helper/extend.py,
# root's and 0755, in a folder of root's. What sudo runs as root must be
# writable by root alone, however writable the repository is; the helper
# runs under `/usr/bin/python3 -I` and imports the standard library only.
install_extend_helper() {
    local source=$REPO_DIR/portal/helper/extend.py
    install -d -m 0755 -o root -g root "$(dirname "$EXTEND_HELPER")"
    if [ -f "$EXTEND_HELPER" ] && [ ! -L "$EXTEND_HELPER" ] && cmp -s "$source" "$EXTEND_HELPER" &&
        [ "$(stat -c %u:%a "$EXTEND_HELPER")" = 0:755 ]; then
        return 0
    fi
    install -m 0755 -o root -g root "$source" "$EXTEND_HELPER.tmp"
    mv -f "$EXTEND_HELPER.tmp" "$EXTEND_HELPER"
    log "installed $EXTEND_HELPER"
}

# This hub's registration with the helper, EXTEND_REGISTRY/JOB_NAME.json
# (root's, 0644): its sessions' job name and their users' groups and uids,
# from the settings this start uses. The helper extends only jobs of a
# registered name; each hub (the demo's, the tests', the benchmarks') has
# its own job name and so its own file.
register_hub() {
    local content file
    content=$("$HUB_ENV/bin/python" -c 'from portal import settings; print(settings.extend_registration(settings.load()))') ||
        die "cannot register this hub with $EXTEND_HELPER: fix the setting named above"
    file=$EXTEND_REGISTRY/$PORTAL_SLURM_JOB_NAME.json   # a plain name: checked just now
    install -d -m 0755 -o root -g root "$EXTEND_REGISTRY"
    if [ -f "$file" ] && [ ! -L "$file" ] && [ "$(cat "$file")" = "$content" ]; then
        return 0
    fi
    rm -f "$file.tmp"
    printf '%s\n' "$content" >"$file.tmp"
    chown root:root "$file.tmp"
    chmod 0644 "$file.tmp"
    mv -f "$file.tmp" "$file"
    log "registered the sessions named $PORTAL_SLURM_JOB_NAME with $EXTEND_HELPER ($file)"
}

# The sudoers rules of the hub's account, no password, with a reset
# environment: exactly Slurm's sbatch and scancel, as members of the
# portal's groups only (never root); and the helper, as root, with three
# whole numbers as its arguments (a POSIX regular expression, sudo 1.9.10 or
# later). sudo's match is a first filter only: the helper checks its
# arguments and the job itself again. Checked with visudo before installed.
render_sudoers() {
    local groups group runas=""
    groups=$("$HUB_ENV/bin/python" -c 'from portal import settings; print(" ".join(settings.portal_groups(settings.load())))')
    for group in $groups; do runas+="%$group, "; done
    printf '%s\n' \
        "# Written by deploy/hub.sh of the Data Scientist Portal on every start, from" \
        "# portal.toml ([hub] user, [ldap] allowed_groups); edit the settings." \
        "Runas_Alias PORTAL_USERS = ${runas}!root" \
        "Cmnd_Alias PORTAL_SLURM = $SLURM_BIN/sbatch, $SLURM_BIN/scancel" \
        "Cmnd_Alias PORTAL_EXTEND = $EXTEND_HELPER $EXTEND_ARGS" \
        "Defaults:$HUB_USER env_reset, !setenv, !lecture" \
        "$HUB_USER ALL = (PORTAL_USERS) NOPASSWD: PORTAL_SLURM" \
        "$HUB_USER ALL = (root) NOPASSWD: PORTAL_EXTEND"
}

install_sudoers() {
    local content
    content=$(render_sudoers)
    [ -f "$SUDOERS" ] && [ "$(cat "$SUDOERS")" = "$content" ] && return 0
    printf '%s\n' "$content" >"$SUDOERS.tmp"
    chmod 0440 "$SUDOERS.tmp"
    visudo -c -q -f "$SUDOERS.tmp" || { rm -f "$SUDOERS.tmp"; die "the sudoers rule is not valid (visudo -c)"; }
    mv -f "$SUDOERS.tmp" "$SUDOERS"
    log "wrote $SUDOERS"
}

as_hub_user() { setpriv --reuid="$HUB_USER" --regid="$HUB_USER" --init-groups "$@"; }

# The hub's account must read the repository and the settings it is given.
check_readable() {
    local path
    for path in "$REPO_DIR/jupyterhub_config.py" ${PORTAL_CONFIG:+"$PORTAL_CONFIG"}; do
        as_hub_user test -r "$path" ||
            die "$path is not readable by the hub's account $HUB_USER: keep the repository and the settings world-readable (not under /root)"
    done
}

is_https() { [[ $PORTAL_HUB_BIND_URL == https://* ]]; }
is_internal_tls() { [ "$PORTAL_TLS_INTERNAL" = 1 ]; }

# In a subshell about to exec as the hub's account: its state folder, and
# its own environment alone (PATH, LANG, PORTAL_CONFIG, HOME), with this
# checkout first on its Python path (the hub runs this repository's
# configuration and imports this repository's code, whatever copy of the
# portal package its environment holds).
enter_hub_env() {
    cd "$STATE" && clean_env PORTAL_CONFIG && export HOME="$STATE" PYTHONPATH="$REPO_DIR" && umask 077
}

# Names under .localhost ([hub] domain portal.localhost: the hub and every
# NAME.portal.localhost) are loopback for this host's programs too, as they
# are for browsers: NSS's myhostname module (libnss-myhostname) after files.
local_names() {
    [[ $PORTAL_HUB_DOMAIN == localhost || $PORTAL_HUB_DOMAIN == *.localhost ]] || return 0
    grep -Eq '^hosts:.*[[:space:]]myhostname([[:space:]]|$)' /etc/nsswitch.conf && return 0
    sed -i -E 's/^(hosts:[[:space:]]+files)/\1 myhostname/' /etc/nsswitch.conf
    log "added myhostname to hosts in /etc/nsswitch.conf (*.localhost resolves to loopback)"
}

prepare() {
    local_names
    install_templates
    ensure_service_accounts
    install_extend_helper
    register_hub
    install_sudoers
    check_readable
    # The hub's state (database, cookie secret, proxy token, log): its account
    # only. (chown -R and chmod -R follow no link.)
    install -d -m 0700 -o "$HUB_USER" -g "$HUB_USER" "$STATE"
    chown -R "$HUB_USER:$HUB_USER" "$STATE"
    chmod -R go-rwx "$STATE"
    install -d -m 0755 -o root -g root /run/portal "$RUN_DIR" /var/log/portal
    [ -f "$PROXY_LOG" ] || install -m 0600 -o "$PROXY_USER" -g "$PROXY_USER" /dev/null "$PROXY_LOG"
    if is_https; then
        "$DEPLOY_DIR/tls.sh" ensure
        "$DEPLOY_DIR/tls.sh" key-copy "$PROXY_USER" "$PROXY_KEY"
    fi
}

# A new proxy token, for a proxy about to start: printed, and written to the
# hub's file by the hub's account itself (through stdin, never argv).
new_proxy_token() {
    local token
    token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    printf '%s' "$token" | as_hub_user sh -c 'umask 077 && cat >"$1.tmp" && mv -f "$1.tmp" "$1"' sh "$STATE/proxy_token" ||
        die "could not write $STATE/proxy_token as $HUB_USER"
    printf '%s' "$token"
}

# The hub's internal CAs and the certificates of the hub and the proxy,
# made when missing by the hub's account with the hub's configuration (its
# names, its folder, $INTERNAL_CERTS), kept across restarts: the proxy and
# the sessions outlive the hub. Then the proxy's copies in a folder of
# root's, read through the hub's account (root reads nothing by path in the
# state folder, where a link could point anywhere): its keys for its account
# alone (0400), the certificates and CAs world-readable. Its API takes a
# client certificate of the hub's CA alone (only the hub calls it); as a
# client it trusts the CAs of the hub and of the sessions and services.
internal_certs() {
    local name from to output
    if ! as_hub_user test -s "$INTERNAL_CERTS/proxy-client/proxy-client.key"; then
        log "making the hub's internal CAs and certificates in $INTERNAL_CERTS"
        output=$(enter_hub_env && exec setpriv --reuid="$HUB_USER" --regid="$HUB_USER" --init-groups --inh-caps=-all -- \
            "$HUB_ENV/bin/jupyterhub" --generate-certs -f "$REPO_DIR/jupyterhub_config.py" 2>&1) ||
            { printf '%s\n' "$output" >&2; die "jupyterhub --generate-certs failed; its output is above"; }
    fi
    install -d -m 0755 -o root -g root "$PROXY_TLS_DIR"
    for name in proxy-api proxy-client; do
        as_hub_user cat "$INTERNAL_CERTS/$name/$name.key" |
            "$DEPLOY_DIR/tls.sh" key-copy "$PROXY_USER" "$PROXY_TLS_DIR/$name.key" -
    done
    for from in proxy-api/proxy-api.crt proxy-client/proxy-client.crt hub-ca/hub-ca.crt proxy-client-ca_trust.crt; do
        to=$PROXY_TLS_DIR/$(basename "$from")
        as_hub_user cat "$INTERNAL_CERTS/$from" >"$to.tmp" || die "cannot read $INTERNAL_CERTS/$from as $HUB_USER"
        chmod 0644 "$to.tmp"
        mv -f "$to.tmp" "$to"
    done
}

# A running proxy started with the other [tls] internal would refuse the hub
# (or the hub it): say so before anything stops. (One started before there
# was a choice speaks plain HTTP inside.)
check_running_proxy() {
    pid_alive "$PROXY_PID" || return 0
    local running
    running=$(cat "$PROXY_INTERNAL" 2>/dev/null || echo 0)
    [ "$running" = "$PORTAL_TLS_INTERNAL" ] ||
        die "the running proxy was started with [tls] internal = $([ "$running" = 1 ] && echo true || echo false): stop it with the hub (deploy/hub.sh stop), and the running sessions, then start again"
}

start_proxy() {
    pid_alive "$PROXY_PID" && return 0
    local bind host port
    bind=${PORTAL_HUB_BIND_URL#*://}; bind=${bind%%/*}
    host=${bind%:*}; port=${bind##*:}
    local tls=() routing=()
    is_https && tls=(--ssl-key "$PROXY_KEY" --ssl-cert "$PORTAL_TLS_CERT")
    # [hub] domain: routes by host, each user's sessions on NAME.DOMAIN
    [ -z "$PORTAL_HUB_DOMAIN" ] || routing=(--host-routing)
    local internal=() hub_scheme=http
    if is_internal_tls; then
        internal_certs
        hub_scheme=https
        internal=(
            --api-ssl-key "$PROXY_TLS_DIR/proxy-api.key" --api-ssl-cert "$PROXY_TLS_DIR/proxy-api.crt"
            --api-ssl-ca "$PROXY_TLS_DIR/hub-ca.crt" --api-ssl-request-cert --api-ssl-reject-unauthorized
            --client-ssl-key "$PROXY_TLS_DIR/proxy-client.key" --client-ssl-cert "$PROXY_TLS_DIR/proxy-client.crt"
            --client-ssl-ca "$PROXY_TLS_DIR/proxy-client-ca_trust.crt"
            --client-ssl-request-cert --client-ssl-reject-unauthorized
        )
    fi
    local token
    token=$(new_proxy_token)
    log "starting configurable-http-proxy on $host:$port as $PROXY_USER${tls:+ (HTTPS)}${internal:+ (internal TLS)}"
    # The token reaches the proxy in its environment alone, never in argv.
    (
        clean_env
        export CONFIGPROXY_AUTH_TOKEN=$token
        exec nohup setpriv --reuid="$PROXY_USER" --regid="$PROXY_USER" --init-groups --inh-caps=-all -- \
            configurable-http-proxy --ip "$host" --port "$port" "${tls[@]}" "${routing[@]}" "${internal[@]}" \
            --api-ip 127.0.0.1 --api-port "$PORTAL_HUB_PROXY_API_PORT" \
            --default-target "$hub_scheme://127.0.0.1:$PORTAL_HUB_API_PORT" \
            --error-target "$hub_scheme://127.0.0.1:$PORTAL_HUB_API_PORT/hub/error"
    ) </dev/null >>"$PROXY_LOG" 2>&1 &
    echo $! > "$PROXY_PID"
    echo "$PORTAL_TLS_INTERNAL" > "$PROXY_INTERNAL"
}

start_hub() {
    pid_alive "$HUB_PID" && return 0
    log "starting JupyterHub as $HUB_USER (log: $HUB_LOG)"
    # umask 077: what the hub writes (database, cookie secret, logs) is its own.
    # Its log is opened by the hub's account, in its own folder.
    (enter_hub_env && exec nohup \
        setpriv --reuid="$HUB_USER" --regid="$HUB_USER" --init-groups --inh-caps=-all -- \
        sh -c 'log=$1; shift; exec "$@" >>"$log" 2>&1' sh "$HUB_LOG" \
        "$HUB_ENV/bin/jupyterhub" -f "$REPO_DIR/jupyterhub_config.py" "$@") \
        </dev/null >/dev/null 2>&1 &
    echo $! > "$HUB_PID"
}

# curl, checking the certificate against the portal's CA.
get() { curl -s --cacert "$PORTAL_TLS_CA_CERT" "$@"; }

login_answers() {
    [ "$(get -o /dev/null -w '%{http_code}' "${URL}hub/login")" = 200 ]
}

# The admin service answers through the proxy (it redirects to the hub's login;
# before its route exists, the hub redirects to /hub/services/portal/).
service_answers() {
    local answer
    answer=$(get -o /dev/null -w '%{http_code} %{redirect_url}' "${URL}services/portal/")
    [ "${answer%% *}" = 302 ] && [[ $answer != *"/hub/services/"* ]]
}

wait_ready() {
    local deadline=$((SECONDS + 60))
    until pid_alive "$HUB_PID" && login_answers && service_answers; do
        pid_alive "$HUB_PID" || { tail -n 30 "$HUB_LOG" >&2; die "JupyterHub exited; its log is above"; }
        [ "$SECONDS" -lt "$deadline" ] || die "${URL}hub/login or ${URL}services/portal/ did not answer within 60s (see $HUB_LOG)"
        sleep 0.2
    done
    log "portal ready at $URL"
}

# The admin service exits within a second of its hub: wait for its port.
wait_service_gone() {
    for _ in $(seq 50); do
        ss -Hltn "sport = :$PORTAL_PORTAL_SERVICE_PORT" | grep -q . || return 0
        sleep 0.1
    done
    log "warning: something still listens on the service port $PORTAL_PORTAL_SERVICE_PORT"
}

case ${1:-} in
    start) shift; check_running_proxy; prepare; start_proxy; start_hub "$@"; wait_ready ;;
    proxy) check_running_proxy; prepare; start_proxy ;;
    stop) stop_pidfile "$HUB_PID" JupyterHub; wait_service_gone; stop_pidfile "$PROXY_PID" configurable-http-proxy ;;
    restart) shift; check_running_proxy; prepare; stop_pidfile "$HUB_PID" JupyterHub; wait_service_gone; start_proxy; start_hub "$@"; wait_ready ;;
    status)
        rc=0
        if pid_alive "$PROXY_PID"; then echo "proxy: running (pid $(cat "$PROXY_PID"))"; else echo "proxy: stopped"; rc=3; fi
        if pid_alive "$HUB_PID"; then echo "hub: running (pid $(cat "$HUB_PID")) at $URL"; else echo "hub: stopped"; rc=3; fi
        exit $rc ;;
    url) echo "$URL" ;;
    *) echo "usage: $0 start|restart [JUPYTERHUB_ARG...] | stop|status|url|proxy" >&2; exit 2 ;;
esac
