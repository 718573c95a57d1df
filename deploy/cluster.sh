#!/usr/bin/env bash
# The whole portal: up | down | status. `up` installs what is missing, starts
# the embedded cluster (this host as the login node, [cluster] nodes compute
# nodes), the mail server ([mail]) and the hub, and returns once the login
# page answers. With [cluster] embedded = false (a site's node, where the
# package is installed already) it installs nothing and starts the portal
# alone; `down` stops the portal alone.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

embedded() { [ "$PORTAL_CLUSTER_EMBEDDED" = 1 ]; }

case ${1:-} in
    up)
        start=$SECONDS
        if ! embedded; then
            # A site's cluster is not ours: no package, no environment, no
            # certificate, mail or Prometheus of the demo; the portal alone,
            # installed by its own `portal setup` (hub.sh), as a site would.
            [ -x "$PORTAL_ENVS_PREFIX/envs/hub/bin/portal" ] ||
                die "[cluster] embedded = false: install the package first (docs/site-install.md); make up installs nothing on a site's node"
            log "[cluster] embedded = false: installing nothing; the portal alone"
            "$DEPLOY_DIR/hub.sh" stop
            "$DEPLOY_DIR/hub.sh" start
            log "up in $((SECONDS - start)) s: open $("$DEPLOY_DIR/hub.sh" url)"
            exit 0
        fi
        "$DEPLOY_DIR/packages.sh"
        "$DEPLOY_DIR/envs.sh"
        ensure_service_accounts   # before Slurm's users name the hub's
        "$DEPLOY_DIR/data.sh"
        "$DEPLOY_DIR/tls.sh" ensure
        if embedded; then
            "$DEPLOY_DIR/ldap.sh" start
            "$DEPLOY_DIR/slurm.sh" start
        fi
        "$DEPLOY_DIR/mail.sh" start   # after nslcd: it delivers to the LDAP users
        # The proxy's token is made anew at every start of the proxy: stop
        # both, so each `make up` rotates it (sessions keep running; the
        # hub puts their routes back as it starts).
        "$DEPLOY_DIR/hub.sh" stop
        "$DEPLOY_DIR/hub.sh" start
        "$DEPLOY_DIR/prometheus.sh" start   # after the hub: it scrapes it with the hub's token
        log "up in $((SECONDS - start)) s: open $("$DEPLOY_DIR/hub.sh" url)"
        embedded && log "demo accounts: make accounts"
        ;;
    down)
        embedded || { "$DEPLOY_DIR/hub.sh" stop; exit 0; }   # a site's: the portal alone
        "$DEPLOY_DIR/prometheus.sh" stop
        "$DEPLOY_DIR/hub.sh" stop
        "$DEPLOY_DIR/mail.sh" stop
        if embedded; then
            "$DEPLOY_DIR/slurm.sh" stop
            "$DEPLOY_DIR/ldap.sh" stop
        fi
        ;;
    status)
        rc=0
        "$DEPLOY_DIR/hub.sh" status || rc=$?
        "$DEPLOY_DIR/prometheus.sh" status || rc=$?
        "$DEPLOY_DIR/mail.sh" status || rc=$?
        if embedded; then
            "$DEPLOY_DIR/ldap.sh" status || rc=$?
            "$DEPLOY_DIR/slurm.sh" status || rc=$?
        fi
        exit $rc
        ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
