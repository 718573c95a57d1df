#!/usr/bin/env bash
# The hub and its proxy: start | stop | restart (the hub alone) | status | url
# | proxy (the proxy alone). As a site's administrator would: the portal is
# installed onto this host by `portal setup` (portal/setup/), after the
# demo's own part (deploy/hub_setup.py prepare: its names, its local CA);
# then configurable-http-proxy (with `portal proxy-args`) and `portal hub`
# start, each as its own account, as a site's systemd units run them (this
# host runs no systemd).
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"
eval "$(deploy_py hub_setup shell || echo exit 1)"   # STATE, HUB_PID, URL, ...
# Pid files of an earlier version, which kept them (root's) in the state folder.
# shellcheck disable=SC2153  # STATE and RUN_DIR come from hub_setup shell
for name in proxy.pid jupyterhub.pid; do
    if [ -f "$STATE/$name" ] && [ ! -L "$STATE/$name" ] && [ "$(stat -c %u "$STATE/$name")" = 0 ]; then
        install -d -m 0755 /run/portal "$RUN_DIR"
        mv -f "$STATE/$name" "$RUN_DIR/$name"
    fi
done

# clean_env NAME...: drop every exported variable but NAMEs (in a subshell
# that then execs): the hub and the proxy inherit nothing of the caller's.
clean_env() {
    local name keep=" $* "
    for name in $(compgen -e); do
        [[ $keep == *" $name "* ]] || unset "$name" 2>/dev/null || true
    done
    export PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8
}
as_hub_user() { setpriv --reuid="$HUB_USER" --regid="$HUB_USER" --init-groups "$@"; }
prepare() {
    # the demo's accounts are made before Slurm names them (common.sh); a
    # site's, by portal setup itself, which notes them for uninstall
    [ "$PORTAL_CLUSTER_EMBEDDED" = 1 ] && ensure_service_accounts
    deploy_py hub_setup prepare
    # this checkout's code and defaults, as the hub's (enter_hub_env)
    PYTHONPATH="$REPO_DIR" "$HUB_ENV/bin/portal" setup --no-units --no-check || die "portal setup failed; its output is above"
}

# In a subshell about to exec as the hub's account: its state folder, and
# its own environment alone, with this checkout first on its Python path
# (the hub runs this repository's configuration and code).
enter_hub_env() {
    cd "$STATE" && clean_env PORTAL_CONFIG && export HOME="$STATE" PYTHONPATH="$REPO_DIR" && umask 077
}

# A new proxy token, for a proxy about to start: printed, and written to the
# hub's file by the hub's account itself (through stdin, never argv).
new_proxy_token() {
    local token
    token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    # shellcheck disable=SC2016  # $1 is the inner shell's
    printf '%s' "$token" | as_hub_user sh -c 'umask 077 && cat >"$1.tmp" && mv -f "$1.tmp" "$1"' sh "$STATE/proxy_token" ||
        die "could not write $STATE/proxy_token as $HUB_USER"
    printf '%s' "$token"
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
    local args token
    # computed as root: the settings may hold a password the proxy must not read
    mapfile -t args < <(PYTHONPATH="$REPO_DIR" "$HUB_ENV/bin/portal" proxy-args)
    [ ${#args[@]} -gt 0 ] || die "portal proxy-args gave no arguments"
    token=$(new_proxy_token)
    log "starting configurable-http-proxy on $PROXY_BIND as $PROXY_USER$PROXY_NOTE"
    # The token reaches the proxy in its environment alone, never in argv.
    (
        clean_env
        export CONFIGPROXY_AUTH_TOKEN=$token
        exec nohup setpriv --reuid="$PROXY_USER" --regid="$PROXY_USER" --init-groups --inh-caps=-all -- \
            configurable-http-proxy "${args[@]}"
    ) </dev/null >>"$PROXY_LOG" 2>&1 &
    echo $! > "$PROXY_PID"
    echo "$PORTAL_TLS_INTERNAL" > "$PROXY_INTERNAL"
}

start_hub() {
    pid_alive "$HUB_PID" && return 0
    log "starting JupyterHub as $HUB_USER (log: $HUB_LOG)"
    # umask 077: what the hub writes (database, cookie secret, logs) is its own.
    # Its log is opened by the hub's account, in its own folder.
    # shellcheck disable=SC2016  # $1 and $@ are the inner shell's
    (enter_hub_env && exec nohup \
        setpriv --reuid="$HUB_USER" --regid="$HUB_USER" --init-groups --inh-caps=-all -- \
        sh -c 'log=$1; shift; exec "$@" >>"$log" 2>&1' sh "$HUB_LOG" \
        "$HUB_ENV/bin/portal" hub "$@") \
        </dev/null >/dev/null 2>&1 &
    echo $! > "$HUB_PID"
}

# curl, checking the certificate against the portal's CA, at the proxy
# (PROXY_URL: the public URL, or behind a site's web server the proxy's
# loopback bind, reached with PROXY_CONNECT).
get() { curl -s --cacert "$PORTAL_TLS_CA_CERT" ${PROXY_CONNECT:+--connect-to "$PROXY_CONNECT"} "$@"; }
login_answers() { [ "$(get -o /dev/null -w '%{http_code}' "${PROXY_URL}hub/login")" = 200 ]; }

# The admin service answers through the proxy (it redirects to the hub's login;
# before its route exists, the hub redirects to /hub/services/portal/).
service_answers() {
    local answer
    answer=$(get -o /dev/null -w '%{http_code} %{redirect_url}' "${PROXY_URL}services/portal/")
    [ "${answer%% *}" = 302 ] && [[ $answer != *"/hub/services/"* ]]
}

wait_ready() {
    local deadline=$((SECONDS + 60))
    until pid_alive "$HUB_PID" && login_answers && service_answers; do
        pid_alive "$HUB_PID" || { tail -n 30 "$HUB_LOG" >&2; die "JupyterHub exited; its log is above"; }
        [ "$SECONDS" -lt "$deadline" ] || die "${PROXY_URL}hub/login or ${PROXY_URL}services/portal/ did not answer within 60s (see $HUB_LOG)"
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
stop_hub() { stop_pidfile "$HUB_PID" JupyterHub; wait_service_gone; }

case ${1:-} in
    start) shift; check_running_proxy; prepare; start_proxy; start_hub "$@"; wait_ready ;;
    proxy) check_running_proxy; prepare; start_proxy ;;
    stop) stop_hub; stop_pidfile "$PROXY_PID" configurable-http-proxy ;;
    restart) shift; check_running_proxy; prepare; stop_hub; start_proxy; start_hub "$@"; wait_ready ;;
    status)
        rc=0
        if pid_alive "$PROXY_PID"; then echo "proxy: running (pid $(cat "$PROXY_PID"))"; else echo "proxy: stopped"; rc=3; fi
        if pid_alive "$HUB_PID"; then echo "hub: running (pid $(cat "$HUB_PID")) at $URL"; else echo "hub: stopped"; rc=3; fi
        exit $rc ;;
    url) echo "$URL" ;;
    *) echo "usage: $0 start|restart [JUPYTERHUB_ARG...] | stop|status|url|proxy" >&2; exit 2 ;;
esac
