"""Group changes in LDAP take effect without a new login: before a spawn, and
after auth_refresh_age, the hub reads the user's groups again
(PortalLDAPAuthenticator.refresh_user).

A dedicated account (refresh001, tests/support/loadusers.py) is changed, never the
shared demo accounts; it is removed at the end with its memberships and home.
"""

import asyncio
import socket

import ldap3
import pytest
from traitlets.config import Config

from portal import settings
from portal.roles import ADMIN_SCOPE
from spawners.auth import PortalLDAPAuthenticator
from spawners.hub_config import configure_auth
from tests.support.hubclient import HubClient
from tests.support.jobs import squeue
from tests.support.loadusers import admin_connection, ensure_users, remove_users
from tests.support.testhub import JOB_NAME

SITE = settings.load()
GROUPS = f"ou=groups,{SITE['ldap']['base_dn']}"


@pytest.fixture
def member(cluster):
    """``(name, password)`` of a fresh account in portal-users, removed at the end."""
    accounts = ensure_users(1, prefix="refresh")
    yield next(iter(accounts.items()))
    remove_users(sorted(accounts))


def change_membership(name, group, op):
    conn = admin_connection(SITE)
    try:
        conn.modify(f"cn={group},{GROUPS}", {"memberUid": [(op, [name])]})
        assert conn.result["result"] == 0, conn.result
    finally:
        conn.unbind()


class HubUser:
    """What refresh_user reads of the hub's User."""

    def __init__(self, name):
        self.name = name

    async def get_auth_state(self):
        return None


@pytest.fixture
def hub_settings(hub_env):
    """The test hub's settings."""
    return settings.load(hub_env["PORTAL_CONFIG"])


def authenticator(site):
    """An authenticator configured from the settings ``site``, as the hub's."""
    c = Config()
    configure_auth(c, site)
    return PortalLDAPAuthenticator(config=c)


def refresh(site, name, auth=None):
    """refresh_user of ``auth``, or of a new authenticator configured from ``site``."""
    auth = auth or authenticator(site)
    return asyncio.run(auth.refresh_user(HubUser(name)))


def test_removed_member_is_refused_at_the_next_spawn_and_login(hub, member):
    name, password = member
    client = HubClient(hub)
    assert client.login(name, password).status_code == 302
    change_membership(name, "portal-users", ldap3.MODIFY_DELETE)
    try:
        r = client.api("POST", f"/users/{name}/server", json={"profile": "pytorch", "gpus": 1})
        assert r.status_code == 403, r.text
        assert "login again" in r.json()["message"]
        assert not squeue("-n", JOB_NAME, "-u", name)
        assert HubClient(hub).login(name, password).status_code == 403
    finally:
        client.api("DELETE", f"/users/{name}/server")


def test_refresh_follows_the_groups_in_ldap(hub_settings, member):
    name, _ = member
    model = refresh(hub_settings, name)
    assert model["groups"] == ["portal-users"]
    change_membership(name, "portal-admins", ldap3.MODIFY_ADD)
    model = refresh(hub_settings, name)
    # a portal admin through the hub group (its portal-admin role), no hub admin
    assert model["groups"] == ["portal-admins", "portal-users"] and "admin" not in model
    change_membership(name, "portal-admins", ldap3.MODIFY_DELETE)
    change_membership(name, "portal-users", ldap3.MODIFY_DELETE)
    assert refresh(hub_settings, name) is False


def test_refreshes_keep_one_bind_and_still_read_each_change(hub_settings, member):
    """One authenticator, as the hub has one: its refreshes share one bound
    look-up connection (KeptConnection) and still read the directory each
    time; a connection cut meanwhile is replaced within the refresh."""
    name, _ = member
    auth = authenticator(hub_settings)
    assert refresh(hub_settings, name, auth)["groups"] == ["portal-users"]
    kept = auth.lookups._conn
    assert kept is not None and kept.bound
    change_membership(name, "portal-admins", ldap3.MODIFY_ADD)
    assert refresh(hub_settings, name, auth)["groups"] == ["portal-admins", "portal-users"]
    assert auth.lookups._conn is kept  # read on the same bind
    kept.socket.shutdown(socket.SHUT_RDWR)  # the connection is cut under it
    change_membership(name, "portal-admins", ldap3.MODIFY_DELETE)
    assert refresh(hub_settings, name, auth)["groups"] == ["portal-users"]
    assert auth.lookups._conn is not kept and auth.lookups._conn.bound
    change_membership(name, "portal-users", ldap3.MODIFY_DELETE)
    assert refresh(hub_settings, name, auth) is False
    auth.lookups.close()


def test_refresh_keeps_the_user_while_ldap_is_unreachable(hub_settings, member):
    name, _ = member
    hub_settings["ldap"]["server_port"] = 1  # nothing listens
    assert refresh(hub_settings, name) is True


def test_joining_the_admin_group_makes_a_portal_admin_not_a_hub_admin(hub, member):
    """The portal-admin role follows the hub group that LDAP's admin group
    fills: granted at the next login, gone at the login after leaving it."""
    name, password = member

    def who():
        client = HubClient(hub)
        assert client.login(name, password).status_code == 302
        return client.api("GET", "/user").json()

    model = who()
    assert "admin-ui" not in model["scopes"] and ADMIN_SCOPE not in model["scopes"]
    change_membership(name, "portal-admins", ldap3.MODIFY_ADD)
    try:
        model = who()
        assert model["admin"] is False and "portal-admins" in model["groups"]
        assert {"admin-ui", "list:users", ADMIN_SCOPE} <= set(model["scopes"])
        assert "proxy" not in model["scopes"]
    finally:
        change_membership(name, "portal-admins", ldap3.MODIFY_DELETE)
    model = who()
    assert "portal-admins" not in model["groups"] and ADMIN_SCOPE not in model["scopes"]
