#!/bin/bash
# The login node's Prometheus, scraping the hub's /hub/metrics ([metrics];
# deploy/prometheus_setup.py writes its configuration and says why).
#     deploy/prometheus.sh start|stop|status
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"
eval "$(deploy_py prometheus_setup shell || echo exit 1)"   # PROM_LISTEN, PROM_PID, DAEMON, ...

prom_alive() { pid_alive "$PROM_PID" prometheus; }
ready() { curl -fsS "http://$PROM_LISTEN/-/ready" >/dev/null 2>&1; }
port_taken() { timeout 2 bash -c "exec 3<>/dev/tcp/${PROM_LISTEN%:*}/${PROM_LISTEN##*:}" 2>/dev/null; }

cmd_start() {
    [ -n "$PROM_LISTEN" ] || { log "[metrics] prometheus_listen is empty: no Prometheus here"; return 0; }
    command -v prometheus >/dev/null || die "prometheus is not installed (deploy/packages.sh installs it)"
    local changed
    changed=$(deploy_py prometheus_setup conf)
    if prom_alive && [ "$changed" = changed ]; then
        log "reloading Prometheus (its configuration changed)"
        kill -HUP "$(cat "$PROM_PID")"
    fi
    if ! prom_alive; then
        rm -f "$PROM_PID"
        if port_taken; then
            # Debian's own service, started when the package was installed
            [ -x /etc/init.d/prometheus ] && /etc/init.d/prometheus stop >/dev/null 2>&1
            sleep 1
            port_taken && die "$PROM_LISTEN is taken by another process (ss -ltnp)"
        fi
        log "starting Prometheus on $PROM_LISTEN"
        setpriv --reuid="$PROM_USER" --regid="$PROM_USER" --init-groups \
            "${DAEMON[@]}" </dev/null >>"$PROM_LOG" 2>&1 &
        echo $! >"$PROM_PID"
    fi
    wait_for 60 "Prometheus ready on $PROM_LISTEN (see $PROM_LOG)" ready
    log "up: Prometheus on http://$PROM_LISTEN/, scraping the hub (${PROM_CONF})"
}

cmd_status() {
    if prom_alive && ready; then
        echo "prometheus: running (pid $(cat "$PROM_PID")) on http://$PROM_LISTEN/"
    else
        echo "prometheus: stopped"; return 3
    fi
}

case "${1:-}" in
    start) cmd_start ;;
    stop) stop_pidfile "$PROM_PID" Prometheus prometheus ;;
    status) cmd_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
