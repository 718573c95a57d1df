import ssl

import pytest
from ldap3 import Tls
from ldap3.core.exceptions import LDAPSocketOpenError
from ldapauthenticator import LDAPAuthenticator
from traitlets.config import Config

from portal import settings
from portal.auth import PortalLDAPAuthenticator, group_name
from portal.hub_config import configure_auth


def test_group_name():
    assert group_name("cn=portal-admins,ou=groups,dc=portal,dc=example") == "portal-admins"
    assert group_name("ou=x,dc=y") == "ou=x,dc=y"


def test_admin_groups_must_be_looked_up():
    auth = PortalLDAPAuthenticator(
        bind_dn_template=["uid={username},dc=x"],
        allowed_groups=["cn=users,dc=x"],
        admin_groups=["cn=admins,dc=x"],
    )
    with pytest.raises(ValueError, match="allowed_groups"):
        auth.check_allow_config()


def hub_authenticator(**site_changes):
    """The hub's authenticator as configure_auth sets it from the default settings."""
    site = settings.load()
    for section, values in site_changes.items():
        site[section].update(values)
    c = Config()
    configure_auth(c, site)
    return PortalLDAPAuthenticator(config=c), c


def test_ldap_connection_checks_the_certificate(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    auth, _ = hub_authenticator(tls={"ca_cert": str(ca)})
    assert auth.tls_strategy.name == "before_bind"
    tls = Tls(**auth.tls_kwargs)  # what ldapauthenticator's get_connection builds
    # a server whose certificate the site's CA did not sign fails the handshake
    # (tests/integration/test_ldap_tls.py tries one)
    assert tls.validate == ssl.CERT_REQUIRED
    assert tls.ca_certs_file == str(ca)


def test_groups_are_refreshed_before_spawns_and_periodically():
    auth, c = hub_authenticator(ldap={"refresh_seconds": 60})
    assert c.Authenticator.auth_refresh_age == 60
    assert c.Authenticator.refresh_pre_spawn is True


@pytest.mark.parametrize(
    "name, valid",
    [
        ("alice", True),
        ("load007", True),
        ("_svc-x", True),
        ("a" * 32, True),
        ("a" * 33, False),
        ("7up", False),
        ("al.ice", False),
        ("alice@example", False),
        ("Alice", False),
    ],
)
def test_usernames_are_unix_login_names(name, valid):
    auth, _ = hub_authenticator()
    assert auth.validate_username(name) is valid


class StubUser:
    name = "alice"

    async def get_auth_state(self):
        return None


USERS = "cn=portal-users,ou=groups,dc=portal,dc=example"
ADMINS = "cn=portal-admins,ou=groups,dc=portal,dc=example"


async def refreshed(ldap_groups):
    auth, _ = hub_authenticator()

    def lookup_groups(username):
        assert username == "alice"
        if isinstance(ldap_groups, Exception):
            raise ldap_groups
        return ldap_groups

    auth.lookup_groups = lookup_groups
    return await auth.refresh_user(StubUser())


async def test_refresh_updates_the_groups_and_leaves_admin_alone():
    """The admin group's members are portal admins through their hub group
    (the portal-admin role), never JupyterHub admins: a refresh leaves the
    hub's admin flag as it is."""
    model = await refreshed([USERS, ADMINS])
    assert model["groups"] == ["portal-admins", "portal-users"]
    assert "admin" not in model
    model = await refreshed([USERS])
    assert model["groups"] == ["portal-users"]
    assert "admin" not in model


@pytest.mark.parametrize("admin_users, admin", [(set(), None), ({"carol"}, True)])
async def test_a_login_makes_no_jupyterhub_admin_unless_named(monkeypatch, admin_users, admin):
    """What the hub stores of carol's login (a member of the admin group):
    admin None (unchanged) unless the site names her in admin_users."""

    async def bound(self, handler, data):
        return {"name": data["username"], "auth_state": {"ldap_groups": [USERS, ADMINS]}}

    monkeypatch.setattr(LDAPAuthenticator, "authenticate", bound)
    auth, _ = hub_authenticator()
    auth.admin_users = admin_users
    model = await auth.get_authenticated_user(None, {"username": "carol", "password": "x"})
    assert model["groups"] == ["portal-admins", "portal-users"]
    assert model["admin"] is admin


async def test_refresh_forces_a_new_login_outside_the_allowed_groups():
    assert await refreshed([]) is False
    assert await refreshed(None) is False  # the account is gone


async def test_refresh_keeps_the_user_when_ldap_fails():
    assert await refreshed(LDAPSocketOpenError("connection refused")) is True
