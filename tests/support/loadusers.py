"""Extra LDAP accounts for load tests and benchmarks (20, 100 sessions),
added to the real slapd through its admin DN over StartTLS, members of
portal-users, with homes; and removed again.

Each name prefix has uid numbers of its own (``UID_BASES``: ``load007`` is
21007, ``bench007`` 23007), so that the tests' and the benchmarks' accounts
never share a uid; a prefix without a range, or a uid that another account
already has, is refused. Their primary group is guests (as eve's): they are
in portal-users only through its memberUid, so removing them from it removes
them for the hub, ``id`` and sudo alike.

After creating or removing accounts, Slurm's associations are synchronised
(``deploy/slurm.sh sync-users``) where that script has the command.
"""

import os
import pwd
import re
import secrets
import shutil
import ssl
import subprocess
from itertools import pairwise
from pathlib import Path

import ldap3
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.hashed import hashed

from portal import settings
from tests.support import REPO

# uid numbers: the demo accounts have 20000..20999 (deploy/ldap.sh); each
# prefix here has BASE+1 .. BASE+999.
DEMO_UIDS = range(20000, 21000)
UID_BASES = {
    "load": 21000,  # tests: reliability, poller load
    "bench": 23000,  # bench/users.py
    "refresh": 24000,  # tests: group changes (tests/integration/test_group_refresh.py)
    "drive": 25000,  # make load (bench/loadtest.py)
    # tests: login names with a dot, and with upper case (test_user_names.py)
    "j.doe": 26000,
    "J.Roe": 27000,
}
MAX_USERS = 999
GUESTS_GID = 20100  # guests, deploy/ldap.sh DEMO_GROUPS
USERS_GROUP = "portal-users"


def uid_range(prefix):
    """The uid numbers of ``prefix``'s accounts; ValueError for an unknown prefix."""
    if prefix not in UID_BASES:
        raise ValueError(f"no uid range for prefix {prefix!r}: add it to UID_BASES")
    base = UID_BASES[prefix]
    return range(base + 1, base + MAX_USERS + 1)


def check_ranges(bases):
    """Refuse prefixes whose uid ranges overlap each other or the demo accounts'."""
    spans = sorted(
        [(DEMO_UIDS.start, DEMO_UIDS.stop, "the demo accounts")]
        + [(b + 1, b + MAX_USERS + 1, f"prefix {p!r}") for p, b in bases.items()]
    )
    for (_, stop, what), (next_start, _, next_what) in pairwise(spans):
        if next_start < stop:
            raise ValueError(f"uid ranges of {what} and {next_what} overlap (UID_BASES)")


check_ranges(UID_BASES)


def admin_connection(site):
    """A connection to the directory bound as its admin DN, over StartTLS,
    with slapd's certificate checked against [tls] ca_cert."""
    ldap, cluster = site["ldap"], site["cluster"]
    admin_pw = (Path(cluster["ldap_dir"]) / "admin.password").read_text().strip()
    tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=site["tls"]["ca_cert"])
    server = ldap3.Server(ldap["server_address"], port=ldap["server_port"], tls=tls)
    return ldap3.Connection(
        server, cluster["ldap_admin_dn"], admin_pw, auto_bind=ldap3.AUTO_BIND_TLS_BEFORE_BIND
    )


def sync_slurm():
    """Slurm's associations follow the portal's groups (deploy/slurm.sh
    sync-users), where the script has that command."""
    script = REPO / "deploy" / "slurm.sh"
    if "sync-users" not in script.read_text():
        return
    result = subprocess.run(["bash", str(script), "sync-users"], capture_output=True, text=True)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()[-2000:]
        raise RuntimeError(f"deploy/slurm.sh sync-users failed ({result.returncode}): {output}")


def check_uid_free(name, uid):
    """Refuse a uid that an account other than ``name`` has (LDAP or local)."""
    try:
        owner = pwd.getpwuid(uid).pw_name
    except KeyError:
        return
    if owner != name:
        raise RuntimeError(f"uid {uid} of {name} is taken by {owner}: see UID_BASES")


def ensure_users(count, prefix="load"):
    """``{name: password}`` for ``prefix001`` .. ``prefixNNN``, created if missing;
    every call sets new passwords."""
    uids = uid_range(prefix)
    if not 1 <= count <= len(uids):
        raise ValueError(f"{count} users: between 1 and {len(uids)} per prefix")
    site = settings.load()
    base, home_root = site["ldap"]["base_dn"], site["cluster"]["home_root"]
    conn = admin_connection(site)
    users_group = f"cn={USERS_GROUP},ou=groups,{base}"
    accounts = {}
    try:
        for i in range(1, count + 1):
            name = f"{prefix}{i:03d}"
            dn = f"uid={name},ou=people,{base}"
            uid = uids[i - 1]
            home = os.path.join(home_root, name)
            password = secrets.token_urlsafe(12)
            check_uid_free(name, uid)
            if not conn.search(dn, "(objectClass=*)", search_scope=ldap3.BASE):
                conn.add(
                    dn,
                    ["inetOrgPerson", "posixAccount", "shadowAccount"],
                    {
                        "cn": name, "sn": "Load", "uid": name, "uidNumber": uid,
                        "gidNumber": GUESTS_GID, "homeDirectory": home,
                        "loginShell": "/bin/bash",
                    },
                )  # fmt: skip
                assert conn.result["result"] == 0, conn.result
            conn.modify(
                dn,
                {
                    "userPassword": [
                        (ldap3.MODIFY_REPLACE, [hashed(ldap3.HASHED_SALTED_SHA, password)])
                    ],
                    # accounts made before guests had portal-users as primary group
                    "gidNumber": [(ldap3.MODIFY_REPLACE, [GUESTS_GID])],
                },
            )
            assert conn.result["result"] == 0, conn.result
            conn.modify(users_group, {"memberUid": [(ldap3.MODIFY_ADD, [name])]})
            assert conn.result["result"] in (0, 20), conn.result  # 20: already a member
            if not os.path.isdir(home):
                os.makedirs(home, mode=0o700)
                os.chown(home, uid, GUESTS_GID)
            accounts[name] = password
    finally:
        conn.unbind()
    sync_slurm()
    return accounts


def remove_users(which):
    """Delete the accounts ``ensure_users`` made: ``which`` is a prefix (all
    of its accounts) or a list of names. Removes their LDAP entries, their
    memberUid in every group and their homes (when owned by their uid), then
    syncs Slurm. Names outside the prefixes are refused, so demo accounts are
    never touched. Returns the names removed."""
    ours = re.compile(rf"^({'|'.join(map(re.escape, UID_BASES))})\d{{3}}$")
    site = settings.load()
    base, home_root = site["ldap"]["base_dn"], site["cluster"]["home_root"]
    people, groups = f"ou=people,{base}", f"ou=groups,{base}"
    conn = admin_connection(site)
    try:
        if isinstance(which, str):
            uid_range(which)
            conn.search(people, f"(uid={escape_filter_chars(which)}*)", attributes=["uid"])
            of_prefix = re.compile(rf"^{re.escape(which)}\d{{3}}$")
            names = sorted(e.uid.value for e in conn.entries if of_prefix.match(e.uid.value))
        else:
            names = sorted(which)
        refused = [n for n in names if not ours.match(n)]
        if refused:
            raise ValueError(
                f"not accounts of ensure_users (prefixes {sorted(UID_BASES)}): {refused}"
            )
        for name in names:
            member = f"(memberUid={escape_filter_chars(name)})"
            conn.search(groups, member, attributes=["cn"])
            for group in [e.entry_dn for e in conn.entries]:
                conn.modify(group, {"memberUid": [(ldap3.MODIFY_DELETE, [name])]})
                assert conn.result["result"] == 0, conn.result
            dn = f"uid={name},{people}"
            if conn.search(dn, "(objectClass=*)", ldap3.BASE, attributes=["uidNumber"]):
                uid = conn.entries[0].uidNumber.value
                conn.delete(dn)
                assert conn.result["result"] == 0, conn.result
                _remove_home(os.path.join(home_root, name), uid)
    finally:
        conn.unbind()
    sync_slurm()
    return names


def _remove_home(home, uid):
    """Remove a home that ensure_users made (a real folder owned by ``uid``)."""
    try:
        st = os.lstat(home)
    except FileNotFoundError:
        return
    if os.path.isdir(home) and not os.path.islink(home) and st.st_uid == uid:
        shutil.rmtree(home)
