#!/usr/bin/env bash
# The hub and its proxy: start | stop | restart (the hub alone) | status.
# configurable-http-proxy runs on its own so that restarting the hub keeps
# every session reachable.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

STATE=$PORTAL_HUB_STATE_DIR
HUB_ENV=$PORTAL_ENVS_PREFIX/envs/hub
PROXY_PID=$STATE/proxy.pid
HUB_PID=$STATE/jupyterhub.pid
URL=$("$HUB_ENV/bin/python" -c 'import sys; from portal import settings, hub_config; print(hub_config.public_url(settings.load()))')

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

prepare() {
    install_templates
    install -d -m 0700 "$STATE"
    [ -s "$STATE/proxy_token" ] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$STATE/proxy_token")
    export CONFIGPROXY_AUTH_TOKEN
    CONFIGPROXY_AUTH_TOKEN=$(cat "$STATE/proxy_token")
}

start_proxy() {
    pid_alive "$PROXY_PID" && return 0
    local bind host port
    bind=${PORTAL_HUB_BIND_URL#*://}; bind=${bind%%/*}
    host=${bind%:*}; port=${bind##*:}
    log "starting configurable-http-proxy on $host:$port"
    nohup configurable-http-proxy --ip "$host" --port "$port" \
        --api-ip 127.0.0.1 --api-port "$PORTAL_HUB_PROXY_API_PORT" \
        --default-target "http://127.0.0.1:$PORTAL_HUB_API_PORT" \
        --error-target "http://127.0.0.1:$PORTAL_HUB_API_PORT/hub/error" \
        >> "$STATE/proxy.log" 2>&1 &
    echo $! > "$PROXY_PID"
}

start_hub() {
    pid_alive "$HUB_PID" && return 0
    log "starting JupyterHub (log: $STATE/jupyterhub.log)"
    (cd "$STATE" && exec nohup "$HUB_ENV/bin/jupyterhub" -f "$REPO_DIR/jupyterhub_config.py" \
        >> "$STATE/jupyterhub.log" 2>&1) &
    echo $! > "$HUB_PID"
}

login_answers() {
    [ "$(curl -s -o /dev/null -w '%{http_code}' "${URL}hub/login")" = 200 ]
}

# The admin service answers through the proxy (it redirects to the hub's login;
# before its route exists, the hub redirects to /hub/services/portal/).
service_answers() {
    local answer
    answer=$(curl -s -o /dev/null -w '%{http_code} %{redirect_url}' "${URL}services/portal/")
    [ "${answer%% *}" = 302 ] && [[ $answer != *"/hub/services/"* ]]
}

wait_ready() {
    local deadline=$((SECONDS + 60))
    until pid_alive "$HUB_PID" && login_answers && service_answers; do
        pid_alive "$HUB_PID" || { tail -n 30 "$STATE/jupyterhub.log" >&2; die "JupyterHub exited; its log is above"; }
        [ "$SECONDS" -lt "$deadline" ] || die "${URL}hub/login or ${URL}services/portal/ did not answer within 60s (see $STATE/jupyterhub.log)"
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
    start) prepare; start_proxy; start_hub; wait_ready ;;
    stop) stop_pidfile "$HUB_PID" JupyterHub; wait_service_gone; stop_pidfile "$PROXY_PID" configurable-http-proxy ;;
    restart) prepare; stop_pidfile "$HUB_PID" JupyterHub; wait_service_gone; start_proxy; start_hub; wait_ready ;;
    status)
        rc=0
        if pid_alive "$PROXY_PID"; then echo "proxy: running (pid $(cat "$PROXY_PID"))"; else echo "proxy: stopped"; rc=3; fi
        if pid_alive "$HUB_PID"; then echo "hub: running (pid $(cat "$HUB_PID")) at $URL"; else echo "hub: stopped"; rc=3; fi
        exit $rc ;;
    url) echo "$URL" ;;
    *) echo "usage: $0 start|stop|restart|status|url" >&2; exit 2 ;;
esac
