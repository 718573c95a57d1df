"""The embedded slapd's transport: StartTLS with the portal's certificate,
no password before it, clients that check the certificate; and eve's
primary group (guests, not portal-users), migrated at start."""

import asyncio
import hashlib
import os
import re
import ssl
import subprocess
import tempfile

import ldap3
import pytest
from tornado import web
from traitlets.config import Config

from portal import settings
from spawners.auth import PortalLDAPAuthenticator
from spawners.hub_config import configure_auth
from tests.support.loadusers import admin_connection
from tests.support.testhub import deploy

SITE = settings.load()
URI = f"ldap://127.0.0.1:{SITE['ldap']['server_port']}"
PEOPLE = f"ou=people,{SITE['ldap']['base_dn']}"


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    """A CA certificate that did not sign the portal's certificate."""
    folder = tmp_path_factory.mktemp("other-ca")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=Another CA", "-keyout", folder / "ca.key", "-out", folder / "ca.crt"],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(folder / "ca.crt")


def whoami(account, *flags, ca=None):
    """ldapwhoami as ``account``; the password from a root-only file (-y),
    never in argv, where every user of the machine could read it."""
    ca = ca or SITE["tls"]["ca_cert"]
    env = {**os.environ, "LDAPTLS_CACERT": ca, "LDAPTLS_REQCERT": "demand"}
    with tempfile.NamedTemporaryFile("w") as password:
        password.write(account["password"])
        password.flush()
        return subprocess.run(
            ["ldapwhoami", "-x", *flags, "-H", URI, "-D", f"uid={account['username']},{PEOPLE}",
             "-y", password.name],
            env=env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip


def test_password_bind_needs_starttls(accounts):
    plain = whoami(accounts["alice"])
    assert plain.returncode == 13, plain.stderr
    assert "Confidentiality required" in plain.stderr
    tls = whoami(accounts["alice"], "-ZZ")
    assert tls.returncode == 0, tls.stderr
    assert tls.stdout.strip() == f"dn:uid=alice,{PEOPLE}"


def test_slapd_offers_the_portal_certificate(cluster):
    out = subprocess.run(
        ["openssl", "s_client", "-starttls", "ldap", "-connect", URI.removeprefix("ldap://"),
         "-CAfile", SITE["tls"]["ca_cert"], "-verify_return_error"],
        input="", capture_output=True, text=True, timeout=20,
    ).stdout  # fmt: skip
    assert "Verify return code: 0 (ok)" in out
    offered = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", out, re.S)
    with open(SITE["tls"]["cert"]) as f:
        ours = ssl.PEM_cert_to_DER_cert(f.read())
    assert hashlib.sha256(ssl.PEM_cert_to_DER_cert(offered.group(0))).digest() == (
        hashlib.sha256(ours).digest()
    )


def test_certificate_from_another_ca_is_refused(accounts, other_ca):
    result = whoami(accounts["alice"], "-ZZ", ca=other_ca)
    assert result.returncode != 0
    assert "ldap_start_tls" in result.stderr  # the handshake failed, before any bind


def hub_login(username, password, ca_cert):
    site = settings.load()
    site["tls"]["ca_cert"] = ca_cert
    c = Config()
    configure_auth(c, site)
    auth = PortalLDAPAuthenticator(config=c)
    return asyncio.run(auth.authenticate(None, {"username": username, "password": password}))


def test_hub_login_checks_the_certificate(accounts, other_ca):
    alice = accounts["alice"]
    model = hub_login("alice", alice["password"], SITE["tls"]["ca_cert"])
    assert model["name"] == "alice" and model["groups"] == ["portal-users"]
    with pytest.raises(web.HTTPError) as refused:
        hub_login("alice", alice["password"], other_ca)
    assert refused.value.status_code == 503


def test_the_directorys_schema_is_read_at_the_first_bind_only(accounts):
    """Against the real slapd, nothing patched: the first login reads the
    schema; a later bind's server has that very schema attached and was told
    to read nothing (ldap3 replaces an attached schema with a new object when
    it reads one at bind)."""
    site = settings.load()
    c = Config()
    configure_auth(c, site)
    auth = PortalLDAPAuthenticator(config=c)
    assert auth._ldap_schema is None
    alice, bob = accounts["alice"], accounts["bob"]
    for name, password in (("alice", alice["password"]), ("bob", bob["password"])) * 2:
        model = asyncio.run(auth.authenticate(None, {"username": name, "password": password}))
        assert model["name"] == name and "portal-users" in model["groups"]
    schema = auth._ldap_schema
    assert schema is not None and schema.object_classes  # the directory's own
    conn = auth.get_connection(auth.bind_dn_template[0].format(username="bob"), bob["password"])
    try:
        assert conn.bound and conn.server.get_info == ldap3.NONE
        assert conn.server.schema is schema  # attached, not read again
    finally:
        conn.unbind()
    assert auth._ldap_schema is schema
    # a refused password is still refused, with the schema kept
    assert asyncio.run(auth.authenticate(None, {"username": "bob", "password": "wrong"})) is None
    assert auth._ldap_schema is schema


def test_nslcd_uses_starttls_and_checks_the_certificate(cluster):
    with open("/etc/nslcd.conf") as f:
        lines = {line.strip() for line in f}
    tls = {"ssl start_tls", "tls_reqcert demand", f"tls_cacertfile {SITE['tls']['ca_cert']}"}
    assert tls <= lines
    # and resolves through it
    assert groups_of("alice").split() == ["portal-users", "vision", "lab-vision"]


def groups_of(user):
    return subprocess.run(["id", "-Gn", user], capture_output=True, text=True, check=True).stdout


def test_eve_is_in_no_portal_group(cluster):
    assert groups_of("eve").split() == ["guests"]


def test_start_migrates_an_old_directory_once(cluster):
    """A directory loaded before guests (eve's gidNumber 20000) is migrated at
    start; a second start changes nothing and restarts nothing."""
    eve = f"uid=eve,{PEOPLE}"
    conn = admin_connection(SITE)
    try:
        conn.modify(eve, {"gidNumber": [(ldap3.MODIFY_REPLACE, [20000])]})
        assert conn.result["result"] == 0, conn.result
        assert "portal-users" in groups_of("eve")
        first = deploy("ldap.sh", "start")
        assert "eve: primary group 20100" in first.stderr
        assert groups_of("eve").split() == ["guests"]
        pid = open("/run/portal/slapd/slapd.pid").read()
        again = deploy("ldap.sh", "start")
        assert "migrating" not in again.stderr and "restarting" not in again.stderr
        assert open("/run/portal/slapd/slapd.pid").read() == pid
    finally:
        conn.modify(eve, {"gidNumber": [(ldap3.MODIFY_REPLACE, [20100])]})
        conn.unbind()
