"""Group changes in LDAP take effect without a new login: before a spawn, and
after auth_refresh_age, the hub reads the user's groups again
(PortalLDAPAuthenticator.refresh_user).

A dedicated account (refresh001, tests/support/loadusers.py) is changed, never the
shared demo accounts; it is removed at the end with its memberships and home.
"""

import asyncio

import ldap3
import pytest
from traitlets.config import Config

from portal import settings
from portal.auth import PortalLDAPAuthenticator
from portal.hub_config import configure_auth
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


def refresh(site, name):
    """refresh_user of an authenticator configured from the settings ``site``."""
    c = Config()
    configure_auth(c, site)
    auth = PortalLDAPAuthenticator(config=c)
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
    assert (model["groups"], model["admin"]) == (["portal-users"], False)
    change_membership(name, "portal-admins", ldap3.MODIFY_ADD)
    model = refresh(hub_settings, name)
    assert (model["groups"], model["admin"]) == (["portal-admins", "portal-users"], True)
    change_membership(name, "portal-admins", ldap3.MODIFY_DELETE)
    change_membership(name, "portal-users", ldap3.MODIFY_DELETE)
    assert refresh(hub_settings, name) is False


def test_refresh_keeps_the_user_while_ldap_is_unreachable(hub_settings, member):
    name, _ = member
    hub_settings["ldap"]["server_port"] = 1  # nothing listens
    assert refresh(hub_settings, name) is True
