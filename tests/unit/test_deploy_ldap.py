"""The embedded directory's configuration and changes (deploy/ldap_setup.py),
without slapd: the files it writes, the demo data, the accounts and the
migration of an older directory."""

import hashlib
import json
import os
import pwd
import subprocess

import pytest

from deploy import nsswitch
from deploy.base import DeployError, write_if_changed
from deploy.ldap_setup import (
    Layout,
    accounts_json,
    base_entry,
    demo_ldif,
    files_sum,
    migration,
    nslcd_conf,
    portal_groups,
    shell_lines,
    slapd_conf,
)
from portal.settings import defaults, group_name, merge

SETTINGS = defaults()
LAYOUT = Layout.of(SETTINGS)
HASHES = {name: f"{{SSHA}}hash-of-{name}" for name in ("alice", "bob", "carol", "eve")}


def entries(ldif):
    """LDIF as {dn: [(attr, value), ...]}, in order."""
    out = {}
    for block in ldif.strip().split("\n\n"):
        lines = [line.split(": ", 1) for line in block.splitlines()]
        out[lines[0][1]] = [tuple(pair) for pair in lines[1:]]
    return out


def test_group_names_are_the_cn_of_the_allowed_groups():
    assert group_name("cn=portal-admins,ou=groups,dc=portal,dc=example") == "portal-admins"
    assert group_name("CN = vision ,ou=groups,dc=x") == "vision"
    assert group_name("ou=people,dc=x") == "ou=people,dc=x"
    assert portal_groups(SETTINGS) == ["portal-admins", "portal-users"]


def test_slapd_conf_names_the_settings_and_refuses_password_binds_without_tls():
    text = slapd_conf(LAYOUT, "0123456789abcdef", "{SSHA}root")
    assert 'suffix "dc=portal,dc=example"' in text
    assert 'rootdn "cn=admin,dc=portal,dc=example"' in text
    assert "rootpw {SSHA}root\n" in text
    assert "directory /var/lib/portal/ldap/data\n" in text
    assert "TLSCertificateKeyFile /var/lib/portal/ldap/tls/slapd.key\n" in text
    assert "# TLS files: 0123456789abcdef\n" in text
    assert "security simple_bind=128\n" in text
    assert "pidfile /run/portal/slapd/slapd.pid\n" in text
    assert "access to *\n    by * read\n" in text


def test_the_site_subtree_refuses_anonymous_search_and_keeps_member_of():
    """ou=site, where the tests try a site's [ldap] settings: a bound
    account reads it, an anonymous client may only bind; its groupOfNames
    groups fill their users' memberOf."""
    text = slapd_conf(LAYOUT, "0123456789abcdef", "{SSHA}root")
    site = (
        'access to dn.subtree="ou=site,dc=portal,dc=example"\n'
        "    by users read\n    by anonymous auth\n    by * none\n"
    )
    # after the passwords' rule, before the one that lets anybody read the rest
    assert text.index("access to attrs=userPassword") < text.index(site)
    assert text.index(site) < text.index("access to *\n")
    assert "moduleload memberof\n" in text and text.endswith("overlay memberof\n")


def test_a_new_certificate_changes_the_configs():
    assert files_sum(b"ca", b"cert") == hashlib.sha256(b"cacert").hexdigest()[:16]
    assert nslcd_conf(LAYOUT, files_sum(b"a")) != nslcd_conf(LAYOUT, files_sum(b"b"))


def test_nslcd_uses_the_configured_address_and_checks_the_certificate():
    site = merge(SETTINGS, {"ldap": {"server_address": "ldap.example.org", "server_port": 389}})
    text = nslcd_conf(Layout.of(site), "sum")
    assert "uri ldap://ldap.example.org:389/\n" in text
    assert "tls_reqcert demand\ntls_cacertfile /etc/portal/tls/ca.crt\n" in text
    assert Layout.of(site).listen_uri == "ldap://127.0.0.1:389/"


@pytest.mark.parametrize(
    "base, lines",
    [
        ("dc=portal,dc=example", ["objectClass: dcObject", "dc: portal"]),
        ("o=acme", ["objectClass: organization", "o: acme"]),
        ("ou=lab,dc=x", ["objectClass: organizationalUnit", "ou: lab"]),
    ],
)
def test_the_base_entry_follows_its_first_rdn(base, lines):
    text = base_entry(base)
    assert text.startswith(f"dn: {base}\n") and text.endswith("\n\n")
    assert all(f"{line}\n" in text for line in lines)


def test_a_base_dn_of_another_kind_is_refused():
    with pytest.raises(DeployError, match="use dc=, o= or ou="):
        base_entry("l=paris,dc=x")


def test_the_demo_data_lists_parents_first_and_eve_in_no_portal_group():
    data = entries(demo_ldif(LAYOUT, HASHES))
    dns = list(data)
    assert dns[:3] == ["dc=portal,dc=example", "ou=people,dc=portal,dc=example",
                       "ou=groups,dc=portal,dc=example"]  # fmt: skip
    eve = dict(data["uid=eve,ou=people,dc=portal,dc=example"])
    assert eve["gidNumber"] == "20100" and eve["userPassword"] == "{SSHA}hash-of-eve"
    assert eve["homeDirectory"] == "/home/eve"
    members = {
        dn: [v for a, v in attrs if a == "memberUid"] for dn, attrs in data.items() if "cn=" in dn
    }
    assert members["cn=portal-users,ou=groups,dc=portal,dc=example"] == ["alice", "bob", "carol"]
    assert members["cn=guests,ou=groups,dc=portal,dc=example"] == []
    assert not any("eve" in m for m in members.values())


def test_the_accounts_say_who_is_admin_and_in_which_groups():
    passwords = {"alice": "pa", "bob": "pb", "carol": "pc", "eve": "pe"}
    accounts = {a["username"]: a for a in json.loads(accounts_json(passwords))}
    assert accounts["carol"] == {
        "username": "carol",
        "password": "pc",
        "admin": True,
        "uid": 20003,
        "groups": ["portal-users", "portal-admins", "lab-vision", "lab-nlp"],
    }
    assert accounts["alice"]["groups"] == ["portal-users", "vision", "lab-vision"]
    assert accounts["bob"]["groups"] == ["portal-users", "lab-nlp"]
    assert not accounts["alice"]["admin"]
    assert accounts["eve"]["groups"] == []


PEOPLE = "ou=people,dc=portal,dc=example"


def test_the_demo_users_have_a_mail_the_login_node_delivers():
    data = entries(demo_ldif(LAYOUT, HASHES))
    assert dict(data[f"uid=alice,{PEOPLE}"])["mail"] == "alice@portal.localhost"
    site = merge(SETTINGS, {"mail": {"domain": "hpc.example.org"}})
    data = entries(demo_ldif(Layout.of(site), HASHES))
    assert dict(data[f"uid=eve,{PEOPLE}"])["mail"] == "eve@hpc.example.org"


def test_an_older_directory_gets_guests_and_eve_moves_to_it():
    mail = {"mail": "x@portal.localhost"}
    older = {f"uid={u},{PEOPLE}": {"gidNumber": "20000", **mail} for u in ("alice", "bob", "eve")}
    older["cn=portal-users,ou=groups,dc=portal,dc=example"] = {"gidNumber": "20000"}
    ldif, moved = migration(LAYOUT, older.get)
    assert moved == [("eve", 20100)]
    changes = entries(ldif)
    assert list(changes) == [
        "cn=lab-vision,ou=groups,dc=portal,dc=example",
        "cn=lab-nlp,ou=groups,dc=portal,dc=example",
        "cn=guests,ou=groups,dc=portal,dc=example",
        f"uid=eve,{PEOPLE}",
    ]
    assert ("changetype", "add") in changes["cn=guests,ou=groups,dc=portal,dc=example"]
    lab = changes["cn=lab-nlp,ou=groups,dc=portal,dc=example"]
    assert ("changetype", "add") in lab and ("gidNumber", "20040") in lab
    assert [v for a, v in lab if a == "memberUid"] == ["bob", "carol"]
    assert changes[f"uid=eve,{PEOPLE}"][-1] == ("gidNumber", "20100")


def test_demo_users_without_a_mail_get_theirs_in_the_same_change():
    """A directory loaded before [mail]: each demo user gets NAME@domain;
    eve, still in the old group, moves and gets hers in one modify."""
    older = {f"uid={u},{PEOPLE}": {"gidNumber": "20000"} for u in ("alice", "eve")}
    for group, gid in (("portal-users", "20000"), ("guests", "20100"), ("lab-vision", "20030"),
                       ("lab-nlp", "20040")):  # fmt: skip
        older[f"cn={group},ou=groups,dc=portal,dc=example"] = {"gidNumber": gid}
    ldif, moved = migration(LAYOUT, older.get)
    assert moved == [("eve", 20100)]
    changes = entries(ldif)
    assert list(changes) == [f"uid=alice,{PEOPLE}", f"uid=eve,{PEOPLE}"]  # bob, carol: none
    assert changes[f"uid=alice,{PEOPLE}"] == [
        ("changetype", "modify"), ("add", "mail"), ("mail", "alice@portal.localhost")
    ]  # fmt: skip
    eve = "replace: gidNumber\ngidNumber: 20100\n-\nadd: mail\nmail: eve@portal.localhost\n"
    assert eve in ldif


def test_a_migrated_directory_or_an_admins_change_is_left_alone():
    mail = {"mail": "someone@example.org"}  # an admin's address, kept
    now = {
        "cn=guests,ou=groups,dc=portal,dc=example": {"gidNumber": "20100"},
        "cn=portal-users,ou=groups,dc=portal,dc=example": {"gidNumber": "20000"},
        "cn=lab-vision,ou=groups,dc=portal,dc=example": {"gidNumber": "20030"},
        "cn=lab-nlp,ou=groups,dc=portal,dc=example": {"gidNumber": "20040"},
        f"uid=eve,{PEOPLE}": {"gidNumber": "20100", **mail},
        f"uid=bob,{PEOPLE}": {"gidNumber": "20020", **mail},  # an admin's choice
    }
    assert migration(LAYOUT, now.get) == ("", [])


def test_the_scripts_facts_survive_the_shell():
    out = subprocess.run(
        ["bash", "-c", 'eval "$1"; printf "%s|" "$LISTEN_URIS" "$BASE_DN" "$NSLCD_PID"', "sh",
         "\n".join(shell_lines(LAYOUT))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout == (
        "ldap://127.0.0.1:3890/ ldaps://127.0.0.1:6360/|dc=portal,dc=example|/run/nslcd/nslcd.pid|"
    )


def test_ldaps_is_offered_beside_starttls_unless_turned_off():
    assert LAYOUT.listen_uris == "ldap://127.0.0.1:3890/ ldaps://127.0.0.1:6360/"
    off = Layout.of(merge(SETTINGS, {"cluster": {"ldaps_port": 0}}))
    assert off.listen_uris == off.listen_uri == "ldap://127.0.0.1:3890/"


NSSWITCH = (
    "passwd:         files systemd\ngroup:          files systemd\nhosts:          files dns\n"
)


def test_nsswitch_gets_ldap_once_and_purge_takes_it_away():
    text, missing = nsswitch.with_ldap(NSSWITCH)
    assert missing == ["passwd", "group"]
    assert text.splitlines()[:2] == ["passwd:         files systemd ldap",
                                     "group:          files systemd ldap"]  # fmt: skip
    assert nsswitch.with_ldap(text) == (text, [])
    assert nsswitch.without(text, ("passwd", "group", "shadow"), "ldap") == NSSWITCH


def test_nsswitch_gets_myhostname_after_files_once():
    text = nsswitch.with_myhostname(NSSWITCH)
    assert "hosts:          files myhostname dns\n" in text
    assert nsswitch.with_myhostname(text) == text
    assert nsswitch.without(text, ("hosts",), "myhostname") == NSSWITCH


def test_a_file_is_written_only_when_its_content_changes(tmp_path):
    me = pwd.getpwuid(os.getuid()).pw_name
    group = __import__("grp").getgrgid(os.getgid()).gr_name
    path = tmp_path / "conf"
    assert write_if_changed(path, "a\n", 0o640, me, group)
    assert path.read_text() == "a\n" and path.stat().st_mode & 0o777 == 0o640
    path.chmod(0o600)
    assert not write_if_changed(path, "a\n", 0o640, me, group)
    assert path.stat().st_mode & 0o777 == 0o640  # the mode is put back either way
    assert write_if_changed(path, "b\n", 0o640, me, group)
    assert not (tmp_path / "conf.tmp").exists()
