import ssl

import pytest
from ldap3 import Tls
from ldap3.core.exceptions import LDAPSocketOpenError
from ldapauthenticator import LDAPAuthenticator
from tornado import web
from traitlets import TraitError
from traitlets.config import Config

from portal import settings
from portal.settings import group_name
from spawners.auth import PortalLDAPAuthenticator
from spawners.hub_config import configure_auth


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


def test_the_login_throttle_defaults_are_the_site_settings():
    ldap = settings.defaults()["ldap"]
    auth = PortalLDAPAuthenticator()
    assert auth.login_failures_allowed == ldap["login_failures_allowed"] == 5
    assert auth.login_lockout_seconds == ldap["login_lockout_seconds"] == 300
    assert auth.login_failure_window_seconds == ldap["login_failure_window_seconds"]
    assert auth.login_failure_delay_seconds == ldap["login_failure_delay_seconds"]
    site, _ = hub_authenticator(ldap={"login_failures_allowed": 3, "login_lockout_seconds": 60.0})
    assert (site.login_throttle.allowed, site.login_throttle.lockout) == (3, 60)


@pytest.mark.parametrize(
    "setting, value",
    [("login_failures_allowed", -1), ("login_lockout_seconds", 0.0),
     ("login_failure_window_seconds", 0.0), ("login_failure_delay_seconds", -1.0)],
)  # fmt: skip
def test_a_throttle_setting_out_of_range_stops_the_hub_and_names_it(setting, value):
    with pytest.raises(TraitError, match=setting):
        hub_authenticator(ldap={setting: value})


class StubDirectory:
    """LDAP, replaced in these tests only: ldapauthenticator's one bind
    (``get_connection``) is recorded, and only the password "right" binds."""

    def __init__(self, fails=None):
        self.binds = []
        self.fails = fails

    def __call__(self, userdn, password):
        self.binds.append(userdn)
        if self.fails:
            raise self.fails
        return StubConnection() if password == "right" else None


class StubConnection:
    def search(self, *args, **kwargs):
        return True  # a member of every allowed group


class StubHandler:
    """What authenticate reads of the login request: the address the hub
    reads (X-Forwarded-For through the proxy) and the connection's peer."""

    class request:
        remote_ip = "192.0.2.7"

        class connection:
            class context:
                address = ("127.0.0.1", 50000)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def throttled(monkeypatch):
    """(authenticator, directory, clock, sleeps): the hub's authenticator with
    the default settings, LDAP stubbed, its throttle on a fake clock that the
    login delays (asyncio.sleep) advance."""
    auth, _ = hub_authenticator()
    directory = StubDirectory()
    auth.get_connection = directory
    clock = Clock()
    auth.login_throttle.clock = clock
    sleeps = []

    async def sleep(seconds):
        sleeps.append(seconds)
        clock.now += seconds

    monkeypatch.setattr("spawners.auth.asyncio.sleep", sleep)
    return auth, directory, clock, sleeps


async def log_in(auth, name, password):
    return await auth.authenticate(StubHandler(), {"username": name, "password": password})


async def test_a_locked_out_name_is_refused_before_ldap_is_asked(throttled, caplog):
    auth, directory, clock, _ = throttled
    for _ in range(5):
        assert await log_in(auth, "alice", "guess") is None
    assert len(directory.binds) == 5
    clock.now += 60
    for password in ("guess", "right"):  # the right password too
        with pytest.raises(web.HTTPError) as refused:
            await log_in(auth, "alice", password)
        assert refused.value.status_code == 429
        assert refused.value.get_message() == (
            "Too many failed logins for alice: try again in 4 min"
        )
        assert refused.value.headers == {"Retry-After": "240"}
    assert len(directory.binds) == 5  # LDAP was not asked
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [w for w in warnings if w.startswith("Failed login for alice")] == [
        f"Failed login for alice from 192.0.2.7 (via 127.0.0.1): {n} of 5 allowed within 600 s"
        for n in range(1, 6)
    ]
    assert [w for w in warnings if "refused for 300 s" in w] == [
        "Logins for alice refused for 300 s from now: 5 failed logins within 600 s, the last "
        "from 192.0.2.7 (via 127.0.0.1) (PortalLDAPAuthenticator.login_failures_allowed, "
        "login_lockout_seconds)"
    ]
    # other names are not slowed, and alice may try again once the lockout ends
    assert (await log_in(auth, "bob", "right"))["name"] == "bob"
    clock.now += 240
    assert (await log_in(auth, "alice", "right"))["name"] == "alice"


async def test_failures_slow_the_next_attempt_of_that_name(throttled):
    auth, directory, clock, sleeps = throttled
    for _ in range(4):
        await log_in(auth, "alice", "guess")
    assert sleeps == [1, 2, 4]  # each attempt waited for the one before it
    clock.now += 3
    await log_in(auth, "bob", "guess")
    assert (await log_in(auth, "alice", "right"))["name"] == "alice"
    assert sleeps == [1, 2, 4, 5]  # 8 s after alice's 4th failure; bob did not wait
    await log_in(auth, "alice", "guess")
    assert sleeps == [1, 2, 4, 5]  # the success cleared alice's count


async def test_every_spelling_of_a_name_counts_for_it(throttled):
    auth, directory, _, _ = throttled
    for name in ("Alice", "ALICE", "aLice", "alicE", "ALICe"):
        assert await log_in(auth, name, "right") is None  # refused by ldapauthenticator
    with pytest.raises(web.HTTPError) as refused:
        await log_in(auth, "alice", "right")
    assert refused.value.status_code == 429
    assert directory.binds == []


async def test_a_directory_that_does_not_answer_counts_no_failure(throttled):
    auth, directory, _, _ = throttled
    directory.fails = LDAPSocketOpenError("connection refused")
    for _ in range(10):
        with pytest.raises(web.HTTPError) as e:
            await log_in(auth, "alice", "guess")
        assert e.value.status_code == 503
    directory.fails = None
    assert (await log_in(auth, "alice", "right"))["name"] == "alice"


async def test_no_limit_when_none_is_allowed(monkeypatch):
    auth, _ = hub_authenticator(ldap={"login_failures_allowed": 0})
    directory = StubDirectory()
    auth.get_connection = directory
    for _ in range(30):
        assert await log_in(auth, "alice", "guess") is None
    assert (await log_in(auth, "alice", "right"))["name"] == "alice"
    assert len(directory.binds) == 31
