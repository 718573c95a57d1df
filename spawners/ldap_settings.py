"""The [ldap] settings as ldapauthenticator's traits: how each kind of group
membership is searched, the service account's password file, and the
refusal, at start, of settings that cannot work.

``spawners.hub_config.configure_auth`` sets the traits; the authenticator
(``spawners.auth``) uses ``group_search`` and ``member_of_groups``.
"""

import os
import pwd
import re
import stat

from ldap3.core.exceptions import LDAPInvalidDnError
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import parse_dn

# [ldap] group_membership -> ldapauthenticator's group_search_filter and
# group_attributes: the search of each allowed group's own entry ({userdn} and
# {uid} are escaped with escape_filter_chars, by ldapauthenticator at login
# and by ``group_search`` at refresh). "memberOf" reads the user's entry
# instead (``member_of_groups``); its group search is groupOfNames', which
# ldapauthenticator still makes at login and whose answer is replaced.
MEMBERSHIP = {
    "posixGroup": ("(memberUid={uid})", ["memberUid"]),
    "groupOfNames": ("(member={userdn})", ["member"]),
    "memberOf": ("(member={userdn})", ["member"]),
}
MEMBER_OF = "memberOf"
TLS_STRATEGIES = ("before_bind", "on_connect", "insecure")


def group_search(template, userdn, uid):
    r"""The group search filter ``template`` (``group_search_filter``) for the
    user ``uid`` whose entry is ``userdn``, each escaped as a filter value.

    >>> group_search("(memberUid={uid})", "uid=x,dc=y", "a*)(uid=*")
    '(memberUid=a\\2a\\29\\28uid=\\2a)'
    >>> group_search("(member={userdn})", "cn=Smith\\, J (x),dc=y", "j")
    '(member=cn=Smith\\5c, J \\28x\\29,dc=y)'
    """
    return template.format(userdn=escape_filter_chars(userdn), uid=escape_filter_chars(uid))


def dn_key(dn):
    """A DN as equal DNs compare: attribute types and values in lower case,
    spaces around separators dropped (None when it is not a DN).

    >>> dn_key("CN=Portal-Users , ou=groups,DC=x") == dn_key("cn=portal-users,ou=groups,dc=x")
    True
    """
    try:
        return tuple((t.lower(), v.lower()) for t, v, _ in parse_dn(dn, escape=False, strip=True))
    except LDAPInvalidDnError:
        return None


def member_of_groups(allowed_groups, member_of):
    """The ``allowed_groups`` (as configured) that the user's ``memberOf``
    values name, in the order of ``allowed_groups``.

    >>> member_of_groups(["cn=a,dc=x", "cn=b,dc=x"], ["CN=B,DC=X", "cn=other,dc=x"])
    ['cn=b,dc=x']
    """
    held = {dn_key(str(dn)) for dn in member_of or []}
    return [group for group in allowed_groups or [] if dn_key(group) in held]


def hub_account_uids(hub_user):
    """The owners a secret of the hub may have: root, the hub's account
    ([hub] user, when it exists here) and the account this process runs as."""
    uids = {0, os.geteuid()}
    try:
        uids.add(pwd.getpwnam(hub_user).pw_uid)
    except KeyError:
        pass
    return uids


def read_password_file(path, owners):
    """The password in ``path`` (its first line), which must be a plain file
    owned by one of the uids ``owners`` (``hub_account_uids``) that nobody
    else may read or write: ValueError naming the fix otherwise."""
    setting = f"[ldap] lookup_password_file = {str(path)!r}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise ValueError(
            f"{setting}: cannot open it ({e.strerror}): it must be a file, not a link, "
            "owned by the hub's account ([hub] user), mode 0600"
        ) from None
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{setting}: not a plain file")
        if info.st_uid not in owners:
            raise ValueError(
                f"{setting}: owned by uid {info.st_uid}, not by the hub's account ([hub] user) "
                "or root: chown it to the hub's account"
            )
        if info.st_mode & 0o077:
            raise ValueError(
                f"{setting}: readable or writable by others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}): chmod 600 {path}"
            )
        lines = f.read().splitlines()
    if not lines or not lines[0]:
        raise ValueError(f"{setting}: empty; write the service account's password in it")
    return lines[0]


def check_ldap(settings):
    """Refuse, with a ValueError that names the fix, [ldap] settings that
    cannot work (checked when the hub starts); the password file's own
    checks are ``read_password_file``'s. ([tls] ca_cert, the default CA,
    is the web certificate's: deploy/tls.sh makes or checks it.)"""
    ldap = settings["ldap"]
    if ldap["tls_strategy"] not in TLS_STRATEGIES:
        raise ValueError(
            f"[ldap] tls_strategy = {ldap['tls_strategy']!r}: use one of "
            + ", ".join(f'"{s}"' for s in TLS_STRATEGIES)
        )
    if ldap["group_membership"] not in MEMBERSHIP:
        raise ValueError(
            f"[ldap] group_membership = {ldap['group_membership']!r} is not a kind the portal "
            "knows: use " + ", ".join(f'"{k}"' for k in MEMBERSHIP)
        )
    if bool(ldap["lookup_bind_dn"]) != bool(ldap["lookup_password_file"]):
        have, missing = (
            ("lookup_bind_dn", "lookup_password_file")
            if ldap["lookup_bind_dn"]
            else ("lookup_password_file", "lookup_bind_dn")
        )
        raise ValueError(
            f"[ldap] {have} is set but {missing} is not: the service account needs both "
            "(or neither, for anonymous look-ups)"
        )
    if ldap["lookup_bind_dn"] and dn_key(ldap["lookup_bind_dn"]) is None:
        raise ValueError(f"[ldap] lookup_bind_dn = {ldap['lookup_bind_dn']!r} is not a DN")
    if ldap["user_search_base"] and dn_key(ldap["user_search_base"]) is None:
        raise ValueError(f"[ldap] user_search_base = {ldap['user_search_base']!r} is not a DN")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", ldap["user_attribute"]):
        raise ValueError(
            f"[ldap] user_attribute = {ldap['user_attribute']!r} is not an attribute name: "
            'use the attribute that holds login names ("uid"; Active Directory: "sAMAccountName")'
        )
    if ldap["bind_dn_template"] and "{username}" not in ldap["bind_dn_template"]:
        raise ValueError(
            f"[ldap] bind_dn_template = {ldap['bind_dn_template']!r} has no {{username}}: "
            'every login would bind as one DN (or set it to "" to look the DN up)'
        )
    if ldap["ca_cert"] and not os.path.isfile(ldap["ca_cert"]):
        raise ValueError(
            f"[ldap] ca_cert = {ldap['ca_cert']!r}: no such file; name the CA that signed "
            'the directory\'s certificate, or "" for [tls] ca_cert'
        )
