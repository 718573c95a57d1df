"""A site's directory, tried against the demo's slapd: ``ou=site`` refuses
anonymous search (deploy/templates/slapd.conf), its groups are groupOfNames
(the memberof overlay fills their users' ``memberOf``), its user's DN does
not hold the login name, and slapd serves LDAPS on [cluster] ldaps_port.

A hub of its own logs in through a service account ([ldap] lookup_bind_dn,
its password in a file of the hub's account), over LDAPS with [ldap]
ca_cert, and follows group changes; the authenticator alone shows the
membership kinds and the CA files apart. The groups keep the demo's names
(portal-users, portal-admins), so the hub's sudoers rule and its
registration with the extension helper are the demo's. Every entry under
``ou=site`` is made here and removed at the end.
"""

import asyncio
import os
import pwd
import secrets
import shutil
import ssl
import subprocess
import time
import tomllib

import ldap3
import pytest
from ldap3.core.exceptions import LDAPBindError
from ldap3.utils.hashed import hashed
from tornado import web
from traitlets.config import Config

from portal import settings
from spawners.auth import PortalLDAPAuthenticator
from spawners.hub_config import configure_auth
from tests.support.hubclient import HubClient
from tests.support.hubsettings import fresh_state, hub_settings, public_url, write_settings
from tests.support.loadusers import admin_connection
from tests.support.testhub import PORT as TEST_PORT
from tests.support.testhub import deploy

SITE = settings.load()
BASE = SITE["ldap"]["base_dn"]
SITE_DN = f"ou=site,{BASE}"
PEOPLE = f"ou=people,{SITE_DN}"
GROUPS = f"ou=groups,{SITE_DN}"
SERVICE = f"cn=portal-lookup,{SITE_DN}"
USERS = f"cn=portal-users,{GROUPS}"
ADMINS = f"cn=portal-admins,{GROUPS}"
NAME = "sitejsmith"
USER_DN = f"cn=J Smith,{PEOPLE}"  # the DN does not hold the login name
LDAPS_PORT = SITE["cluster"]["ldaps_port"]

PORT = TEST_PORT + 40  # PORT+1, +2, +81: its proxy's API, its service, its API
STATE = f"/var/lib/portal/test-ldap-site-hub-{PORT}"
SETTINGS_FILE = f"/var/lib/portal/test-ldap-site-settings-{PORT}.toml"
PASSWORD_FILE = f"/var/lib/portal/test-ldap-site-lookup-{PORT}.password"
LDAP_CA = f"/var/lib/portal/test-ldap-site-ca-{PORT}.crt"
JOB_NAME = f"portal-test-ldap-site-{PORT}"


def entries(password, service_password):
    """The site's entries, parents first: (dn, object classes, attributes)."""
    ou = ["organizationalUnit"]
    ssha = lambda secret: hashed(ldap3.HASHED_SALTED_SHA, secret)  # noqa: E731
    return [
        (SITE_DN, ou, {"ou": "site"}),
        (PEOPLE, ou, {"ou": "people"}),
        (GROUPS, ou, {"ou": "groups"}),
        (SERVICE, ["organizationalRole", "simpleSecurityObject"],
         {"cn": "portal-lookup", "userPassword": ssha(service_password)}),
        (USER_DN, ["inetOrgPerson"],
         {"cn": "J Smith", "sn": "Smith", "uid": NAME,
          "userPassword": ssha(password)}),
        # groupOfNames needs a member: the service account too, who has no
        # uid and so logs in nowhere
        (USERS, ["groupOfNames"], {"cn": "portal-users", "member": [USER_DN, SERVICE]}),
        (ADMINS, ["groupOfNames"], {"cn": "portal-admins", "member": [SERVICE]}),
    ]  # fmt: skip


def remove_site(conn):
    """Remove ``ou=site`` and everything under it (children first)."""
    conn.search(SITE_DN, "(objectClass=*)", ldap3.SUBTREE)
    for dn in sorted((e.entry_dn for e in conn.entries), key=lambda dn: -dn.count(",")):
        conn.delete(dn)


@pytest.fixture(scope="module")
def site_directory(cluster):
    """``{"password": the user's, "service": the service account's}``, with
    the site's entries in slapd and the service account's password file
    (the hub's account's, 0600), removed at the end."""
    password, service = secrets.token_urlsafe(12), secrets.token_urlsafe(12)
    conn = admin_connection(SITE)
    try:
        remove_site(conn)  # what an interrupted run left
        for dn, classes, attributes in entries(password, service):
            conn.add(dn, classes, attributes)
            assert conn.result["result"] == 0, (dn, conn.result)
        hub_account = pwd.getpwnam(SITE["hub"]["user"])
        with open(os.open(PASSWORD_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(service + "\n")
        os.chown(PASSWORD_FILE, hub_account.pw_uid, hub_account.pw_gid)
        os.chmod(PASSWORD_FILE, 0o600)
        # the directory's CA, at a path of its own ([ldap] ca_cert)
        shutil.copyfile(SITE["tls"]["ca_cert"], LDAP_CA)
        os.chmod(LDAP_CA, 0o644)
        yield {"password": password, "service": service}
    finally:
        remove_site(conn)
        conn.unbind()
        for path in (PASSWORD_FILE, LDAP_CA):
            if os.path.exists(path):
                os.unlink(path)


SITE_LDAP = f"""
[ldap]
tls_strategy = "on_connect"
server_port = {LDAPS_PORT}
ca_cert = "{LDAP_CA}"
bind_dn_template = ""
user_search_base = "{PEOPLE}"
user_attribute = "uid"
lookup_bind_dn = "{SERVICE}"
lookup_password_file = "{PASSWORD_FILE}"
group_membership = "groupOfNames"
allowed_groups = ["{USERS}", "{ADMINS}"]
admin_groups = ["{ADMINS}"]
refresh_seconds = 1
"""


def site_settings(**ldap):
    """The site hub's [ldap] settings over the demo's, with ``ldap`` changed."""
    return settings.merge(SITE, {"ldap": {**tomllib.loads(SITE_LDAP)["ldap"], **ldap}})


def authenticator(site):
    c = Config()
    configure_auth(c, site)
    return PortalLDAPAuthenticator(config=c)


def login(site, password, name=NAME):
    data = {"username": name, "password": password}
    return asyncio.run(authenticator(site).authenticate(None, data))


class HubUser:
    """What refresh_user reads of the hub's User."""

    def __init__(self, name):
        self.name = name

    async def get_auth_state(self):
        return None


def refresh(site, name=NAME):
    return asyncio.run(authenticator(site).refresh_user(HubUser(name)))


def change_member(group, op, dn=USER_DN):
    conn = admin_connection(SITE)
    try:
        conn.modify(group, {"member": [(op, [dn])]})
        assert conn.result["result"] == 0, conn.result
    finally:
        conn.unbind()


def anonymous_search(base):
    tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=LDAP_CA)
    server = ldap3.Server("127.0.0.1", port=LDAPS_PORT, use_ssl=True, tls=tls)
    conn = ldap3.Connection(server, auto_bind=ldap3.AUTO_BIND_NO_TLS)
    try:
        conn.search(base, "(objectClass=*)", ldap3.SUBTREE, attributes=["uid"])
        return [e.entry_dn for e in conn.entries]
    finally:
        conn.unbind()


def test_the_site_refuses_anonymous_search_over_ldaps(site_directory):
    assert anonymous_search(SITE_DN) == []
    assert f"uid=alice,ou=people,{BASE}" in anonymous_search(f"ou=people,{BASE}")


def test_the_service_account_finds_the_user_and_the_groups(site_directory):
    model = login(site_settings(), site_directory["password"])
    assert model["name"] == NAME and model["groups"] == ["portal-users"]
    assert refresh(site_settings())["groups"] == ["portal-users"]
    # anonymous look-ups find nobody there: no login; the refresh is refused
    # the search (insufficientAccessRights), which says nothing of the
    # account: the user is kept as they were, and the error logged
    anonymous = site_settings(lookup_bind_dn="", lookup_password_file="")
    assert login(anonymous, site_directory["password"]) is None
    assert refresh(anonymous) is True


def test_member_of_follows_the_groups_of_names(site_directory):
    """The memberof overlay keeps the user's memberOf; group_membership =
    "memberOf" reads it, at login and at each refresh."""
    site = site_settings(group_membership="memberOf")
    assert login(site, site_directory["password"])["groups"] == ["portal-users"]
    change_member(ADMINS, ldap3.MODIFY_ADD)
    try:
        assert refresh(site)["groups"] == ["portal-admins", "portal-users"]
        # posixGroup membership finds none of them: the kinds differ
        assert refresh(site_settings(group_membership="posixGroup")) is False
    finally:
        change_member(ADMINS, ldap3.MODIFY_DELETE)
    assert refresh(site)["groups"] == ["portal-users"]


def test_a_refused_lookup_bind_keeps_the_user_and_binds_again_once_fixed(site_directory):
    """slapd refuses the service account's bind (a wrong lookup password):
    the look-up names the settings to check, nothing stays kept, a refresh
    keeps the user as they were (not "the account is gone", which would log
    them out), and the right password binds again, with no restart. The DN
    look-up (lookup_dn) and the groups' search share the one kept bind."""
    auth = authenticator(site_settings())
    right = auth.lookup_dn_search_password
    auth.lookup_dn_search_password = "not-the-lookup-password"
    with pytest.raises(LDAPBindError, match="lookup_dn_search_password"):
        auth.lookup_groups(NAME)
    assert auth.lookups._conn is None
    assert asyncio.run(auth.refresh_user(HubUser(NAME))) is True
    auth.lookup_dn_search_password = right
    assert asyncio.run(auth.refresh_user(HubUser(NAME)))["groups"] == ["portal-users"]
    kept = auth.lookups._conn
    assert kept is not None and kept.bound
    assert auth.lookup_groups(NAME) == [USERS] and auth.lookups._conn is kept
    assert auth.lookup_groups("nobody-here") is None  # no entry: no account
    auth.lookups.close()


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    """A CA certificate that did not sign slapd's certificate."""
    folder = tmp_path_factory.mktemp("other-ca")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=Another CA", "-keyout", folder / "ca.key", "-out", folder / "ca.crt"],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(folder / "ca.crt")


def test_ldaps_checks_the_directorys_own_ca(site_directory, other_ca):
    """[ldap] ca_cert, not [tls] ca_cert (the web certificate's), checks
    slapd's certificate."""
    site = site_settings()
    site["tls"]["ca_cert"] = other_ca
    assert login(site, site_directory["password"])["groups"] == ["portal-users"]
    with pytest.raises(web.HTTPError) as refused:
        login(site_settings(ca_cert=other_ca), site_directory["password"])
    assert refused.value.status_code == 503


@pytest.fixture(scope="module")
def site_hub(site_directory):
    text = hub_settings(PORT, STATE, JOB_NAME) + SITE_LDAP
    env = {**os.environ, "PORTAL_CONFIG": str(write_settings(SETTINGS_FILE, text))}
    deploy("hub.sh", "stop", env=env)
    if os.path.isdir(STATE):
        fresh_state(STATE)
    result = deploy("hub.sh", "start", env=env, check=False)
    assert result.returncode == 0, result.stderr
    yield public_url(PORT)
    deploy("hub.sh", "stop", env=env)


def groups_after_refresh(client):
    """The user's hub groups once the login is older than refresh_seconds."""
    time.sleep(1.5)
    r = client.api("GET", "/user")
    return r.status_code, r.json().get("groups") if r.status_code == 200 else r.text


def test_a_hub_with_a_service_account_logs_in_and_refreshes(site_hub, site_directory):
    client = HubClient(site_hub)
    r = client.login(NAME, site_directory["password"])
    assert r.status_code == 302, r.text
    assert groups_after_refresh(client) == (200, ["portal-users"])
    change_member(ADMINS, ldap3.MODIFY_ADD)
    try:
        assert groups_after_refresh(client) == (200, ["portal-admins", "portal-users"])
    finally:
        change_member(ADMINS, ldap3.MODIFY_DELETE)
    change_member(USERS, ldap3.MODIFY_DELETE)
    try:
        status, _ = groups_after_refresh(client)
        assert status == 403  # a new login is required, and refused
        assert HubClient(site_hub).login(NAME, site_directory["password"]).status_code == 403
    finally:
        change_member(USERS, ldap3.MODIFY_ADD)
