"""LDAP login: jupyterhub-ldapauthenticator, plus the user's groups from LDAP.

The bind, the username checks and the escaping are ldapauthenticator's. This
subclass adds only what it lacks: the user's portal groups are synchronised
into the hub's groups (``manage_groups``) so that the spawner, the admin
service and the roles can read them, and they are read again from LDAP after
``auth_refresh_age`` and before each spawn (``refresh_user``), so a user
removed from the ``allowed_groups`` must log in again, and is refused.

It never makes anyone a JupyterHub admin: members of the ``admin_groups``
are portal admins through the hub group of that name, which holds the
``portal-admin`` role (``spawners.hub_config.configure_admins``); JupyterHub's
admin role is for the accounts a site names in ``Authenticator.admin_users``.

Group membership is searched as [ldap] group_membership says
(``spawners.ldap_settings``): ldapauthenticator's group search of each
allowed group (``posixGroup``: memberUid, ``groupOfNames``: member), or the
user's own ``memberOf`` (``member_of``). ldapauthenticator's binds and
searches are synchronous: a login runs them in a thread, as a refresh does,
so that the hub's event loop is never held by the directory. The
directory's schema (which ldap3 reads and parses at every bind, by
default: a tenth of the hub's time under a wave of logins) is read at the
first bind only, and kept (``get_connection``). The look-ups of groups
and mail (a refresh before each spawn among them) share one connection,
bound once and kept (``KeptConnection``): a new bind with StartTLS took
about 70 ms of every spawn.

A user's hub name is their Unix account, spelled as NSS names it (it runs
their Slurm jobs: ``sudo -u NAME sbatch``): names are not lowered
(``normalize_username``), and after the bind the name typed becomes the
directory's own spelling of it, then NSS's (``unix_name``): ``J.Smith``
stays ``J.Smith``; ``j.smith`` typed for that account, where the directory
takes it, becomes ``J.Smith`` too. Which names are taken at all is
``[hub] username_pattern`` within ``portal.core.usernames.SAFE``.

Password guessing is slowed, then refused, per user name (``spawners.throttle``):
``authenticate`` asks the throttle before ldapauthenticator binds, so a
locked-out name gets HTTP 429 without LDAP being asked, even with the right
password. The counts live in the hub's memory; a hub restart forgets them.
"""

import asyncio
import math
import pwd
import threading
import time

import ldap3
from ldap3.core.exceptions import (
    LDAPBindError,
    LDAPCommunicationError,
    LDAPException,
    LDAPOperationResult,
    LDAPSocketOpenError,
)
from ldap3.core.results import RESULT_NO_SUCH_OBJECT, RESULT_SUCCESS
from ldap3.core.tls import Tls
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn
from ldapauthenticator import LDAPAuthenticator
from ldapauthenticator.ldapauthenticator import TlsStrategy
from tornado import web
from traitlets import Bool, Float, Instance, Integer, List, default

from portal.core.durations import describe_wait
from portal.settings import defaults, group_name
from spawners.jupyterhub_patches import mark_cookie_request
from spawners.ldap_settings import MEMBER_OF, group_search, member_of_groups
from spawners.throttle import LoginThrottle

LDAP = defaults()["ldap"]  # deploy/portal.toml, the one declaration of the defaults
# The kept look-up connection (KeptConnection): one unused this long is bound
# anew rather than trusted (a NAT or firewall may have dropped it without a
# word: AWS's NAT gateways after 350 s), and an answer is awaited this long.
LOOKUP_IDLE_SECONDS = 240
LOOKUP_RECEIVE_TIMEOUT = 10


class KeptConnection:
    """One LDAP connection bound for look-ups, kept from one to the next.

    A bind here (TCP, StartTLS, the bind) takes about 70 ms, a base search
    about 1 ms; the hub reads a user's groups again before each spawn. Each
    look-up still asks the directory: no answer is kept, only the bound
    connection. Look-ups run in threads, one at a time on it (a lock).

    A connection that fails on the wire (the directory restarted, or closed
    it while idle) is dropped and the look-up tried once more on a new one;
    one unused for ``idle`` seconds is replaced before use. A look-up that
    fails in any other way drops it too, and raises. ``connect()`` gives a
    bound connection, or None when the bind is refused (LDAPBindError).
    """

    def __init__(self, connect, idle=LOOKUP_IDLE_SECONDS, clock=time.monotonic):
        self.connect = connect
        self.idle = idle
        self.clock = clock
        self._conn = None
        self._used = 0.0
        self._lock = threading.Lock()

    def run(self, work):
        """``work(conn)`` on the kept connection (made first if there is none)."""
        with self._lock:
            if self._conn is not None and (
                self._conn.closed or self.clock() - self._used > self.idle
            ):
                self._drop()
            while True:
                fresh = self._conn is None
                if fresh:
                    self._conn = self.connect()
                    if self._conn is None:
                        raise LDAPBindError("the look-up bind was refused")
                try:
                    result = work(self._conn)
                except LDAPCommunicationError:
                    self._drop()
                    if fresh:
                        raise
                    continue  # a kept one gone stale: once more, on a new one
                except BaseException:
                    self._drop()
                    raise
                self._used = self.clock()
                return result

    def close(self):
        with self._lock:
            self._drop()

    def _drop(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.unbind()
            except Exception:
                pass  # already gone


def checked(conn):
    """Raise LDAPOperationResult when ``conn``'s last operation failed other
    than by finding nothing ("no such object" is an answer)."""
    if conn.result["result"] not in (RESULT_SUCCESS, RESULT_NO_SUCH_OBJECT):
        raise LDAPOperationResult(
            result=conn.result["result"], description=conn.result["description"]
        )


def login_required(handler):
    """refresh_user's answer that the user must log in again: False (with
    ``jupyterhub_patches.mark_cookie_request``'s fix of JupyterHub 6.1.1)."""
    mark_cookie_request(handler)
    return False


def shown(name):
    """A login name as logs and messages show it: at most 32 characters, with
    control and non-ASCII characters escaped (a name is whatever was typed)."""
    if len(name) > 32:
        name = f"{name[:16]}...({len(name)} chars)"
    return ascii(name)[1:-1]


def hub_groups(user):
    """The names of the hub groups ``user`` (JupyterHub's ``User``) is in,
    sorted; None when it has none to read."""
    groups = getattr(user, "groups", None)
    if groups is None:
        return None
    return sorted(group.name for group in groups)


def client_address(handler):
    """Where a login came from, for the log: the address the hub reads (the
    proxy's X-Forwarded-For, or an X-Real-Ip any client may send), and the
    connection's own peer when it differs (the proxy's, or a direct caller's)."""
    if handler is None:
        return "unknown"
    request = handler.request
    peer = getattr(getattr(request.connection, "context", None), "address", None)
    peer = peer[0] if isinstance(peer, tuple) and peer else None
    if peer in (None, request.remote_ip):
        return request.remote_ip
    return f"{request.remote_ip} (via {peer})"


def throttled_name(name):
    """The name a login counts under for the throttle: case folded, as
    directories match login names (uid=ALICE binds as alice), so guessing
    in other cases counts towards the same lockout."""
    return name.strip().casefold()


def login_attribute(user_attribute, bind_dn_templates):
    """The directory attribute that holds the login name:
    ldapauthenticator's ``user_attribute``, else the first RDN's of the
    first ``bind_dn_template``; None when neither says.

    >>> login_attribute(None, ["uid={username},ou=people,dc=example"])
    'uid'
    >>> login_attribute("sAMAccountName", []), login_attribute(None, ["{username}@ad"])
    ('sAMAccountName', None)
    """
    if user_attribute:
        return user_attribute
    for template in bind_dn_templates or []:
        attribute, _, value = template.partition(",")[0].partition("=")
        if value.strip() == "{username}" and attribute.strip():
            return attribute.strip()
        return None
    return None


def directory_spelling(name, values):
    """The directory's own spelling of the login ``name``: the value of its
    login attribute that is ``name`` but for case, else ``name``.

    >>> directory_spelling("j.smith", ["J.Smith", "jsmith"])
    'J.Smith'
    >>> directory_spelling("alice", []), directory_spelling("bob", ["robert"])
    ('alice', 'bob')
    """
    for value in values or []:
        if isinstance(value, str) and value.casefold() == name.casefold():
            return value
    return name


def nss_name(name):
    """The account's name as NSS gives it (sssd without case sensitivity
    lowers it), or ``name`` when NSS does not know it (the spawner then
    refuses its sessions, saying so). Blocking: run in a thread."""
    try:
        return pwd.getpwnam(name).pw_name
    except KeyError:
        return name


def too_many_failures(name, seconds):
    """The refusal of a locked-out name: HTTP 429, which the login page shows
    as its error, with the seconds in Retry-After."""
    refusal = web.HTTPError(
        429, "Too many failed logins for %s: try again in %s", shown(name), describe_wait(seconds)
    )
    refusal.headers = {"Retry-After": str(max(math.ceil(seconds), 1))}
    return refusal


class PortalLDAPAuthenticator(LDAPAuthenticator):
    admin_groups = List(
        help="""LDAP group DNs whose members are portal admins.

        Their hub groups (of the same common name) get the ``portal-admin``
        role: the hub's admin page, starting, stopping and extending anyone's
        session, editing spawner profiles; not JupyterHub's admin role. Each
        DN must also be listed in ``allowed_groups``: membership is looked up
        among those. Read at every login and group refresh, so removing a
        user from the group in LDAP removes their admin rights within
        ``auth_refresh_age``.

        Example: ``["cn=portal-admins,ou=groups,dc=example,dc=org"]``. Default: none.
        """,
    ).tag(config=True)

    member_of = Bool(
        False,
        help="""Whether a user's groups are the ``allowed_groups`` named by the
        ``memberOf`` attribute of the user's own entry (FreeIPA, 389-ds, Active
        Directory, OpenLDAP's memberof overlay), rather than those whose entry
        matches ``group_search_filter``. ``memberOf`` must be in
        ``auth_state_attributes``, which reads it at login.

        Default: False (deploy/portal.toml [ldap] group_membership = "memberOf"
        sets it). Example: ``True``.
        """,
    ).tag(config=True)

    login_failures_allowed = Integer(
        LDAP["login_failures_allowed"],
        min=0,
        help="""Failed logins of one user name within ``login_failure_window_seconds``
        that lock the name out for ``login_lockout_seconds``.

        Before that, each failure makes the name's next attempt wait
        ``login_failure_delay_seconds``, doubling with each failure. A
        locked-out name is refused (HTTP 429, "Too many failed logins for
        alice: try again in 5 min") before LDAP is asked, even with the right
        password; other names are not slowed. A successful login clears the
        count. Names are counted regardless of case (``Alice`` counts for
        ``alice``), whether or not the account exists.
        Counted in the hub's memory: a hub restart forgets them.

        Default 5 (deploy/portal.toml [ldap]). Example: ``10``. 0: no limit,
        no delay.
        """,
    ).tag(config=True)

    login_failure_window_seconds = Float(
        LDAP["login_failure_window_seconds"],
        min=1,
        help="""Seconds a failed login counts towards ``login_failures_allowed``
        (a sliding window: older failures are forgotten).

        Default 600 (deploy/portal.toml [ldap]). Example: ``3600``.
        """,
    ).tag(config=True)

    login_lockout_seconds = Float(
        LDAP["login_lockout_seconds"],
        min=1,
        help="""Seconds a user name is refused once it has reached
        ``login_failures_allowed`` failed logins; then its count starts again.
        Anyone who knows a name can lock it out this long, so keep it short:
        it is there to make guessing slow, not to stop it for good.

        Default 300 (deploy/portal.toml [ldap]). Example: ``900``. At least 1;
        ``login_failures_allowed = 0`` turns the throttle off.
        """,
    ).tag(config=True)

    login_failure_delay_seconds = Float(
        LDAP["login_failure_delay_seconds"],
        min=0,
        help="""Seconds after a failed login before the same name's next attempt
        is checked, doubled with each further failure in the window (1, 2, 4,
        8 s), at most ``login_lockout_seconds``. The hub holds the attempt that
        long (other logins go on); a person retyping a password rarely notices.

        Default 1 (deploy/portal.toml [ldap]). Example: ``2``. 0: no delay.
        """,
    ).tag(config=True)

    login_throttle = Instance(
        LoginThrottle,
        help="""The failed logins counted so far (``spawners.throttle.LoginThrottle``),
        built from the ``login_*`` settings. Kept in the hub's memory only.""",
    )

    @default("login_throttle")
    def _login_throttle_default(self):
        return LoginThrottle(
            allowed=self.login_failures_allowed,
            window=self.login_failure_window_seconds,
            lockout=self.login_lockout_seconds,
            delay=self.login_failure_delay_seconds,
        )

    @default("manage_groups")
    def _manage_groups_default(self):
        return True

    @default("auth_state_attributes")
    def _auth_state_attributes_default(self):
        # the directory's spelling of the login name (unix_name)
        attribute = login_attribute(self.user_attribute, self.bind_dn_template)
        return [attribute] if attribute else []

    def normalize_username(self, username):
        """The name as it is (JupyterHub's default lowers it): a hub name is a
        Unix account, and Unix names are case-sensitive (``J.Smith`` is not
        ``j.smith``). ``username_map`` still applies."""
        return self.username_map.get(username, username)

    async def unix_name(self, model, typed):
        """The hub name of a login: the directory's spelling of the name
        ``typed`` (its login attribute, returned in the model's auth_state),
        then the account's name as NSS gives it, which sudo and Slurm use."""
        attribute = login_attribute(self.user_attribute, self.bind_dn_template)
        found = (model.get("auth_state") or {}).get("user_attributes") or {}
        spelled = directory_spelling(typed, found.get(attribute) if attribute else None)
        name = await asyncio.to_thread(nss_name, spelled)
        if name != typed:
            self.log.info("Login of %s: the account is %s", shown(typed), name)
        return name

    async def authenticate(self, handler, data):
        """ldapauthenticator's bind, throttled per user name, with the LDAP groups applied.

        Raises HTTP 429 while the name is locked out (before any bind), and
        HTTP 503 when the directory does not answer (not counted as a failure).
        """
        typed = data.get("username") or ""
        name = throttled_name(typed)
        await self.wait_for_turn(name)
        try:
            model = await asyncio.to_thread(self.bind_and_search, handler, data)
        except LDAPException:
            self.login_throttle.abandoned(name)
            # A refused password returns None; this is the directory failing.
            self.log.exception(
                "LDAP server %s:%s failed during the login of %s; check that it runs "
                "and LDAPAuthenticator.server_address/server_port/tls_strategy",
                self.server_address,
                self.server_port,
                data.get("username"),
            )
            raise web.HTTPError(
                503, "The login directory (LDAP) is not answering. Please try again in a minute."
            ) from None
        except BaseException:
            self.login_throttle.abandoned(name)
            raise
        if model is None:
            self.count_failure(name, client_address(handler))
            return None
        self.login_throttle.succeeded(name)
        model["name"] = await self.unix_name(model, model["name"])
        self.apply_groups(model)
        self.log.info(
            "LDAP login of %s: groups %s", model["name"], ", ".join(model["groups"]) or "none"
        )
        return model

    def bind_and_search(self, handler, data):
        """ldapauthenticator's login (the DN lookup, the bind, the group search
        and the attributes), blocking: run it in a thread. With ``member_of``,
        the groups are those the user's ``memberOf`` names."""
        model = asyncio.run(LDAPAuthenticator.authenticate(self, handler, data))
        if model is not None and self.member_of:
            state = model["auth_state"]
            member_of = state.get("user_attributes", {}).get(MEMBER_OF)
            state["ldap_groups"] = member_of_groups(self.allowed_groups, member_of)
        return model

    async def wait_for_turn(self, name):
        """Hold a login of ``name`` for its delay after recent failures, then
        count it as in progress; raise HTTP 429 while the name is locked out."""
        throttle = self.login_throttle
        while True:
            refused = throttle.refused_for(name)
            if refused:
                raise too_many_failures(name, refused)
            delay = throttle.delay_for(name)
            if not delay:
                # no await between the check and this: concurrent guesses count at once
                throttle.begin(name)
                return
            await asyncio.sleep(delay)

    def count_failure(self, name, address):
        """Count and log a refused password (or name) of ``name`` from ``address``."""
        count = self.login_throttle.failed(name)
        if not count:  # no limit, or begun before a lockout that started since
            self.log.warning("Failed login for %s from %s", shown(name), address)
            return
        self.log.warning(
            "Failed login for %s from %s: %d of %d allowed within %g s",
            shown(name),
            address,
            count,
            self.login_failures_allowed,
            self.login_failure_window_seconds,
        )
        if count >= self.login_failures_allowed:
            self.log.warning(
                "Logins for %s refused for %g s from now: %d failed logins within %g s, "
                "the last from %s (PortalLDAPAuthenticator.login_failures_allowed, "
                "login_lockout_seconds)",
                shown(name),
                self.login_lockout_seconds,
                count,
                self.login_failure_window_seconds,
                address,
            )

    def apply_groups(self, model):
        """Set the model's hub ``groups`` from its ``auth_state``'s LDAP groups.

        Its ``admin`` is left unset, so a login or refresh never changes the
        user's JupyterHub admin flag (JupyterHub sets it for
        ``admin_users`` only)."""
        ldap_groups = model["auth_state"].get("ldap_groups", [])
        model["groups"] = sorted(group_name(dn) for dn in ldap_groups)
        return model

    async def refresh_user(self, user, handler=None):
        """Read the user's groups from LDAP again.

        Called by the hub when the login is older than ``auth_refresh_age``
        and before each spawn (``refresh_pre_spawn``). Returns False when the
        account is gone or in none of the ``allowed_groups`` (the hub then asks
        for a new login, which refuses them), True when the groups are the
        ones the hub has (its groups, and the auth state's where it keeps
        one), else the model with the ``groups`` LDAP has now. When the
        directory does not answer, or refuses the look-up bind, the user is
        kept as they are (True) and it is logged.
        """
        try:
            ldap_groups = await asyncio.to_thread(self.lookup_groups, user.name)
        except LDAPException as e:
            self.log.exception(
                "LDAP server %s:%s failed or refused a look-up while refreshing the groups "
                "of %s (%s); kept as they were. Check that it runs, "
                "LDAPAuthenticator.server_address/server_port/tls_strategy/tls_kwargs, and "
                "that lookup_dn_search_user may bind and search user_search_base",
                self.server_address,
                self.server_port,
                user.name,
                e,
            )
            return True
        if ldap_groups is None:
            self.log.warning("LDAP account of %s is gone; a new login is required", user.name)
            return login_required(handler)
        auth_state = await user.get_auth_state() or {}
        model = {"name": user.name, "auth_state": {**auth_state, "ldap_groups": ldap_groups}}
        if not await self.check_allowed(user.name, model):
            self.log.warning(
                "%s is no longer in any of LDAPAuthenticator.allowed_groups; "
                "a new login is required",
                user.name,
            )
            return login_required(handler)
        self.apply_groups(model)
        stored = not self.enable_auth_state or auth_state.get("ldap_groups") == ldap_groups
        if stored and hub_groups(user) == model["groups"]:
            # as stored: JupyterHub stores nothing again (its roles, groups
            # and auth state, each with a commit) when told True
            self.log.info(
                "LDAP groups of %s read again, unchanged: %s",
                user.name,
                ", ".join(model["groups"]) or "none",
            )
            return True
        self.log.info(
            "LDAP groups of %s refreshed: %s", user.name, ", ".join(model["groups"]) or "none"
        )
        return model

    def lookup_groups(self, username):
        """The ``allowed_groups`` that list ``username`` now, or None when the
        account is not in the directory.

        Blocking (run it in a thread). It binds as the login's own lookups do
        (``lookup_dn_search_user``, anonymous when unset) with the login's
        TLS settings, finds the user's DN as the login does (``lookup_dn`` or
        the first ``bind_dn_template`` that names an entry) and runs the
        login's group search (or reads the entry's ``memberOf``). Raises
        LDAPException when the directory fails.
        """

        def groups(conn, found, username, userdn):
            if self.member_of:
                if not found(userdn, "(objectClass=*)", [MEMBER_OF]):
                    return []
                values = conn.entries[0].entry_attributes_as_dict.get(MEMBER_OF)
                return member_of_groups(self.allowed_groups, values)
            member = group_search(self.group_search_filter, userdn, username)
            return [
                group
                for group in self.allowed_groups or []
                if found(group, member, self.group_attributes)
            ]

        return self._with_entry(username, groups)

    def lookup_mail(self, username):
        """The first ``mail`` of ``username``'s directory entry ("" when it
        has none), or None when the account is not in the directory; found
        and bound as ``lookup_groups`` does (blocking)."""

        def mail(conn, found, username, userdn):
            if not found(userdn, "(objectClass=*)", ["mail"]):
                return ""
            values = conn.entries[0].entry_attributes_as_dict.get("mail") or [""]
            return str(values[0])

        return self._with_entry(username, mail)

    def _with_entry(self, username, then):
        """``then(conn, found, username, userdn)`` on ``conn``, bound for
        lookups, where ``userdn`` is ``username``'s entry; None when there is
        none. ``found(base, filter, attributes)``: whether a base search
        matched (its entries in ``conn.entries``)."""

        def on(conn):
            def found(base, search_filter, attributes=None):
                # False for "no match" and "no such entry"; any other error raises
                if conn.search(base, search_filter, ldap3.BASE, attributes=attributes):
                    return True
                checked(conn)
                return False

            if self.lookup_dn:
                name, userdn = self._resolve_on(conn, username)
                if userdn is None:
                    return None
                return then(conn, found, name, userdn)
            candidates = [t.format(username=escape_rdn(username)) for t in self.bind_dn_template]
            userdn = next((dn for dn in candidates if found(dn, "(objectClass=*)")), None)
            if userdn is None:
                return None
            return then(conn, found, username, userdn)

        try:
            return self.lookups.run(on)
        except LDAPBindError:
            raise LDAPBindError(
                f"cannot bind as {self.lookup_dn_search_user or 'anonymous'} "
                "(LDAPAuthenticator.lookup_dn_search_user/lookup_dn_search_password)"
            ) from None

    def _resolve_on(self, conn, username):
        """ldapauthenticator's ``resolve_username`` (``lookup_dn``) on the
        kept look-up connection ``conn``: ``(name, dn)`` of the one entry
        under ``user_search_base`` that ``lookup_dn_search_filter`` finds,
        its name from ``lookup_dn_user_dn_attribute``; ``(None, None)`` when
        there is none, or no single one. It makes no bind of its own, so a
        refused look-up bind raises (the directory's fault, not the
        account's) where ``resolve_username`` would say "no such user"."""
        search_filter = self.lookup_dn_search_filter.format(
            login_attr=self.user_attribute, login=escape_filter_chars(username)
        )
        attribute = self.lookup_dn_user_dn_attribute
        conn.search(self.user_search_base, search_filter, ldap3.SUBTREE, attributes=[attribute])
        checked(conn)
        if len(conn.entries) != 1:
            if conn.entries:
                self.log.error(
                    "Looking up %s gave %d entries: check lookup_dn_search_filter and "
                    "user_attribute", shown(username), len(conn.entries),
                )  # fmt: skip
            return None, None
        entry = conn.entries[0]
        values = entry.entry_attributes_as_dict.get(attribute) or []
        if len(values) != 1:
            self.log.error(
                "The entry of %s has %d values of %s: check lookup_dn_user_dn_attribute",
                shown(username), len(values), attribute,
            )  # fmt: skip
            return None, None
        return str(values[0]), entry.entry_dn

    @property
    def lookups(self):
        """The kept connection of ``_with_entry``'s look-ups (``KeptConnection``),
        bound as ``lookup_dn_search_user`` (anonymous when unset)."""
        if self._lookups is None:
            self._lookups = KeptConnection(
                lambda: self.get_connection(
                    self.lookup_dn_search_user,
                    self.lookup_dn_search_password,
                    receive_timeout=LOOKUP_RECEIVE_TIMEOUT,
                )
            )
        return self._lookups

    _lookups = None

    def get_connection(self, userdn, password, receive_timeout=None):
        """ldapauthenticator 2.0.2's ``get_connection`` (a connection bound as
        ``userdn``, None when the bind is refused; TLS as ``tls_strategy``
        says), with the directory's schema read at the first bind only: ldap3
        reads it at every bind of a server that asks for it, and parsing it
        holds the interpreter, the hub's event loop's too, for milliseconds.
        ``receive_timeout``: seconds an answer is awaited (ldap3's; none)."""
        if self.tls_strategy == TlsStrategy.on_connect:
            use_ssl, auto_bind = True, ldap3.AUTO_BIND_NO_TLS
        elif self.tls_strategy == TlsStrategy.before_bind:
            use_ssl, auto_bind = False, ldap3.AUTO_BIND_TLS_BEFORE_BIND
        else:  # TlsStrategy.insecure
            use_ssl, auto_bind = False, ldap3.AUTO_BIND_NO_TLS
        schema = self._ldap_schema
        server = ldap3.Server(
            self.server_address,
            port=self.server_port,
            use_ssl=use_ssl,
            tls=Tls(**self.tls_kwargs),
            get_info=ldap3.NONE if schema is not None else ldap3.SCHEMA,
        )
        if schema is not None:
            server.attach_schema_info(schema)
        try:
            conn = ldap3.Connection(
                server,
                user=userdn,
                password=password,
                auto_bind=auto_bind,
                receive_timeout=receive_timeout,
            )
        except LDAPSocketOpenError as e:
            if "handshake" in str(e).lower():
                self.log.error(
                    "A TLS handshake with the LDAP server failed: check "
                    "LDAPAuthenticator.tls_strategy and tls_kwargs against the server's"
                )
            raise
        except LDAPBindError as e:
            self.log.debug("Failed to bind %s: %s", userdn, e.args[0] if e.args else "")
            return None
        if schema is None and server.schema is not None:
            self._ldap_schema = server.schema  # read once, kept for the hub's life
        return conn

    _ldap_schema = None  # the directory's schema, from the first bind (get_connection)

    def check_allow_config(self):
        """Refuse, at hub start, admin groups that are never looked up at login."""
        super().check_allow_config()
        missing = [dn for dn in self.admin_groups if dn not in (self.allowed_groups or [])]
        if missing:
            raise ValueError(
                "PortalLDAPAuthenticator.admin_groups must also be listed in "
                f"allowed_groups, or their members are never found: add {missing}"
            )
