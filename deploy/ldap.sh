#!/bin/bash
# The embedded directory of the one-machine cluster: an unprivileged OpenLDAP
# slapd on loopback that holds the portal's users and groups, and nslcd, so
# that these users are Unix accounts here too (the account that logs in to the
# hub is the one that runs the Slurm job).
#
#     deploy/ldap.sh start      # write the config, load the demo data the
#                               # first time, start slapd and nslcd, make homes
#     deploy/ldap.sh stop       # stop slapd and nslcd (the directory is kept)
#     deploy/ldap.sh status     # exit 0 if both run, else 3
#     deploy/ldap.sh accounts   # print the demo accounts and their passwords
#
# The demo data, loaded only into an empty directory: groups portal-users
# (alice, bob, carol), portal-admins (carol) and vision (alice), and the users
# alice, bob, carol and eve. eve is a valid account that no group lists
# (memberUid), so the hub must refuse her; like everyone, though, she has
# gidNumber 20000, so `id eve` shows portal-users as her primary group.
# The passwords are random, made at that first start, and kept only in the
# directory (hashed) and in the accounts file (root, 0600). To start over:
# stop, remove the LDAP directory and the accounts file, start.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

LDAP_DIR=$PORTAL_CLUSTER_LDAP_DIR
DATA_DIR=$LDAP_DIR/data
SLAPD_CONF=$LDAP_DIR/slapd.conf
SLAPD_PID=$LDAP_DIR/slapd.pid
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

# The demo data. Users: name:uidNumber:given name:surname; all have the
# primary group portal-users (gidNumber 20000).
USERS_GID=20000
DEMO_USERS=(
    "alice:20001:Alice:Adams"
    "bob:20002:Bob:Baker"
    "carol:20003:Carol:Clark"
    "eve:20009:Eve:Evans"
)
# Groups: name:gidNumber:members (memberUid). Members of ADMIN_GROUP are hub
# admins (portal.toml [ldap] admin_groups).
DEMO_GROUPS=(
    "portal-users:20000:alice bob carol"
    "portal-admins:20010:carol"
    "vision:20020:alice"
)
ADMIN_GROUP=portal-admins

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

# ---------------------------------------------------------------- slapd

# slapd_answers: the base entry can be read. (timeout: ldapsearch itself
# would wait forever on a listener that never replies.)
slapd_answers() {
    timeout 5 ldapsearch -x -LLL -o nettimeout=2 -H "$LISTEN_URI" -b "$BASE_DN" -s base dn >/dev/null 2>&1
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
argsfile $LDAP_DIR/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb

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
    # root:openldap 0770: slapd, once it dropped root, reads slapd.conf and
    # writes its pid file here.
    install -d -m 0755 "$(dirname "$LDAP_DIR")"
    install -d -o root -g openldap -m 0770 "$LDAP_DIR"
    install -d -o openldap -g openldap -m 0700 "$DATA_DIR"
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

# The demo data as LDIF, parents first; the password hashes come from HASHES.
render_demo_ldif() {
    local entry name uid given sur gid members m
    render_base_entry
    printf 'dn: %s\nobjectClass: organizationalUnit\nou: people\n\n' "$PEOPLE_DN"
    printf 'dn: %s\nobjectClass: organizationalUnit\nou: groups\n\n' "$GROUPS_DN"
    for entry in "${DEMO_GROUPS[@]}"; do
        IFS=: read -r name gid members <<<"$entry"
        printf 'dn: cn=%s,%s\nobjectClass: posixGroup\ncn: %s\ngidNumber: %s\n' \
            "$name" "$GROUPS_DN" "$name" "$gid"
        for m in $members; do echo "memberUid: $m"; done
        echo
    done
    for entry in "${DEMO_USERS[@]}"; do
        IFS=: read -r name uid given sur <<<"$entry"
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
gidNumber: $USERS_GID
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
# portal.toml ([ldap]); edit the settings, not this file.
uid nslcd
gid nslcd
uri $SERVER_URI
base $BASE_DN
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
        install -d -o "$uid" -g "$gid" -m 0700 "$home"
        cp -R /etc/skel/. "$home"/
        chown -R "$uid:$gid" "$home"
        chmod 0700 "$home"
        log "created $home"
    done
}

# ---------------------------------------------------------------- commands

cmd_start() {
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
    start_nslcd
    make_homes
    log "up: slapd on $LISTEN_URI (base $BASE_DN), nslcd resolves its users"
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
