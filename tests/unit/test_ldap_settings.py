"""A site's [ldap] settings (spawners.ldap_settings, configure_auth): the
user search base, a service account whose password comes from a file of the
hub's account, the kinds of group membership and their escaped filters, the
directory's own CA; each refused at start when it cannot work. Against the
real slapd: tests/integration/test_ldap_site.py."""

import os
import threading

import pytest
from ldapauthenticator import LDAPAuthenticator
from traitlets.config import Config

from portal import settings
from spawners.auth import PortalLDAPAuthenticator
from spawners.hub_config import configure_auth
from spawners.ldap_settings import (
    MEMBERSHIP,
    check_ldap,
    group_search,
    hub_account_uids,
    member_of_groups,
    read_password_file,
)

USERS = "cn=portal-users,ou=groups,dc=portal,dc=example"
ADMINS = "cn=portal-admins,ou=groups,dc=portal,dc=example"
HOSTILE = "a*)(|(uid=*"


def site(**ldap):
    s = settings.load()
    s["ldap"].update(ldap)
    return s


def configured(**ldap):
    c = Config()
    configure_auth(c, site(**ldap))
    return PortalLDAPAuthenticator(config=c), c


@pytest.fixture
def password_file(tmp_path):
    path = tmp_path / "lookup.password"
    path.write_text("s3cret\n")
    path.chmod(0o600)
    return path


def test_the_defaults_are_the_demos():
    auth, _ = configured()
    assert auth.bind_dn_template == ["uid={username},ou=people,dc=portal,dc=example"]
    assert auth.lookup_dn is False
    assert auth.user_search_base == "ou=people,dc=portal,dc=example"
    assert auth.lookup_dn_search_user is None and auth.lookup_dn_search_password is None
    assert auth.group_search_filter == "(memberUid={uid})"
    assert auth.group_attributes == ["memberUid"]
    # the login name's own spelling is read with the user's entry (unix_name)
    assert auth.member_of is False and auth.auth_state_attributes == ["uid"]
    assert auth.tls_kwargs["ca_certs_file"] == settings.load()["tls"]["ca_cert"]


def test_an_empty_template_looks_the_dn_up_under_the_search_base():
    base = "cn=users,cn=accounts,dc=example,dc=org"
    auth, _ = configured(
        bind_dn_template="", user_search_base=base, user_attribute="sAMAccountName"
    )
    assert auth.lookup_dn is True and auth.bind_dn_template == []
    assert auth.user_search_base == base
    assert auth.user_attribute == auth.lookup_dn_user_dn_attribute == "sAMAccountName"


def test_the_service_account_reads_its_password_from_the_file(password_file):
    dn = "uid=portal-lookup,ou=site,dc=portal,dc=example"
    auth, c = configured(lookup_bind_dn=dn, lookup_password_file=str(password_file))
    assert auth.lookup_dn_search_user == dn
    assert auth.lookup_dn_search_password == "s3cret"  # in the hub's memory only
    assert "s3cret" not in repr(dict(os.environ))


@pytest.mark.parametrize(
    "kind, userdn, uid, expected",
    [
        ("posixGroup", "uid=x,dc=y", HOSTILE, r"(memberUid=a\2a\29\28|\28uid=\2a)"),
        ("groupOfNames", "uid=a*)(x,dc=y", "a", r"(member=uid=a\2a\29\28x,dc=y)"),
    ],
)
def test_group_filters_escape_what_they_are_given(kind, userdn, uid, expected):
    auth, _ = configured(group_membership=kind)
    assert auth.group_search_filter == MEMBERSHIP[kind][0]
    assert group_search(auth.group_search_filter, userdn, uid) == expected


def test_member_of_reads_the_users_entry():
    auth, _ = configured(group_membership="memberOf")
    assert auth.member_of is True
    assert auth.auth_state_attributes == ["uid", "memberOf"]
    held = ["CN=Portal-Users,OU=Groups,DC=portal,DC=example", "cn=other,dc=x", "not a dn"]
    assert member_of_groups([USERS, ADMINS], held) == [USERS]
    assert member_of_groups([USERS], None) == []


async def test_a_member_of_login_takes_its_groups_from_the_entry(monkeypatch):
    """At login the groups are those the user's memberOf names, and
    ldapauthenticator's blocking binds run outside the hub's thread."""
    ran_in = []

    async def bound(self, handler, data):
        ran_in.append(threading.current_thread())
        attributes = {"memberOf": [ADMINS.upper(), "cn=elsewhere,dc=x"]}
        return {
            "name": data["username"],
            "auth_state": {"ldap_groups": [USERS], "user_attributes": attributes},
        }

    monkeypatch.setattr(LDAPAuthenticator, "authenticate", bound)
    auth, _ = configured(group_membership="memberOf")
    model = await auth.authenticate(None, {"username": "carol", "password": "x"})
    assert model["groups"] == ["portal-admins"]
    assert ran_in and ran_in[0] is not threading.current_thread()


def test_the_directory_may_have_a_ca_of_its_own(tmp_path):
    ca = tmp_path / "directory-ca.crt"
    ca.write_text("")
    auth, _ = configured(ca_cert=str(ca), tls_strategy="on_connect", server_port=636)
    assert auth.tls_kwargs["ca_certs_file"] == str(ca)
    assert auth.tls_strategy.name == "on_connect" and auth.server_port == 636
    assert settings.ldap_ca_cert(site(ca_cert=str(ca))) == str(ca)
    assert settings.ldap_ca_cert(site()) == settings.load()["tls"]["ca_cert"]


@pytest.mark.parametrize(
    "ldap, message",
    [
        ({"group_membership": "member"}, 'use "posixGroup", "groupOfNames", "memberOf"'),
        ({"tls_strategy": "ldaps"}, 'use one of "before_bind", "on_connect", "insecure"'),
        ({"lookup_bind_dn": "cn=svc,dc=x"}, "lookup_password_file is not"),
        ({"lookup_password_file": "/etc/portal/pw"}, "lookup_bind_dn is not"),
        ({"lookup_bind_dn": "svc", "lookup_password_file": "/x"}, "is not a DN"),
        ({"user_search_base": "people"}, "is not a DN"),
        ({"bind_dn_template": "", "user_attribute": "uid=*)(x"}, "not an attribute name"),
        ({"bind_dn_template": "", "user_attribute": ""}, "not an attribute name"),
        ({"bind_dn_template": "uid=alice,dc=x"}, "has no {username}"),
        ({"ca_cert": "/nonexistent/ca.crt"}, r"\[ldap\] ca_cert = '/nonexistent/ca.crt': no such"),
    ],
)
def test_wrong_settings_are_refused_at_start(ldap, message):
    with pytest.raises(ValueError, match=message):
        check_ldap(site(**ldap))
    with pytest.raises(ValueError, match=message):
        configured(**ldap)


@pytest.mark.parametrize(
    "mode, message", [(0o644, "chmod 600"), (0o640, "mode 0640"), (0o604, "by others")]
)
def test_a_password_file_others_can_read_is_refused(password_file, mode, message):
    password_file.chmod(mode)
    with pytest.raises(ValueError, match=message):
        configured(lookup_bind_dn="cn=svc,dc=x", lookup_password_file=str(password_file))


def test_a_password_file_is_the_hub_accounts_own(password_file, tmp_path):
    me = os.geteuid()
    owners = hub_account_uids("portal")
    assert {0, me} <= owners
    assert read_password_file(password_file, owners) == "s3cret"
    with pytest.raises(ValueError, match=f"owned by uid {me}, not by the hub's account"):
        read_password_file(password_file, {me + 1})
    with pytest.raises(ValueError, match="cannot open it"):
        read_password_file(tmp_path / "missing", owners)
    link = tmp_path / "link"
    link.symlink_to(password_file)
    with pytest.raises(ValueError, match="not a link"):
        read_password_file(link, owners)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o400)
    with pytest.raises(ValueError, match="empty"):
        read_password_file(empty, owners)
