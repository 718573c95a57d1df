"""LDAP login: jupyterhub-ldapauthenticator, plus the user's groups from LDAP.

The bind, the username checks and the escaping are ldapauthenticator's. This
subclass adds only what it lacks: the user's portal groups are synchronised
into the hub's groups (``manage_groups``) so that the spawner, the admin
service and the roles can read them, and they are read again from LDAP after
``auth_refresh_age`` and before each spawn (``refresh_user``), so a user
removed from the ``allowed_groups`` must log in again, and is refused.

It never makes anyone a JupyterHub admin: members of the ``admin_groups``
are portal admins through the hub group of that name, which holds the
``portal-admin`` role (``portal.hub_config.configure_admins``); JupyterHub's
admin role is for the accounts a site names in ``Authenticator.admin_users``.
"""

import asyncio

import ldap3
from ldap3.core.exceptions import LDAPBindError, LDAPException, LDAPOperationResult
from ldap3.core.results import RESULT_NO_SUCH_OBJECT, RESULT_SUCCESS
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn, parse_dn
from ldapauthenticator import LDAPAuthenticator
from tornado import web
from traitlets import List, default


def group_name(dn):
    """The common name of a group DN: ``cn=portal-admins,ou=groups,...`` -> ``portal-admins``."""
    try:
        attr, value, _ = parse_dn(dn)[0]
    except Exception:
        return dn
    return value if attr.lower() == "cn" else dn


def login_required(handler):
    """refresh_user's answer that the user must log in again: False.

    JupyterHub 6.1's refresh_auth then reads ``handler._token_authenticated``,
    which it sets on token-authenticated requests only, so a cookie request
    (a browser's) would fail with AttributeError (a 500 at spawn) instead of
    asking for a new login. A request without it was not token-authenticated.
    """
    if handler is not None and not hasattr(handler, "_token_authenticated"):
        handler._token_authenticated = False
    return False


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

    @default("manage_groups")
    def _manage_groups_default(self):
        return True

    async def authenticate(self, handler, data):
        try:
            model = await super().authenticate(handler, data)
        except LDAPException:
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
        if model is None:
            return None
        self.apply_groups(model)
        self.log.info(
            "LDAP login of %s: groups %s", model["name"], ", ".join(model["groups"]) or "none"
        )
        return model

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
        for a new login, which refuses them), else the model with the
        ``groups`` LDAP has now. When the directory does not
        answer, the user is kept as they are (True) and it is logged.
        """
        try:
            ldap_groups = await asyncio.to_thread(self.lookup_groups, user.name)
        except LDAPException:
            self.log.exception(
                "LDAP server %s:%s failed while refreshing the groups of %s; kept as they "
                "were. Check that it runs and LDAPAuthenticator.server_address/server_port/"
                "tls_strategy/tls_kwargs",
                self.server_address,
                self.server_port,
                user.name,
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
        login's group search. Raises LDAPException when the directory fails.
        """
        if self.lookup_dn:
            username, userdn = self.resolve_username(username)
            if userdn is None:
                return None
            candidates = [userdn]
        else:
            candidates = [t.format(username=escape_rdn(username)) for t in self.bind_dn_template]
        conn = self.get_connection(self.lookup_dn_search_user, self.lookup_dn_search_password)
        if conn is None:
            raise LDAPBindError(
                f"cannot bind as {self.lookup_dn_search_user or 'anonymous'} "
                "(LDAPAuthenticator.lookup_dn_search_user/lookup_dn_search_password)"
            )

        def found(base, search_filter, attributes=None):
            # False for "no match" and "no such entry"; any other error raises
            if conn.search(base, search_filter, ldap3.BASE, attributes=attributes):
                return True
            if conn.result["result"] not in (RESULT_SUCCESS, RESULT_NO_SUCH_OBJECT):
                raise LDAPOperationResult(
                    result=conn.result["result"], description=conn.result["description"]
                )
            return False

        try:
            userdn = next((dn for dn in candidates if found(dn, "(objectClass=*)")), None)
            if userdn is None:
                return None
            member = self.group_search_filter.format(
                userdn=escape_filter_chars(userdn), uid=escape_filter_chars(username)
            )
            return [
                group
                for group in self.allowed_groups or []
                if found(group, member, self.group_attributes)
            ]
        finally:
            conn.unbind()

    def check_allow_config(self):
        """Refuse, at hub start, admin groups that are never looked up at login."""
        super().check_allow_config()
        missing = [dn for dn in self.admin_groups if dn not in (self.allowed_groups or [])]
        if missing:
            raise ValueError(
                "PortalLDAPAuthenticator.admin_groups must also be listed in "
                f"allowed_groups, or their members are never found: add {missing}"
            )
