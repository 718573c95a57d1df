"""LDAP login: jupyterhub-ldapauthenticator, plus admin rights from LDAP groups.

The bind, the username checks and the escaping are ldapauthenticator's. This
subclass adds only what it lacks: hub admin rights follow membership of the
``admin_groups`` (granted and revoked at each login), and the user's portal
groups are synchronised into the hub's groups (``manage_groups``) so that the
spawner and the admin service can read them.
"""

from ldap3.core.exceptions import LDAPException
from ldap3.utils.dn import parse_dn
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


class PortalLDAPAuthenticator(LDAPAuthenticator):
    admin_groups = List(
        help="""LDAP group DNs whose members are hub admins (and may edit spawner profiles).

        Each DN must also be listed in ``allowed_groups``: membership is
        looked up among those. Checked at every login, so removing a user
        from the group in LDAP removes their admin rights at their next login.

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
        ldap_groups = model["auth_state"].get("ldap_groups", [])
        model["admin"] = any(dn in ldap_groups for dn in self.admin_groups)
        model["groups"] = sorted(group_name(dn) for dn in ldap_groups)
        self.log.info(
            "LDAP login of %s: groups %s, admin %s",
            model["name"],
            ", ".join(model["groups"]) or "none",
            model["admin"],
        )
        return model

    def check_allow_config(self):
        """Refuse, at hub start, admin groups that are never looked up at login."""
        super().check_allow_config()
        missing = [dn for dn in self.admin_groups if dn not in (self.allowed_groups or [])]
        if missing:
            raise ValueError(
                "PortalLDAPAuthenticator.admin_groups must also be listed in "
                f"allowed_groups, or their members are never found: add {missing}"
            )
