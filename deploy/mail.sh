#!/bin/bash
# The login node's mail server: exim4, local delivery to /var/mail/USER and
# [mail] smarthost for other domains (deploy/mail_setup.py writes its
# configuration and says why).
#     deploy/mail.sh start|stop|status
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"
eval "$(deploy_py mail_setup shell || echo exit 1)"   # EXIM_CONF, EXIM_PID, DAEMON, ...

# Another mail server provides sendmail here (deploy/packages.sh kept it).
other_server() { [ ! -x /usr/sbin/exim4 ] && [ -e /usr/sbin/sendmail ]; }
exim_alive() { pid_alive "$EXIM_PID" exim4; }
port_taken() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$SMTP_PORT" 2>/dev/null; }
# The daemon greets an SMTP client on loopback.
smtp_answers() {
    local fd banner=
    exec {fd}<>"/dev/tcp/127.0.0.1/$SMTP_PORT" || return 1
    read -r -t 5 banner <&"$fd" && printf 'QUIT\r\n' >&"$fd"
    exec {fd}>&-
    [[ $banner == 220* ]]
}
destination() { echo "mail for $MAIL_DOMAIN to /var/mail, other domains ${SMARTHOST:+through $SMARTHOST}${SMARTHOST:-refused}"; }

cmd_start() {
    local changed have
    if other_server; then
        log "this host's own mail server delivers (/usr/sbin/sendmail is not exim4's): [mail] domain and smarthost are its to set"
        return 0
    fi
    [ -x /usr/sbin/exim4 ] || die "exim4 is not installed (deploy/packages.sh installs it)"
    changed=$(deploy_py mail_setup conf)
    if exim_alive; then
        # One started before our configuration (Debian's init script), an
        # older configuration, or another command line: start it anew.
        have=$(tr '\0' ' ' <"/proc/$(cat "$EXIM_PID")/cmdline")
        if [ "$changed" = changed ] || [ "$EXIM_CONF" -nt "$EXIM_PID" ] || [ "${have% }" != "${DAEMON[*]}" ]; then
            log "restarting exim4 (its configuration or command line changed)"
            stop_pidfile "$EXIM_PID" exim4 exim4
        fi
    fi
    if ! exim_alive; then
        rm -f "$EXIM_PID"
        port_taken && die "port $SMTP_PORT is taken by another process (ss -ltnp 'sport = :$SMTP_PORT')"
        log "starting exim4 on 127.0.0.1:$SMTP_PORT"
        # exim4 forks once it listens; none of our descriptors go with it.
        "${DAEMON[@]}" </dev/null >/dev/null 2>&1 || die "exim4 did not start; see $PANIC_LOG"
    fi
    wait_for 15 "exim4 answering on 127.0.0.1:$SMTP_PORT (see $PANIC_LOG)" smtp_answers
    log "up: exim4, $(destination)"
}

cmd_status() {
    if other_server; then
        echo "mail: this host's own mail server (not exim4)"
    elif exim_alive && smtp_answers; then
        echo "exim4: running (pid $(cat "$EXIM_PID")) on 127.0.0.1:$SMTP_PORT, $(destination)"
    else
        echo "exim4: stopped"; return 3
    fi
}

case "${1:-}" in
    start) cmd_start ;;
    stop) other_server || stop_pidfile "$EXIM_PID" exim4 exim4 ;;
    status) cmd_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
