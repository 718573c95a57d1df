#!/usr/bin/env bash
# Installs the system packages the portal needs, only those missing.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

PACKAGES=(
    # the one-machine cluster
    slurmctld slurmd slurm-client munge slurmdbd mariadb-server
    slapd ldap-utils nslcd libnss-ldapd sudo
    libnss-myhostname
    # the mail server of the login node (deploy/mail.sh), without its
    # Recommends (bsd-mailx)
    exim4-daemon-light
    # the login node's Prometheus (deploy/prometheus.sh), without its
    # Recommends (the node exporter)
    prometheus
    # environments and data
    python3-venv python3-dev dataset-fashion-mnist
    # container images: their runtime (ch-run), and their Debian base's
    # builder (as root it needs none of its Recommends)
    charliecloud-runtime mmdebstrap
    # the R kernel, and modulefiles for the environments in terminals
    r-base-core r-cran-irkernel environment-modules
    # tests and tools (nginx: the web server in front of the portal in
    # tests/integration/test_front_proxy.py, started by the test alone)
    chromium curl procps shellcheck nginx-light
    # the site tests' login node (tests/site): a systemd-nspawn machine
    # booted from an mmdebstrap root (mmdebstrap is above)
    systemd-container
    # the PostgreSQL test's server (tests/integration/test_postgresql.py runs
    # its own in a temporary folder, with initdb and pg_ctl)
    postgresql-15
    # the browser tests' trust of the portal's CA (an NSS database)
    libnss3-tools
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    # Another mail server already here (a site's postfix) is kept: apt would
    # remove it for exim4. deploy/mail.sh then leaves mail to it.
    [ "$pkg" = exim4-daemon-light ] && [ -e /usr/sbin/sendmail ] && [ ! -e /usr/sbin/exim4 ] && continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
command -v npm >/dev/null || missing+=(nodejs npm)

if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    # No questions, and no default directory for slapd: the portal runs its own.
    debconf-set-selections <<'SEL'
slapd slapd/no_configuration boolean true
libnss-ldapd libnss-ldapd/nsswitch multiselect passwd, group
SEL
    # PostgreSQL's package makes and starts a cluster of its own on 5432
    # unless told not to: the test runs its own, nothing else needs one.
    if [[ " ${missing[*]} " == *" postgresql-15 "* ]]; then
        install -d -m 0755 /etc/postgresql-common/createcluster.d
        echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/portal.conf
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's own Prometheus service would listen on every address at boot: the
# portal runs its own (deploy/prometheus.sh), on loopback. The nginx just
# installed for the tests would serve a default page on port 80: the tests
# start their own, on loopback (an nginx that was here before is left alone).
services=(prometheus)
[[ " ${missing[*]} " == *" nginx-light "* ]] && services+=(nginx)
for service in "${services[@]}"; do
    [ -x "/etc/init.d/$service" ] || [ -e "/lib/systemd/system/$service.service" ] || continue
    if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
        systemctl disable --now "$service" >/dev/null 2>&1 || true
    else
        update-rc.d "$service" disable >/dev/null 2>&1 || true
        "/etc/init.d/$service" stop >/dev/null 2>&1 || true
    fi
done

if ! command -v configurable-http-proxy >/dev/null; then
    log "installing configurable-http-proxy from npm"
    npm install -g --silent configurable-http-proxy@5 >/dev/null
fi
