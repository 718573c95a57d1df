"""Extra LDAP accounts for load tests (20, 100 sessions), added to the real
slapd through its admin DN, members of portal-users, with homes."""

import os
import secrets
from pathlib import Path

import ldap3
from ldap3.utils.hashed import hashed

from portal import settings

UID_BASE = 21000
USERS_GID = 20000


def ensure_users(count, prefix="load"):
    """``{name: password}`` for ``prefix001`` .. ``prefixNNN``, created if missing;
    every call sets new passwords."""
    site = settings.load()
    ldap, cluster = site["ldap"], site["cluster"]
    base = ldap["base_dn"]
    admin_pw = (Path(cluster["ldap_dir"]) / "admin.password").read_text().strip()
    server = ldap3.Server(ldap["server_address"], port=ldap["server_port"])
    conn = ldap3.Connection(server, cluster["ldap_admin_dn"], admin_pw, auto_bind=True)
    users_group = f"cn=portal-users,ou=groups,{base}"
    accounts = {}
    for i in range(1, count + 1):
        name = f"{prefix}{i:03d}"
        dn = f"uid={name},ou=people,{base}"
        uid = UID_BASE + i
        home = os.path.join(cluster["home_root"], name)
        password = secrets.token_urlsafe(12)
        if not conn.search(dn, "(objectClass=*)", search_scope=ldap3.BASE):
            conn.add(
                dn,
                ["inetOrgPerson", "posixAccount", "shadowAccount"],
                {
                    "cn": name, "sn": "Load", "uid": name, "uidNumber": uid,
                    "gidNumber": USERS_GID, "homeDirectory": home, "loginShell": "/bin/bash",
                },
            )  # fmt: skip
            assert conn.result["result"] == 0, conn.result
        conn.modify(
            dn,
            {"userPassword": [(ldap3.MODIFY_REPLACE, [hashed(ldap3.HASHED_SALTED_SHA, password)])]},
        )
        assert conn.result["result"] == 0, conn.result
        conn.modify(users_group, {"memberUid": [(ldap3.MODIFY_ADD, [name])]})
        assert conn.result["result"] in (0, 20), conn.result  # 20: already a member
        if not os.path.isdir(home):
            os.makedirs(home, mode=0o700)
            os.chown(home, uid, USERS_GID)
        accounts[name] = password
    conn.unbind()
    return accounts
