"""Who administers what: the portal-admin role of the [ldap] admin_groups
holds what the hub's admin page and the portal need, never what would let a
portal admin take the hub over (re-point the proxy and receive its token,
make admins, mint tokens for others, open users' servers); JupyterHub's own
admin role is for break-glass accounts only.

What each endpoint requires is asked of JupyterHub itself (its
``needs_scope`` decorators), so a JupyterHub upgrade that moves a right
fails here rather than in production."""

import inspect
from types import SimpleNamespace
from unittest import mock

import pytest
from jupyterhub import orm, roles, scopes
from jupyterhub.apihandlers.groups import (
    GroupAPIHandler,
    GroupListAPIHandler,
    GroupUsersAPIHandler,
)
from jupyterhub.apihandlers.hub import ShutdownAPIHandler
from jupyterhub.apihandlers.proxy import ProxyAPIHandler
from jupyterhub.apihandlers.services import ServiceAPIHandler
from jupyterhub.apihandlers.users import (
    SpawnProgressAPIHandler,
    UserAPIHandler,
    UserListAPIHandler,
    UserServerAPIHandler,
    UserTokenAPIHandler,
    UserTokenListAPIHandler,
)
from jupyterhub.app import JupyterHub
from jupyterhub.handlers.pages import AdminHandler, SpawnHandler, SpawnPendingHandler
from tornado.httputil import HTTPHeaders, HTTPServerRequest, RequestStartLine
from tornado.web import Application
from traitlets.config import Config

from portal import settings
from portal.roles import ADMIN_SCOPE, is_portal_admin
from portal.service.handlers import BaseHandler
from spawners.handlers import may_act_on
from spawners.hub_config import configure_admins, configure_auth, configure_service


@pytest.fixture(scope="module")
def config():
    c = Config()
    configure_service(c, settings.load())
    configure_admins(c, settings.load())
    # what the hub does with c.JupyterHub.custom_scopes at start
    scopes.define_custom_scopes(c.JupyterHub.custom_scopes)
    return c


def role(c, name):
    (found,) = [r for r in c.JupyterHub.load_roles if r["name"] == name]
    return found


@pytest.fixture(scope="module")
def portal_admin(config):
    """The portal-admin role's scopes, expanded and parsed as the hub checks them."""
    return scopes.parse_scopes(scopes.expand_scopes(role(config, "portal-admin")["scopes"]))


def required_scopes(method):
    """The scopes JupyterHub's ``needs_scope`` asks of ``method`` (any one of them)."""
    wrapper = method
    while wrapper is not None:
        found = inspect.getclosurevars(wrapper).nonlocals
        if "scopes" in found and "post_filter" in found:
            return found["scopes"]
        wrapper = getattr(wrapper, "__wrapped__", None)
    raise AssertionError(f"{method.__qualname__} has no needs_scope")


def allowed(parsed, method, on=""):
    """Whether ``parsed`` scopes pass ``method``'s check for the resource
    ``on`` ("user=alice", "server=alice/"; "" for none), as needs_scope does."""
    targets = [f"{s}!{on}" if on else s for s in required_scopes(method)]
    return any(scopes.has_scope(t, parsed) for t in targets)


NEEDED = [
    ("the admin page", AdminHandler.get, ""),
    ("its list of users", UserListAPIHandler.get, ""),
    ("a user", UserAPIHandler.get, "user=alice"),
    ("its list of groups", GroupListAPIHandler.get, ""),
    ("a group", GroupAPIHandler.get, "group=vision"),
    ("start a user's session", UserServerAPIHandler.post, "server=alice/"),
    ("stop it", UserServerAPIHandler.delete, "server=alice/"),
    ("a user's spawn page", SpawnHandler._get, "server=alice/"),
    ("start from it", SpawnHandler._post, "server=alice/"),
    ("the spawn's pending page", SpawnPendingHandler.get, "server=alice/"),
    ("the spawn's progress", SpawnProgressAPIHandler.get, "server=alice/"),
]


@pytest.mark.parametrize("what, method, on", NEEDED, ids=[n[0] for n in NEEDED])
def test_a_portal_admin_may(portal_admin, what, method, on):
    assert allowed(portal_admin, method, on), f"{what} needs one of {required_scopes(method)}"


REFUSED = [
    ("read the proxy's routes", ProxyAPIHandler.get, ""),
    ("sync the hub with the proxy", ProxyAPIHandler.post, ""),
    ("point the hub at another proxy (PATCH /hub/api/proxy)", ProxyAPIHandler.patch, ""),
    ("create users, admins among them", UserListAPIHandler.post, ""),
    ("make a user admin", UserAPIHandler.patch, "user=bob"),
    ("delete a user", UserAPIHandler.delete, "user=bob"),
    ("read a user's tokens", UserTokenListAPIHandler.get, "user=alice"),
    ("revoke a user's token", UserTokenAPIHandler.delete, "user=alice"),
    ("join the admin group", GroupUsersAPIHandler.post, "group=portal-admins"),
    ("create a group", GroupAPIHandler.post, "group=mine"),
    ("add a service (an address the proxy routes to)", ServiceAPIHandler.post, "service=x"),
    ("shut the hub down", ShutdownAPIHandler.post, ""),
]


@pytest.mark.parametrize("what, method, on", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_portal_admin_may_not(portal_admin, what, method, on):
    assert not allowed(portal_admin, method, on), what


# checked in the handlers' bodies, not by a decorator
REFUSED_INSIDE = [
    ("create a token for alice (POST /hub/api/users/alice/tokens)", "tokens!user=alice"),
    ("open alice's JupyterLab (the OAuth of her server)", "access:servers!server=alice/"),
    ("read a user's LDAP groups as stored (auth_state)", "admin:auth_state!user=alice"),
    ("read or write a session's state (its Slurm job)", "admin:server_state!server=alice/"),
]


@pytest.mark.parametrize("what, scope", REFUSED_INSIDE, ids=[r[0] for r in REFUSED_INSIDE])
def test_a_portal_admin_may_not_either(portal_admin, what, scope):
    assert not scopes.has_scope(scope, portal_admin), what


FORBIDDEN = {
    "proxy",
    "admin:users",
    "users",
    "delete:users",
    "admin:auth_state",
    "admin:groups",
    "groups",
    "tokens",
    "read:tokens",
    "admin:services",
    "admin:servers",
    "admin:server_state",
    "access:servers",
    "shares",
    "shutdown",
}


def test_the_role_holds_none_of_the_hubs_master_keys(portal_admin):
    assert FORBIDDEN.isdisjoint(portal_admin)


def test_the_role_holds_exactly_these_scopes(portal_admin):
    """Any scope added to the role (``proxy``, say) fails here until it is
    weighed and written down."""
    assert set(portal_admin) == {
        "admin-ui",
        "list:users",
        "read:users",
        "read:users:name",
        "read:users:groups",
        "read:users:activity",
        "list:groups",
        "read:groups",
        "read:groups:name",
        "servers",
        "read:servers",
        "start:servers",
        "delete:servers",
        # the Prometheus series at /hub/metrics: no user's name, no secret (issue 28)
        "read:metrics",
        ADMIN_SCOPE,
    }


def test_the_role_is_the_admin_groups(config):
    assert role(config, "portal-admin")["groups"] == ["portal-admins"]
    assert is_portal_admin(scopes.expand_scopes(role(config, "portal-admin")["scopes"]))


def test_no_one_is_a_jupyterhub_admin_unless_named(config):
    """The admin role's members are exactly Authenticator.admin_users (which
    JupyterHub merges in at start): a portal admin made admin by an older
    portal is not one after the next start."""
    admin = role(config, "admin")
    assert admin["users"] == [] and "scopes" not in admin and "groups" not in admin
    # nor is a JupyterHub admin a portal admin by that alone
    (jupyterhub_admin,) = [r for r in roles.get_default_roles() if r["name"] == "admin"]
    assert not is_portal_admin(scopes.expand_scopes(jupyterhub_admin["scopes"]))


async def hub_start(tmp_path, admin_users=()):
    """What a hub start does with the users and roles of the hub's database
    ``tmp_path``/hub.sqlite, configured as jupyterhub_config.py does; listens
    on nothing. Returns ``{name: (admin, roles)}`` after it."""
    c = Config()
    site = settings.load()
    configure_auth(c, site)
    configure_service(c, site)
    configure_admins(c, site)
    c.Authenticator.admin_users = set(admin_users)
    c.JupyterHub.db_url = f"sqlite:///{tmp_path}/hub.sqlite"
    app = JupyterHub(config=c)
    app.init_db()
    app.init_hub()
    app.init_oauth()
    await app.init_role_creation()
    await app.init_users()
    await app.init_groups()
    app.init_services()
    await app.init_role_assignment()
    users = app.db.query(orm.User).all()
    return {u.name: (u.admin, sorted(r.name for r in u.roles)) for u in users}


async def test_an_admin_made_by_an_older_portal_is_not_one_after_the_start(tmp_path):
    await hub_start(tmp_path)
    # the database of a portal that made portal admins JupyterHub admins
    app = JupyterHub(db_url=f"sqlite:///{tmp_path}/hub.sqlite")
    app.init_db()
    carol = orm.User(name="carol", admin=True)
    app.db.add(carol)
    roles.assign_default_roles(app.db, carol)
    app.db.commit()
    assert "admin" in [r.name for r in carol.roles]

    assert (await hub_start(tmp_path))["carol"] == (False, ["user"])


async def test_a_break_glass_admin_is_named_in_admin_users(tmp_path):
    users = await hub_start(tmp_path, admin_users={"breakglass"})
    assert users["breakglass"] == (True, ["admin", "user"])
    # removed from the setting, it is no admin after the next start
    assert (await hub_start(tmp_path))["breakglass"] == (False, ["user"])


def service_handler(user):
    """A handler of the admin service whose OAuth user model is ``user``."""
    start = RequestStartLine("GET", "/services/portal/profiles", "HTTP/1.1")
    headers = HTTPHeaders({"Host": "127.0.0.1"})
    request = HTTPServerRequest(start_line=start, headers=headers, connection=mock.Mock())
    handler = BaseHandler(Application(), request)
    handler._current_user = user
    return handler


def test_the_service_knows_a_portal_admin_by_the_scope_alone():
    carol = {"name": "carol", "admin": False, "scopes": [ADMIN_SCOPE, "access:services"]}
    assert service_handler(carol).is_admin
    # a JupyterHub admin (break-glass) is not a portal admin by that alone
    root = {"name": "root", "admin": True, "scopes": ["access:services"]}
    assert not service_handler(root).is_admin


def hub_request(name, *scope_names, admin=False):
    """What ``may_act_on`` reads of a hub handler's request."""
    return SimpleNamespace(
        current_user=SimpleNamespace(name=name, admin=admin),
        expanded_scopes=scopes.expand_scopes(scope_names),
    )


def test_the_hub_lets_the_owner_and_portal_admins_extend_a_session(config):
    assert may_act_on(hub_request("alice"), "alice")
    carol = hub_request("carol", *role(config, "portal-admin")["scopes"])
    assert may_act_on(carol, "alice")
    assert not may_act_on(hub_request("bob"), "alice")
    root = hub_request("root", "admin:users", "admin:servers", admin=True)
    assert not may_act_on(root, "alice")


def test_the_monitoring_service_reads_the_metrics_and_nothing_else(config):
    assert role(config, "monitoring")["scopes"] == ["read:metrics"]
