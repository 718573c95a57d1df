#!/bin/bash
# The embedded directory: slapd on loopback and nslcd (deploy/ldap_setup.py
# writes their configuration, loads the demo data and says why).
#     deploy/ldap.sh start|stop|status|accounts
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"
eval "$(deploy_py ldap_setup shell || echo exit 1)"   # LDAP_DIR, SLAPD_PID, LISTEN_URIS, ...

ldap_tls() { LDAPTLS_CACERT=$CA_CERT LDAPTLS_REQCERT=demand "$@"; }

# The base entry can be read over StartTLS with a valid certificate.
# (timeout: ldapsearch itself would wait forever on a listener that never replies.)
slapd_answers() {
    ldap_tls timeout 5 ldapsearch -x -ZZ -LLL -o nettimeout=2 -H "$LISTEN_URI" -b "$BASE_DN" -s base dn >/dev/null 2>&1
}
port_taken() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null; }
slapd_alive() { pid_alive "$SLAPD_PID" slapd; }

start_slapd() {
    local cmd=(slapd -u openldap -g openldap -f "$SLAPD_CONF" -h "$LISTEN_URIS") have
    if slapd_alive; then
        # A changed port shows in the command line, not in slapd.conf.
        have=$(tr '\0' ' ' <"/proc/$(cat "$SLAPD_PID")/cmdline")
        if [ "${have% }" = "${cmd[*]}" ]; then
            wait_for 15 "slapd answering on $LISTEN_URI" slapd_answers
            return 0
        fi
        log "slapd runs as '${have% }', restarting it"
        stop_pidfile "$SLAPD_PID" slapd slapd
    fi
    rm -f "$SLAPD_PID"
    port_taken && die "port $PORT is taken by another process (ss -ltnp 'sport = :$PORT')"
    log "starting slapd on $LISTEN_URIS"
    # slapd forks once it listens. It logs to syslog only (none may run):
    # on failure, run it in the foreground to see why.
    "${cmd[@]}" || die "slapd did not start; to see why: ${cmd[*]} -d config,stats"
    wait_for 15 "slapd answering on $LISTEN_URI" slapd_answers
}

# alice resolves through nslcd, with her uid and her secondary groups.
nss_resolves() {
    [ "$(getent passwd alice | cut -d: -f3)" = 20001 ] && id -Gn alice | grep -qw vision
}

start_nslcd() {
    deploy_py ldap_setup nslcd-conf
    # Restart when the config is newer than the running daemon.
    if pid_alive "$NSLCD_PID" nslcd && [ "$NSLCD_CONF" -nt "$NSLCD_PID" ]; then
        log "$NSLCD_CONF changed, restarting nslcd"
        stop_pidfile "$NSLCD_PID" nslcd nslcd
    fi
    if ! pid_alive "$NSLCD_PID" nslcd; then
        rm -f "$NSLCD_PID"
        log "starting nslcd"
        nslcd || die "nslcd did not start; try in the foreground: nslcd -d"
    fi
    wait_for 15 "alice resolving through nslcd (getent passwd alice, id -Gn alice)" nss_resolves
}

cmd_start() {
    local changed
    if pid_alive "$OLD_SLAPD_PID" slapd; then   # started by an earlier version
        log "stopping the slapd of an earlier version"
        stop_pidfile "$OLD_SLAPD_PID" slapd slapd
    fi
    rm -f "$OLD_SLAPD_PID" "$LDAP_DIR/slapd.args"
    changed=$(deploy_py ldap_setup slapd-conf)
    if [ "$changed" = changed ] && slapd_alive; then
        log "$SLAPD_CONF changed, restarting slapd"
        stop_pidfile "$SLAPD_PID" slapd slapd
    fi
    if [ ! -s "$DATA_DIR/data.mdb" ]; then
        slapd_alive && stop_pidfile "$SLAPD_PID" slapd slapd   # never load under a running slapd
        deploy_py ldap_setup load-demo
    elif [ ! -s "$ACCOUNTS_FILE" ]; then
        log "warning: $ACCOUNTS_FILE is missing; the demo passwords are lost (to start over: stop, remove $LDAP_DIR, start)"
    fi
    start_slapd
    deploy_py ldap_setup migrate
    start_nslcd
    deploy_py ldap_setup homes
    log "up: slapd on $LISTEN_URIS (base $BASE_DN, StartTLS), nslcd resolves its users"
}

cmd_status() {
    local rc=0
    if slapd_alive; then
        echo "slapd: running (pid $(cat "$SLAPD_PID")) on $LISTEN_URIS, base $BASE_DN"
    else
        echo "slapd: stopped (port $PORT)"; rc=3
    fi
    if pid_alive "$NSLCD_PID" nslcd; then
        echo "nslcd: running (pid $(cat "$NSLCD_PID")), uri $SERVER_URI"
    else
        echo "nslcd: stopped"; rc=3
    fi
    return $rc
}

case "${1:-}" in
    start) cmd_start ;;
    stop) stop_pidfile "$NSLCD_PID" nslcd nslcd; stop_pidfile "$SLAPD_PID" slapd slapd ;;
    status) cmd_status ;;
    accounts)
        [ -s "$ACCOUNTS_FILE" ] || die "no demo accounts yet ($ACCOUNTS_FILE): run make up first"
        cat "$ACCOUNTS_FILE" ;;
    *) echo "usage: $0 start|stop|status|accounts" >&2; exit 2 ;;
esac
