"""LDAP login through the real slapd, and portal admin rights from portal-admins."""

import pytest
import requests

from tests.support.hubclient import HubClient


def test_right_password_logs_in(login):
    client = login("alice")
    r = client.session.get(client.url("/hub/home"), timeout=10)
    assert r.status_code == 200
    assert "alice" in r.text


@pytest.mark.parametrize(
    "username, password",
    [
        ("alice", "wrong-password"),
        ("nosuchuser", "whatever"),
        ("alice", ""),
        ("alice", "   "),
        ("*", "*"),
        ("alice)(uid=*", "x"),
        ("admin*", "x"),
        ("*)(|(uid=*", "x"),
    ],
)
def test_bad_logins_are_refused(hub, accounts, username, password):
    client = HubClient(hub)
    r = client.login(username, password)
    assert r.status_code == 403
    assert "Invalid username or password" in r.text
    # the hub still serves
    assert requests.get(hub + "/hub/login", timeout=10).status_code == 200


def test_injection_with_a_real_password_is_refused(hub, accounts):
    client = HubClient(hub)
    r = client.login("alice)(uid=*", accounts["alice"]["password"])
    assert r.status_code == 403


def test_ldap_account_outside_the_allowed_groups_is_refused(hub, accounts):
    client = HubClient(hub)
    r = client.login("eve", accounts["eve"]["password"])
    assert r.status_code == 403


def test_non_admin_gets_403_on_admin_api(login):
    alice = login("alice")
    assert alice.api("GET", "/users").status_code == 403
    assert alice.api("GET", "/users/bob").status_code == 404  # not visible to alice


def test_a_portal_admin_lists_users_but_is_no_hub_admin(login):
    """carol (portal-admins) holds the portal-admin role through her hub
    group, not JupyterHub's admin role (tests/unit/test_roles.py)."""
    carol = login("carol")
    r = carol.api("GET", "/users")
    assert r.status_code == 200
    assert carol.user_model("carol")["admin"] is False
    assert "portal-admins" in carol.user_model("carol")["groups"]
