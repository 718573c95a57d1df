#!/bin/bash
# The embedded directory of the one-machine cluster: an unprivileged OpenLDAP
# slapd on loopback that holds the portal's users and groups, and nslcd, so
# that these users are Unix accounts here too (the account that logs in to the
# hub is the one that runs the Slurm job).
#
#     deploy/ldap.sh start      # write the config, load the demo data the
#                               # first time (or migrate it), start slapd and
#                               # nslcd, make homes
#     deploy/ldap.sh stop       # stop slapd and nslcd (the directory is kept)
#     deploy/ldap.sh status     # exit 0 if both run, else 3
#     deploy/ldap.sh accounts   # print the demo accounts and their passwords
#
# Transport: slapd offers StartTLS with [tls] cert and key (its own copy of
# the key, readable by openldap only) and refuses a bind with a password
# before it ("Confidentiality required"); anonymous reads stay allowed. nslcd,
# the admin binds here and the hub use StartTLS and check the certificate
# against [tls] ca_cert. A new certificate, key or CA restarts slapd (a new
# CA, nslcd too).
#
# The demo data, loaded only into an empty directory: groups portal-users
# (alice, bob, carol), portal-admins (carol), vision (alice) and guests (no
# members), and the users alice, bob, carol and eve. eve is a valid account
# that no group lists and whose primary group is guests, so the hub refuses
# her and `id eve` shows no portal group. A directory loaded before guests
# existed is migrated at start (the group added, eve moved to it).
# The passwords are random, made at that first start, and kept only in the
# directory (hashed) and in the accounts file (root, 0600). To start over:
# stop, remove the LDAP directory and the accounts file, start.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

LDAP_DIR=$PORTAL_CLUSTER_LDAP_DIR
DATA_DIR=$LDAP_DIR/data
SLAPD_CONF=$LDAP_DIR/slapd.conf
# slapd's pid and args files, in a folder of its own: the LDAP folder is not
# writable by openldap (root writes slapd.conf there, by path).
SLAPD_RUN=/run/portal/slapd
SLAPD_PID=$SLAPD_RUN/slapd.pid
OLD_SLAPD_PID=$LDAP_DIR/slapd.pid   # where an earlier version kept it
ADMIN_PW_FILE=$LDAP_DIR/admin.password         # the rootdn's password (0600)
ADMIN_HASH_FILE=$LDAP_DIR/admin.password.ssha  # its hash, for slapd.conf
ACCOUNTS_FILE=$PORTAL_CLUSTER_ACCOUNTS_FILE
HOME_ROOT=$PORTAL_CLUSTER_HOME_ROOT

BASE_DN=$PORTAL_LDAP_BASE_DN
ADMIN_DN=$PORTAL_CLUSTER_LDAP_ADMIN_DN
PEOPLE_DN=ou=people,$BASE_DN
GROUPS_DN=ou=groups,$BASE_DN
PORT=$PORTAL_LDAP_SERVER_PORT
# slapd listens on loopback only; nslcd and the hub use the configured address.
LISTEN_URI=ldap://127.0.0.1:$PORT/
SERVER_URI=ldap://$PORTAL_LDAP_SERVER_ADDRESS:$PORT/

NSLCD_CONF=/etc/nslcd.conf
NSLCD_RUN=/run/nslcd
NSLCD_PID=$NSLCD_RUN/nslcd.pid      # compiled into nslcd
NSSWITCH=/etc/nsswitch.conf
SCHEMA_DIR=/etc/ldap/schema

# TLS: the certificate slapd offers, slapd's own copy of its key, and the CA
# every client checks it against.
CA_CERT=$PORTAL_TLS_CA_CERT
TLS_CERT=$PORTAL_TLS_CERT
# (a folder of its own: tls.sh key-copy makes the key's folder 0755)
SLAPD_KEY=$LDAP_DIR/tls/slapd.key
# The strength (SSF) a bind with a password needs: any TLS cipher has 128+.
BIND_SSF=128

# The demo data. Users: name:uidNumber:primary group:given name:surname.
DEMO_USERS=(
    "alice:20001:portal-users:Alice:Adams"
    "bob:20002:portal-users:Bob:Baker"
    "carol:20003:portal-users:Carol:Clark"
    "eve:20009:guests:Eve:Evans"
)
# Groups: name:gidNumber:members (memberUid). Members of ADMIN_GROUP are portal
# admins (portal.toml [ldap] admin_groups). guests is the primary group of
# accounts that are in no portal group.
DEMO_GROUPS=(
    "portal-users:20000:alice bob carol"
    "portal-admins:20010:carol"
    "vision:20020:alice"
    "guests:20100:"
)
ADMIN_GROUP=portal-admins
# Before guests, every demo user had this primary group (migrate_directory).
OLD_USERS_GID=20000

# ---------------------------------------------------------------- helpers

random_password() { /usr/bin/python3 -c 'import secrets; print(secrets.token_urlsafe(12))'; }

# ssha PASSWORD: its {SSHA} hash. The password goes through a pipe, not argv
# (slappasswd -T hashes the file's bytes as they are: no trailing newline).
ssha() { printf '%s' "$1" | slappasswd -T /dev/stdin; }

# install_content FILE MODE OWNER:GROUP CONTENT: write FILE (atomically, with
# MODE and OWNER) when its content differs; logs it and sets WROTE=1 if so,
# else WROTE=0. (A status would put the function under `if`, where set -e
# does not apply.)
install_content() {
    local file=$1 mode=$2 owner=$3 content=$4
    WROTE=0
    if [ ! -f "$file" ] || [ "$(cat "$file")" != "$content" ]; then
        printf '%s\n' "$content" >"$file.tmp"
        chmod "$mode" "$file.tmp"
        chown "$owner" "$file.tmp"
        mv -f "$file.tmp" "$file"
        log "wrote $file"
        WROTE=1
    fi
    chmod "$mode" "$file"
    chown "$owner" "$file"
}

# ldap_tls COMMAND...: run an ldap-utils COMMAND that checks slapd's
# certificate against [tls] ca_cert when it starts TLS (give it -ZZ).
ldap_tls() { LDAPTLS_CACERT=$CA_CERT LDAPTLS_REQCERT=demand "$@"; }

# files_sum FILE...: a short checksum of the files' contents. slapd.conf and
# nslcd.conf carry the one of their TLS files, so that a new certificate, key
# or CA changes the config, and that restarts the daemon.
files_sum() { cat "$@" | sha256sum | cut -c1-16; }

# gid_of GROUP: the demo group's gidNumber.
gid_of() {
    local entry name gid
    for entry in "${DEMO_GROUPS[@]}"; do
        IFS=: read -r name gid _ <<<"$entry"
        [ "$name" = "$1" ] && { echo "$gid"; return 0; }
    done
    die "no demo group $1 (DEMO_GROUPS)"
}

# ---------------------------------------------------------------- slapd

# slapd_answers: the base entry can be read over StartTLS with a valid
# certificate. (timeout: ldapsearch itself would wait forever on a listener
# that never replies.)
slapd_answers() {
    ldap_tls timeout 5 ldapsearch -x -ZZ -LLL -o nettimeout=2 -H "$LISTEN_URI" -b "$BASE_DN" -s base dn >/dev/null 2>&1
}

# port_taken: something accepts connections on the port.
port_taken() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null; }

slapd_alive() { pid_alive "$SLAPD_PID" slapd; }

# The rootdn's password: made once, kept in a root-only file; slapd.conf (which
# slapd, running as openldap, must read) holds only its hash.
ensure_admin_password() {
    [ -s "$ADMIN_PW_FILE" ] && [ -s "$ADMIN_HASH_FILE" ] && return 0
    local pw
    pw=$(random_password)
    (
        umask 077
        printf '%s' "$pw" >"$ADMIN_PW_FILE"      # no newline: ldap* -y FILE reads it all
        ssha "$pw" >"$ADMIN_HASH_FILE"
    )
    log "new password of $ADMIN_DN in $ADMIN_PW_FILE"
}

render_slapd_conf() {
    cat <<EOF
# Written by deploy/ldap.sh of the Data Scientist Portal on every start, from
# portal.toml ([ldap], [cluster]); edit the settings, not this file.
include $SCHEMA_DIR/core.schema
include $SCHEMA_DIR/cosine.schema
include $SCHEMA_DIR/nis.schema
include $SCHEMA_DIR/inetorgperson.schema

pidfile $SLAPD_PID
argsfile $SLAPD_RUN/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb

# StartTLS with [tls] cert. A bind with a password needs TLS first (else
# "Confidentiality required"); anonymous reads do not.
# TLS files: $(files_sum "$CA_CERT" "$TLS_CERT" "$SLAPD_KEY")
TLSCACertificateFile $CA_CERT
TLSCertificateFile $TLS_CERT
TLSCertificateKeyFile $SLAPD_KEY
TLSProtocolMin 3.3
security simple_bind=$BIND_SSF

database mdb
suffix "$BASE_DN"
rootdn "$ADMIN_DN"
rootpw $(cat "$ADMIN_HASH_FILE")
directory $DATA_DIR
# The map's upper bound (64 MiB); data.mdb may show this size but is sparse.
maxsize 67108864
index objectClass eq
index uid,uidNumber,gidNumber,memberUid eq
index cn,sn eq,sub

# Passwords: users may change their own, anybody may bind with them, nobody
# reads them. The rest is readable by all: nslcd and the hub bind anonymously.
access to attrs=userPassword
    by self write
    by anonymous auth
    by * none
access to *
    by * read
EOF
}

# Write slapd.conf; WROTE=1 if it changed.
write_slapd_conf() {
    # root:openldap 0750: slapd, once it dropped root, reads slapd.conf here;
    # only root writes here (openldap could otherwise plant links for it).
    install -d -m 0755 "$(dirname "$LDAP_DIR")"
    install -d -o root -g openldap -m 0750 "$LDAP_DIR"
    install -d -m 0755 /run/portal
    install -d -o openldap -g openldap -m 0755 "$SLAPD_RUN"
    install -d -o openldap -g openldap -m 0700 "$DATA_DIR"
    # The certificate (made when missing) and slapd's own copy of the key.
    bash "$DEPLOY_DIR/tls.sh" ensure
    bash "$DEPLOY_DIR/tls.sh" key-copy openldap "$SLAPD_KEY"
    ensure_admin_password
    install_content "$SLAPD_CONF" 0640 root:openldap "$(render_slapd_conf)"
    if [ "$WROTE" = 1 ]; then
        runuser -u openldap -- slaptest -Q -u -f "$SLAPD_CONF" || die "$SLAPD_CONF is not valid (see above)"
    fi
}

# The first RDN of the base DN as an entry: dc=portal -> dcObject/organization.
render_base_entry() {
    local rdn=${BASE_DN%%,*}
    local attr=${rdn%%=*} value=${rdn#*=}
    echo "dn: $BASE_DN"
    case "${attr,,}" in
        dc) printf 'objectClass: dcObject\nobjectClass: organization\ndc: %s\no: Data Scientist Portal\n' "$value" ;;
        o) printf 'objectClass: organization\no: %s\n' "$value" ;;
        ou) printf 'objectClass: organizationalUnit\nou: %s\n' "$value" ;;
        *) die "cannot make a base entry for $BASE_DN (use dc=, o= or ou=)" ;;
    esac
    echo
}

# groups_of USER: the demo groups that list USER, space-separated.
groups_of() {
    local entry name members out=()
    for entry in "${DEMO_GROUPS[@]}"; do
        IFS=: read -r name _ members <<<"$entry"
        [[ " $members " == *" $1 "* ]] && out+=("$name")
    done
    echo "${out[*]}"
}

# render_group NAME [CHANGETYPE]: the demo group's entry as LDIF (with a
# changetype line for ldapmodify when given).
render_group() {
    local entry name gid members m
    for entry in "${DEMO_GROUPS[@]}"; do
        IFS=: read -r name gid members <<<"$entry"
        [ "$name" = "$1" ] || continue
        echo "dn: cn=$name,$GROUPS_DN"
        [ -z "${2:-}" ] || echo "changetype: $2"
        printf 'objectClass: posixGroup\ncn: %s\ngidNumber: %s\n' "$name" "$gid"
        for m in $members; do echo "memberUid: $m"; done
        echo
    done
}

# The demo data as LDIF, parents first; the password hashes come from HASHES.
render_demo_ldif() {
    local entry name uid group given sur
    render_base_entry
    printf 'dn: %s\nobjectClass: organizationalUnit\nou: people\n\n' "$PEOPLE_DN"
    printf 'dn: %s\nobjectClass: organizationalUnit\nou: groups\n\n' "$GROUPS_DN"
    for entry in "${DEMO_GROUPS[@]}"; do
        render_group "${entry%%:*}"
    done
    for entry in "${DEMO_USERS[@]}"; do
        IFS=: read -r name uid group given sur <<<"$entry"
        cat <<EOF
dn: uid=$name,$PEOPLE_DN
objectClass: inetOrgPerson
objectClass: posixAccount
objectClass: shadowAccount
uid: $name
cn: $given $sur
givenName: $given
sn: $sur
gecos: $given $sur
uidNumber: $uid
gidNumber: $(gid_of "$group")
homeDirectory: $HOME_ROOT/$name
loginShell: /bin/bash
userPassword: ${HASHES[$name]}

EOF
    done
}

# The demo accounts as JSON: username, password, admin, uid, groups.
render_accounts() {
    local entry name uid groups admin
    for entry in "${DEMO_USERS[@]}"; do
        IFS=: read -r name uid _ <<<"$entry"
        groups=$(groups_of "$name")
        admin=false
        [[ " $groups " == *" $ADMIN_GROUP "* ]] && admin=true
        printf '%s\t%s\t%s\t%s\t%s\n' "$name" "${PASSWORDS[$name]}" "$admin" "$uid" "$groups"
    done | /usr/bin/python3 -c '
import json, sys
accounts = []
for line in sys.stdin:
    name, password, admin, uid, groups = line.rstrip("\n").split("\t")
    accounts.append({"username": name, "password": password, "admin": admin == "true",
                     "uid": int(uid), "groups": groups.split()})
json.dump(accounts, sys.stdout, indent=2)
print()
'
}

# Load the demo data into the empty directory (offline, with slapadd, before
# slapd first starts) and write the accounts file with new passwords.
init_directory() {
    local entry
    declare -gA PASSWORDS=() HASHES=()
    log "empty directory: loading the demo users and groups"
    for entry in "${DEMO_USERS[@]}"; do
        PASSWORDS[${entry%%:*}]=$(random_password)
        HASHES[${entry%%:*}]=$(ssha "${PASSWORDS[${entry%%:*}]}")
    done
    # The accounts file first: a failed load leaves an empty directory, and
    # the next start begins again with new passwords.
    install -d -m 0755 "$(dirname "$ACCOUNTS_FILE")"
    (umask 077 && render_accounts >"$ACCOUNTS_FILE.tmp")
    chown root:root "$ACCOUNTS_FILE.tmp"
    mv -f "$ACCOUNTS_FILE.tmp" "$ACCOUNTS_FILE"
    if ! render_demo_ldif | runuser -u openldap -- slapadd -q -f "$SLAPD_CONF"; then
        rm -f "$DATA_DIR"/*.mdb
        die "loading the demo data failed (see above)"
    fi
    log "demo accounts in $ACCOUNTS_FILE (deploy/ldap.sh accounts)"
}

# ldap_value DN ATTR: the entry's first value of ATTR, read through slapd;
# empty when the entry or the value is missing.
ldap_value() {
    local out rc=0
    out=$(ldap_tls ldapsearch -x -ZZ -LLL -o ldif-wrap=no -H "$LISTEN_URI" -b "$1" -s base "$2" 2>&1) || rc=$?
    # 32: no such object
    [ "$rc" = 0 ] || [ "$rc" = 32 ] || die "reading $1 from slapd failed: $out"
    sed -n "s/^$2: //p" <<<"$out" | head -n 1
}

# Bring a directory loaded by an older deploy/ldap.sh up to the demo data:
# add the demo groups that are some demo user's primary group and are
# missing (guests), and move the demo users whose gidNumber is still the old
# common one (portal-users) to their own primary group, with the files of
# their home. Through slapd, as the admin DN over StartTLS; a second run
# changes nothing. Groups and members an admin changed are left alone.
migrate_directory() {
    local entry name group gid have ldif="" moved=()
    for entry in "${DEMO_GROUPS[@]}"; do
        name=${entry%%:*}
        [[ " ${DEMO_USERS[*]} " == *":$name:"* ]] || continue
        [ -z "$(ldap_value "cn=$name,$GROUPS_DN" gidNumber)" ] || continue
        ldif+=$(render_group "$name" add)$'\n\n'
    done
    for entry in "${DEMO_USERS[@]}"; do
        IFS=: read -r name _ group _ <<<"$entry"
        gid=$(gid_of "$group")
        have=$(ldap_value "uid=$name,$PEOPLE_DN" gidNumber)
        [ "$have" = "$OLD_USERS_GID" ] && [ "$gid" != "$have" ] || continue
        ldif+=$(printf 'dn: uid=%s,%s\nchangetype: modify\nreplace: gidNumber\ngidNumber: %s\n' \
            "$name" "$PEOPLE_DN" "$gid")$'\n\n'
        moved+=("$name:$gid")
    done
    [ -n "$ldif" ] || return 0
    log "migrating the directory: $(grep -c '^dn:' <<<"$ldif") entries (primary groups of the demo users)"
    ldap_tls ldapmodify -x -ZZ -H "$LISTEN_URI" -D "$ADMIN_DN" -y "$ADMIN_PW_FILE" <<<"$ldif" >/dev/null ||
        die "migrating the directory failed (see above)"
    for entry in "${moved[@]}"; do
        name=${entry%%:*} gid=${entry#*:}
        # As the user, never root, in a folder the user controls (a link or a
        # swapped folder must not make root change another file); -h: a link
        # is changed itself. What the user does not own is left as it is.
        [ ! -d "$HOME_ROOT/$name" ] ||
            setpriv --reuid="$(id -u "$name")" --regid="$gid" --init-groups \
                find "$HOME_ROOT/$name" -xdev -gid "$OLD_USERS_GID" -exec chgrp -h "$gid" {} + 2>/dev/null || true
        log "$name: primary group $gid"
    done
}

start_slapd() {
    local cmd=(slapd -u openldap -g openldap -f "$SLAPD_CONF" -h "$LISTEN_URI") have
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
    log "starting slapd on $LISTEN_URI"
    # slapd forks once it listens. It logs to syslog only (none may run):
    # on failure, run it in the foreground to see why.
    "${cmd[@]}" || die "slapd did not start; to see why: ${cmd[*]} -d config,stats"
    wait_for 15 "slapd answering on $LISTEN_URI" slapd_answers
}

# ---------------------------------------------------------------- nslcd

render_nslcd_conf() {
    cat <<EOF
# Written by deploy/ldap.sh of the Data Scientist Portal on every start, from
# portal.toml ([ldap], [tls]); edit the settings, not this file.
uid nslcd
gid nslcd
uri $SERVER_URI
base $BASE_DN
# StartTLS, the certificate checked against [tls] ca_cert (CA $(files_sum "$CA_CERT")).
ssl start_tls
tls_reqcert demand
tls_cacertfile $CA_CERT
# Local accounts (root, daemons) never wait for LDAP for their groups, so
# sudo, su and cron stay fast while the directory is down.
nss_initgroups_ignoreusers ALLLOCAL
bind_timelimit 5
EOF
}

# passwd: and group: of nsswitch.conf end with ldap, once.
enable_nss_ldap() {
    local db missing=""
    for db in passwd group; do
        grep -Eq "^$db:.*[[:space:]]ldap([[:space:]]|$)" "$NSSWITCH" || missing+=" $db"
    done
    [ -n "$missing" ] || return 0
    sed -i -E '/^(passwd|group):/{/[[:space:]]ldap([[:space:]]|$)/!s/[[:space:]]*$/ ldap/}' "$NSSWITCH"
    log "added ldap to$missing in $NSSWITCH"
}

# alice resolves through nslcd, with her uid and her secondary groups.
nss_resolves() {
    [ "$(getent passwd alice | cut -d: -f3)" = 20001 ] && id -Gn alice | grep -qw vision
}

start_nslcd() {
    install_content "$NSLCD_CONF" 0640 root:nslcd "$(render_nslcd_conf)"
    enable_nss_ldap
    install -d -o nslcd -g nslcd -m 0755 "$NSLCD_RUN"
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

# ---------------------------------------------------------------- homes

# Nobody else creates the users' homes (no pam_mkhomedir): make the missing
# ones, from /etc/skel, owned by the user as LDAP says.
make_homes() {
    local entry name uid gid home
    for entry in "${DEMO_USERS[@]}"; do
        name=${entry%%:*}
        IFS=: read -r _ _ uid gid _ home _ < <(getent passwd "$name") || continue
        if [ -z "$home" ] || [ -d "$home" ]; then continue; fi
        install -d -m 0755 "$(dirname "$home")"
        # root's until filled: the user never owns a folder root writes in
        install -d -o root -g root -m 0700 "$home"
        cp -R /etc/skel/. "$home"/
        chown -R "$uid:$gid" "$home"
        log "created $home"
    done
}

# ---------------------------------------------------------------- commands

cmd_start() {
    # A slapd started by an earlier version (its pid file in the LDAP folder).
    if pid_alive "$OLD_SLAPD_PID" slapd; then
        log "stopping the slapd of an earlier version"
        stop_pidfile "$OLD_SLAPD_PID" slapd slapd
    fi
    rm -f "$OLD_SLAPD_PID" "$LDAP_DIR/slapd.args"
    write_slapd_conf
    if [ "$WROTE" = 1 ] && slapd_alive; then
        log "$SLAPD_CONF changed, restarting slapd"
        stop_pidfile "$SLAPD_PID" slapd slapd
    fi
    if [ ! -s "$DATA_DIR/data.mdb" ]; then
        slapd_alive && stop_pidfile "$SLAPD_PID" slapd slapd   # never load under a running slapd
        init_directory
    elif [ ! -s "$ACCOUNTS_FILE" ]; then
        log "warning: $ACCOUNTS_FILE is missing; the demo passwords are lost (to start over: stop, remove $LDAP_DIR, start)"
    fi
    start_slapd
    migrate_directory
    start_nslcd
    make_homes
    log "up: slapd on $LISTEN_URI (base $BASE_DN, StartTLS), nslcd resolves its users"
}

cmd_stop() {
    stop_pidfile "$NSLCD_PID" nslcd nslcd
    stop_pidfile "$SLAPD_PID" slapd slapd
}

cmd_status() {
    local rc=0
    if slapd_alive; then
        echo "slapd: running (pid $(cat "$SLAPD_PID")) on $LISTEN_URI, base $BASE_DN"
    else
        echo "slapd: stopped (port $PORT)"
        rc=3
    fi
    if pid_alive "$NSLCD_PID" nslcd; then
        echo "nslcd: running (pid $(cat "$NSLCD_PID")), uri $SERVER_URI"
    else
        echo "nslcd: stopped"
        rc=3
    fi
    return $rc
}

cmd_accounts() {
    [ -s "$ACCOUNTS_FILE" ] || die "no demo accounts yet ($ACCOUNTS_FILE): run make up first"
    cat "$ACCOUNTS_FILE"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    accounts) cmd_accounts ;;
    *) echo "usage: $0 start|stop|status|accounts" >&2; exit 2 ;;
esac
