import ssl

import pytest
from ldap3 import Tls
from ldap3.core.exceptions import (
    LDAPBindError,
    LDAPOperationResult,
    LDAPSessionTerminatedByServerError,
    LDAPSocketOpenError,
    LDAPSocketReceiveError,
)
from ldapauthenticator import LDAPAuthenticator
from tornado import web
from traitlets import TraitError
from traitlets.config import Config

from portal import settings
from portal.settings import group_name
from spawners.auth import KeptConnection, PortalLDAPAuthenticator
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
        ("al.ice", True),
        ("J.Smith", True),
        ("Alice", True),
        ("alice@example", False),
        (".alice", False),
        ("-alice", False),
        ("a/b", False),
        ("a,b", False),
        ("alice\n", False),
    ],
)
def test_usernames_are_unix_login_names_with_dots_and_upper_case(name, valid):
    auth, c = hub_authenticator()
    assert auth.validate_username(name) is valid
    # ldapauthenticator's check before the bind is the same rule
    assert c.LDAPAuthenticator.valid_username_regex == c.Authenticator.username_pattern


def test_a_site_narrows_the_usernames():
    auth, _ = hub_authenticator(hub={"username_pattern": "^[a-z][a-z0-9]{0,7}$"})
    assert auth.validate_username("alice")
    assert not auth.validate_username("J.Smith")
    assert not auth.validate_username("alice123x")


@pytest.mark.parametrize(
    "pattern, message",
    [
        (".*", "accepts '' \\(an empty name\\)"),
        ("^[A-Za-z0-9,]+$", "accepts 'a,b'"),
        ("^[a-z.]+$", "accepts '.'"),
        ("^[a-z+$", "not a regular expression"),
        ("^[0-9]+$", "accepts '1000'"),
        ("^x$", "accepts none of alice"),
    ],
)
def test_a_username_pattern_that_takes_dangerous_names_stops_the_hub(pattern, message):
    with pytest.raises(ValueError, match=f"username_pattern.*{message}"):
        hub_authenticator(hub={"username_pattern": pattern})


def test_names_keep_their_case():
    """JupyterHub lowers names by default; a hub name here is a Unix account."""
    auth, _ = hub_authenticator()
    assert auth.normalize_username("J.Smith") == "J.Smith"
    auth.username_map = {"jsmith": "J.Smith"}
    assert auth.normalize_username("jsmith") == "J.Smith"


class StubUser:
    name = "alice"

    def __init__(self, auth_state=None, groups=None):
        self.auth_state = auth_state
        if groups is not None:  # JupyterHub's User: its hub groups
            self.groups = [type("Group", (), {"name": name}) for name in groups]

    async def get_auth_state(self):
        return self.auth_state


USERS = "cn=portal-users,ou=groups,dc=portal,dc=example"
ADMINS = "cn=portal-admins,ou=groups,dc=portal,dc=example"


async def refreshed(ldap_groups, user=None, auth_state=True):
    auth, _ = hub_authenticator()
    auth.enable_auth_state = auth_state

    def lookup_groups(username):
        assert username == "alice"
        if isinstance(ldap_groups, Exception):
            raise ldap_groups
        return ldap_groups

    auth.lookup_groups = lookup_groups
    return await auth.refresh_user(user or StubUser())


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


async def test_a_refresh_that_finds_the_groups_as_stored_has_nothing_stored_again():
    """True: JupyterHub then skips its update of the user (roles, groups,
    auth state, each committed); any difference gives the model."""
    stored = {"ldap_groups": [USERS], "other": 1}
    assert await refreshed([USERS], StubUser(stored, ["portal-users"])) is True
    model = await refreshed([USERS, ADMINS], StubUser(stored, ["portal-users"]))
    assert model["groups"] == ["portal-admins", "portal-users"]
    assert model["auth_state"] == {"ldap_groups": [USERS, ADMINS], "other": 1}
    # the hub's groups differ from the auth state's (changed by an admin)
    model = await refreshed([USERS], StubUser(stored, ["portal-users", "portal-admins"]))
    assert model["groups"] == ["portal-users"]
    assert await refreshed([], StubUser(stored, ["portal-users"])) is False
    # without an auth state (the hub's default), the hub's groups alone
    assert await refreshed([USERS], StubUser(None, ["portal-users"]), auth_state=False) is True
    model = await refreshed([USERS], StubUser(None, ["portal-users"]), auth_state=True)
    assert model["groups"] == ["portal-users"]


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
        return StubConnection(self.spellings) if password == "right" else None

    # the directory's own spelling of a uid, matched regardless of case (as
    # uid is): {casefolded: stored}
    spellings = {}


class StubConnection:
    def __init__(self, spellings):
        self.spellings = spellings
        self.entries = []

    def search(self, search_base, *args, attributes=None, **kwargs):
        # a member of every allowed group; the user's own entry, with its uid
        uid = search_base.split(",")[0].partition("=")[2]
        stored = self.spellings.get(uid.casefold(), uid)
        self.entries = [StubEntry({"uid": [stored]})]
        return True


class StubEntry:
    def __init__(self, attributes):
        self.entry_attributes_as_dict = attributes


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
    """The directory binds uid=ALICE as alice: guesses in other cases count
    towards alice's lockout."""
    auth, directory, _, _ = throttled
    for name in ("Alice", "ALICE", "aLice", "alicE", "ALICe"):
        assert await log_in(auth, name, "guess") is None
    with pytest.raises(web.HTTPError) as refused:
        await log_in(auth, "alice", "right")
    assert refused.value.status_code == 429
    assert len(directory.binds) == 5


async def test_a_login_is_named_as_the_directory_and_nss_spell_the_account(throttled, monkeypatch):
    """J.Smith logs in as J.Smith (not lowered); j.smith typed, where the
    directory takes it, becomes the account's own spelling; and NSS has the
    last word (sssd without case sensitivity lowers names)."""
    auth, directory, _, _ = throttled
    directory.spellings = {"j.smith": "J.Smith"}
    nss = {}
    monkeypatch.setattr("spawners.auth.nss_name", lambda name: nss.get(name, name))

    async def hub_name(typed):
        model = await auth.get_authenticated_user(
            StubHandler(), {"username": typed, "password": "right"}
        )
        return model["name"]

    assert await hub_name("J.Smith") == "J.Smith"
    assert await hub_name("j.smith") == "J.Smith"
    assert await hub_name("alice") == "alice"
    nss["J.Smith"] = "j.smith"
    assert await hub_name("J.Smith") == "j.smith"


async def test_an_unsafe_name_is_refused_before_the_bind(throttled):
    auth, directory, _, _ = throttled
    for name in ("a,b", "a*", "-x", "a b", "..", "uid=x"):
        assert await log_in(auth, name, "right") is None
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


# -- the kept look-up connection ---------------------------------------------


class KeptConn:
    """A bound connection as KeptConnection uses it: ``closed`` and ``unbind``."""

    def __init__(self, number):
        self.number = number
        self.closed = False

    def unbind(self):
        self.closed = True


class Binds:
    """``connect`` for KeptConnection: a new numbered connection per bind."""

    def __init__(self, refuse=False):
        self.made = []
        self.refuse = refuse

    def __call__(self):
        if self.refuse:
            return None
        self.made.append(KeptConn(len(self.made) + 1))
        return self.made[-1]


def test_look_ups_share_one_bind_until_it_has_been_idle_too_long():
    binds, clock = Binds(), Clock()
    kept = KeptConnection(binds, idle=240, clock=clock)
    assert [kept.run(lambda c: c.number) for _ in range(3)] == [1, 1, 1]
    clock.now += 240
    assert kept.run(lambda c: c.number) == 1  # used 240 s ago: still kept
    clock.now += 241
    assert kept.run(lambda c: c.number) == 2  # idle too long: bound anew
    assert binds.made[0].closed and not binds.made[1].closed


def test_a_kept_connection_gone_stale_is_replaced_and_the_look_up_tried_once_more():
    binds = Binds()
    kept = KeptConnection(binds)
    kept.run(lambda c: c.number)
    answers = []

    def work(conn):
        if conn.number == 1:
            raise LDAPSessionTerminatedByServerError("closed by the server")
        answers.append(conn.number)
        return "groups"

    assert kept.run(work) == "groups"
    assert answers == [2] and binds.made[0].closed


def test_a_new_connection_that_fails_raises_without_a_second_try():
    binds = Binds()
    kept = KeptConnection(binds)
    tries = []

    def work(conn):
        tries.append(conn.number)
        raise LDAPSocketReceiveError("timed out")

    with pytest.raises(LDAPSocketReceiveError):
        kept.run(work)
    assert tries == [1] and binds.made[0].closed
    assert kept.run(lambda c: c.number) == 2  # the next look-up binds anew


def test_a_look_up_that_fails_otherwise_drops_the_connection_and_raises():
    binds = Binds()
    kept = KeptConnection(binds)

    def busy(conn):
        raise LDAPOperationResult(result=51, description="busy")

    with pytest.raises(LDAPOperationResult):
        kept.run(busy)
    assert len(binds.made) == 1 and binds.made[0].closed
    assert kept.run(lambda c: c.number) == 2


def test_a_connection_found_closed_is_bound_anew():
    binds = Binds()
    kept = KeptConnection(binds)
    kept.run(lambda c: c.number)
    binds.made[0].closed = True  # ldap3 saw the socket end
    assert kept.run(lambda c: c.number) == 2


def test_a_refused_look_up_bind_names_the_settings_to_check():
    auth, _ = hub_authenticator()
    auth.get_connection = lambda userdn, password, receive_timeout=None: None
    with pytest.raises(LDAPBindError, match="lookup_dn_search_user/lookup_dn_search_password"):
        auth.lookup_groups("alice")
