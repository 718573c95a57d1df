import pytest

from portal.auth import PortalLDAPAuthenticator, group_name


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
