#!/usr/bin/env bash
# The portal's TLS certificate: the proxy serves HTTPS with it, the embedded
# slapd offers it with StartTLS, and every client (the hub's LDAP bind, nslcd,
# the tests, a browser) checks it against [tls] ca_cert.
#
#     deploy/tls.sh ensure              # make the local CA and the host's certificate
#                                       # when [tls] cert/key do not exist; trust the CA
#     deploy/tls.sh key-copy USER FILE  # a private copy of the key for USER (0400)
#     deploy/tls.sh key-copy USER FILE - # the same of the key on stdin (the proxy's
#                                       # internal keys, which deploy/hub.sh reads
#                                       # as the hub's account)
#     deploy/tls.sh status              # the certificate's subject, names and dates
#
# A site names its own files in [tls]; they are used as they are. When the
# configured files are missing, `ensure` makes them: a CA (ca.key beside
# ca_cert, root 0600, kept for the next certificate) and a certificate for
# this host's names, localhost, 127.0.0.1 and [tls] names. A certificate that
# ends within 30 days, or no longer covers those names, is made anew.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

CA_CERT=$PORTAL_TLS_CA_CERT
CA_KEY=$(dirname "$CA_CERT")/ca.key
CERT=$PORTAL_TLS_CERT
KEY=$PORTAL_TLS_KEY
SYSTEM_CA=/usr/local/share/ca-certificates/data-scientist-portal.crt

# The names the certificate must cover, one per line: DNS:x or IP:x.
wanted_names() {
    local name
    {
        echo "DNS:localhost"
        echo "IP:127.0.0.1"
        echo "DNS:$(hostname -s)"
        echo "DNS:$(hostname -f 2>/dev/null || hostname -s)"
        if [ -n "$PORTAL_HUB_DOMAIN" ]; then   # the hub, and each user's sessions
            echo "DNS:$PORTAL_HUB_DOMAIN"
            echo "DNS:*.$PORTAL_HUB_DOMAIN"
        fi
        for name in $PORTAL_TLS_NAMES; do
            if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then echo "IP:$name"; else echo "DNS:$name"; fi
        done
    } | sort -u
}

# The names the certificate covers, as openssl prints them, one per line.
cert_names() {
    openssl x509 -in "$CERT" -noout -ext subjectAltName 2>/dev/null |
        tail -n +2 | tr ',' '\n' | sed -E 's/^ +//; s/IP Address:/IP:/' | grep . | sort -u
}

cert_usable() {
    [ -s "$CERT" ] && [ -s "$KEY" ] || return 1
    openssl x509 -in "$CERT" -noout -checkend $((30 * 86400)) >/dev/null 2>&1 || return 1
    openssl verify -CAfile "$CA_CERT" "$CERT" >/dev/null 2>&1 || return 1
    [ -z "$(comm -23 <(wanted_names) <(cert_names))" ]
}

make_ca() {
    [ -s "$CA_CERT" ] && [ -s "$CA_KEY" ] &&
        openssl x509 -in "$CA_CERT" -noout -checkend $((365 * 86400)) >/dev/null 2>&1 && return 0
    log "making a local CA: $CA_CERT"
    install -d -m 0755 "$(dirname "$CA_CERT")"
    (umask 077 && openssl req -x509 -newkey rsa:3072 -nodes -sha256 -days 3650 \
        -subj "/O=Data Scientist Portal/CN=Data Scientist Portal local CA $(hostname -s)" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout "$CA_KEY.tmp" -out "$CA_CERT.tmp" 2>/dev/null) || die "openssl could not make the CA"
    chmod 0600 "$CA_KEY.tmp"
    chmod 0644 "$CA_CERT.tmp"
    mv -f "$CA_KEY.tmp" "$CA_KEY"
    mv -f "$CA_CERT.tmp" "$CA_CERT"
}

make_cert() {
    local dir names
    dir=$(mktemp -d)
    names=$(wanted_names | paste -sd, -)
    log "making the certificate of $(hostname -s) ($names): $CERT"
    install -d -m 0755 "$(dirname "$CERT")" "$(dirname "$KEY")"
    (umask 077 && openssl req -newkey rsa:2048 -nodes -sha256 -subj "/O=Data Scientist Portal/CN=$(hostname -f 2>/dev/null || hostname -s)" \
        -keyout "$dir/key" -out "$dir/csr" 2>/dev/null) || die "openssl could not make a key"
    printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
        "$names" >"$dir/ext"
    openssl x509 -req -in "$dir/csr" -CA "$CA_CERT" -CAkey "$CA_KEY" -CAcreateserial \
        -days 825 -sha256 -extfile "$dir/ext" -out "$dir/crt" 2>/dev/null || die "openssl could not sign the certificate"
    install -m 0600 -o root -g root "$dir/key" "$KEY"
    install -m 0644 -o root -g root "$dir/crt" "$CERT"
    rm -rf "$dir"
}

# Clients that use the system's store (curl, ldap-utils, a browser's NSS
# import, Python's default context) trust the CA.
trust_ca() {
    if [ ! -f "$SYSTEM_CA" ] || ! cmp -s "$CA_CERT" "$SYSTEM_CA"; then
        install -m 0644 "$CA_CERT" "$SYSTEM_CA"
        update-ca-certificates >/dev/null 2>&1 || log "warning: update-ca-certificates failed"
        log "the system trusts $CA_CERT"
    fi
}

cmd_ensure() {
    if cert_usable; then
        trust_ca
        return 0
    fi
    if [ -s "$CERT" ] && [ ! -s "$CA_KEY" ]; then
        # A site's own certificate: never replaced, only checked.
        openssl verify -CAfile "$CA_CERT" "$CERT" >/dev/null 2>&1 ||
            die "[tls] cert $CERT is not signed by [tls] ca_cert $CA_CERT"
        log "warning: $CERT does not cover $(comm -23 <(wanted_names) <(cert_names) | paste -sd' ' -) or ends within 30 days"
        trust_ca
        return 0
    fi
    make_ca
    make_cert
    trust_ca
}

# key-copy USER FILE [-]: FILE becomes a copy of the key (with -, of the key
# on stdin) that only USER reads.
cmd_key_copy() {
    local user=$1 file=$2 from=${3:-$KEY}
    if [ "$from" != - ]; then
        [ -s "$from" ] || die "no key at $from: run deploy/tls.sh ensure"
    fi
    install -d -m 0755 "$(dirname "$file")"
    rm -f "$file.tmp"
    (umask 077 && if [ "$from" = - ]; then cat; else cat "$from"; fi >"$file.tmp")
    [ -s "$file.tmp" ] || { rm -f "$file.tmp"; die "key-copy: no key for $file"; }
    if [ -f "$file" ] && cmp -s "$file.tmp" "$file" && [ "$(stat -c '%U %a' "$file")" = "$user 400" ]; then
        rm -f "$file.tmp"
        return 0
    fi
    chown "$user:root" "$file.tmp"
    chmod 0400 "$file.tmp"
    mv -f "$file.tmp" "$file"
}

case ${1:-} in
    ensure) cmd_ensure ;;
    key-copy)
        [ $# -eq 3 ] || { [ $# -eq 4 ] && [ "$4" = - ]; } || die "usage: $0 key-copy USER FILE [-]"
        cmd_key_copy "$2" "$3" "${4:-}" ;;
    status) openssl x509 -in "$CERT" -noout -subject -issuer -dates -ext subjectAltName ;;
    *) echo "usage: $0 ensure|key-copy USER FILE [-]|status" >&2; exit 2 ;;
esac
