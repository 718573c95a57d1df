"""The embedded directory of the one-machine cluster: an unprivileged OpenLDAP
slapd on loopback that holds the portal's users and groups, and nslcd, so
that these users are Unix accounts here too (the account that logs in to the
hub is the one that runs the Slurm job). deploy/ldap.sh starts and stops the
daemons; this module writes their configuration and computes the changes::

    deploy/ldap.sh start      # write the config, load the demo data the
                              # first time (or migrate it), start slapd and
                              # nslcd, make homes
    deploy/ldap.sh stop       # stop slapd and nslcd (the directory is kept)
    deploy/ldap.sh status     # exit 0 if both run, else 3
    deploy/ldap.sh accounts   # print the demo accounts and their passwords

A subtree of the base, ``ou=site`` (empty, no entry made here), is kept as
a site's directory may be: anonymous clients may bind there but not read or
search it, and OpenLDAP's memberof overlay keeps the ``memberOf`` of users
in groupOfNames groups. The tests of a site's [ldap] settings (a service
account, groupOfNames and memberOf membership) add their entries there and
remove them after; the demo's own users and posixGroup groups stay readable
by all, as nslcd reads them anonymously.

Transport: slapd offers StartTLS with [tls] cert and key (its own copy of
the key, readable by openldap only) and refuses a bind with a password
before it ("Confidentiality required"); anonymous reads stay allowed. With
[cluster] ldaps_port it also serves LDAPS there (loopback), with the same
certificate. nslcd,
the admin binds here and the hub use StartTLS and check the certificate
against [tls] ca_cert. A new certificate, key or CA restarts slapd (a new
CA, nslcd too): slapd.conf and nslcd.conf carry a checksum of their TLS
files, so a new file changes the config, and that restarts the daemon.

The demo data, loaded only into an empty directory: groups portal-users
(alice, bob, carol), portal-admins (carol), vision (alice), the lab groups
lab-vision (alice, carol) and lab-nlp (bob, carol), whose members are the
users of the Slurm accounts of the same names ([[cluster.accounts]]), and
guests (no members), and the users alice, bob, carol and eve. eve is a valid account
that no group lists and whose primary group is guests, so the hub refuses
her and `id eve` shows no portal group. Each has the `mail` NAME@[mail]
domain, which the login node's exim4 delivers to /var/mail/NAME
(deploy/mail_setup.py). A directory loaded before guests existed is
migrated at start (the group added, eve moved to it), and so is one whose
demo users have no `mail` (the address added) or that lacks the lab groups
(added with their members).
The passwords are random, made at that first start, and kept only in the
directory (hashed) and in the accounts file (root, 0600). To start over:
stop, remove the LDAP directory and the accounts file, start.

The rootdn's password is made once and kept in a root-only file; slapd.conf
(which slapd, running as openldap, must read) holds only its hash.
"""

import glob
import hashlib
import json
import os
import pwd
import secrets
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from deploy import nsswitch, tls_setup
from deploy.base import DeployError, logger, main_of, make_dir, render, run, write_if_changed
from portal.settings import portal_groups

log = logger("ldap")

# The demo data. Users: name, uidNumber, primary group, given name, surname.
DEMO_USERS = (
    ("alice", 20001, "portal-users", "Alice", "Adams"),
    ("bob", 20002, "portal-users", "Bob", "Baker"),
    ("carol", 20003, "portal-users", "Carol", "Clark"),
    ("eve", 20009, "guests", "Eve", "Evans"),
)
# Groups: name, gidNumber, members (memberUid). Members of ADMIN_GROUP are
# portal admins (portal.toml [ldap] admin_groups). guests is the primary
# group of accounts that are in no portal group.
DEMO_GROUPS = (
    ("portal-users", 20000, ("alice", "bob", "carol")),
    ("portal-admins", 20010, ("carol",)),
    ("vision", 20020, ("alice",)),
    ("lab-vision", 20030, ("alice", "carol")),
    ("lab-nlp", 20040, ("bob", "carol")),
    ("guests", 20100, ()),
)
# Groups the demo gained after directories were loaded: added when missing.
LAB_GROUPS = ("lab-vision", "lab-nlp")
ADMIN_GROUP = "portal-admins"
# Before guests, every demo user had this primary group (migration).
OLD_USERS_GID = 20000

SCHEMA_DIR = "/etc/ldap/schema"
# The strength (SSF) a bind with a password needs: any TLS cipher has 128+.
BIND_SSF = 128
NSLCD_CONF = Path("/etc/nslcd.conf")
NSLCD_RUN = Path("/run/nslcd")
# slapd's pid and args files, in a folder of its own: the LDAP folder is not
# writable by openldap (root writes slapd.conf there, by path).
SLAPD_RUN = Path("/run/portal/slapd")
SKEL = Path("/etc/skel")


@dataclass(frozen=True)
class Layout:
    """Where the directory's files are, and how it is reached, from the settings."""

    ldap_dir: Path
    accounts_file: Path
    home_root: Path
    base_dn: str
    admin_dn: str
    port: int
    ldaps_port: int
    server_address: str
    ca_cert: str
    tls_cert: str
    mail_domain: str

    @classmethod
    def of(cls, settings):
        cluster, ldap, tls = settings["cluster"], settings["ldap"], settings["tls"]
        return cls(
            Path(cluster["ldap_dir"]),
            Path(cluster["accounts_file"]),
            Path(cluster["home_root"]),
            ldap["base_dn"],
            cluster["ldap_admin_dn"],
            ldap["server_port"],
            cluster["ldaps_port"],
            ldap["server_address"],
            tls["ca_cert"],
            tls["cert"],
            settings["mail"]["domain"],
        )

    data_dir = property(lambda self: self.ldap_dir / "data")
    slapd_conf = property(lambda self: self.ldap_dir / "slapd.conf")
    admin_pw_file = property(lambda self: self.ldap_dir / "admin.password")  # 0600
    admin_hash_file = property(lambda self: self.ldap_dir / "admin.password.ssha")
    # (a folder of its own: tls.sh key-copy makes the key's folder 0755)
    slapd_key = property(lambda self: self.ldap_dir / "tls" / "slapd.key")
    people_dn = property(lambda self: f"ou=people,{self.base_dn}")
    groups_dn = property(lambda self: f"ou=groups,{self.base_dn}")
    # slapd listens on loopback only; nslcd and the hub use the configured address.
    listen_uri = property(lambda self: f"ldap://127.0.0.1:{self.port}/")
    # and LDAPS beside it ([cluster] ldaps_port; 0: none), what slapd -h gets
    listen_uris = property(
        lambda self: (
            self.listen_uri + (f" ldaps://127.0.0.1:{self.ldaps_port}/" if self.ldaps_port else "")
        )
    )
    site_dn = property(lambda self: f"ou=site,{self.base_dn}")
    server_uri = property(lambda self: f"ldap://{self.server_address}:{self.port}/")

    def mail_of(self, name):
        """A demo user's LDAP ``mail``: delivered on the login node ([mail] domain)."""
        return f"{name}@{self.mail_domain}"


# ---------------------------------------------------------------- pure


def files_sum(*contents):
    """A short checksum of the files' contents (bytes), as ``cat | sha256sum``."""
    return hashlib.sha256(b"".join(contents)).hexdigest()[:16]


def slapd_conf(layout, tls_sum, rootpw):
    return render(
        "slapd.conf",
        schema_dir=SCHEMA_DIR,
        slapd_pid=SLAPD_RUN / "slapd.pid",
        slapd_args=SLAPD_RUN / "slapd.args",
        tls_sum=tls_sum,
        ca_cert=layout.ca_cert,
        tls_cert=layout.tls_cert,
        slapd_key=layout.slapd_key,
        bind_ssf=BIND_SSF,
        base_dn=layout.base_dn,
        admin_dn=layout.admin_dn,
        rootpw=rootpw,
        data_dir=layout.data_dir,
        site_dn=layout.site_dn,
    )


def nslcd_conf(layout, ca_sum):
    return render(
        "nslcd.conf",
        server_uri=layout.server_uri,
        base_dn=layout.base_dn,
        ca_sum=ca_sum,
        ca_cert=layout.ca_cert,
    )


def base_entry(base_dn):
    """The first RDN of the base DN as an entry: dc=portal -> dcObject/organization."""
    attr, _, value = base_dn.split(",", 1)[0].partition("=")
    classes = {
        "dc": f"objectClass: dcObject\nobjectClass: organization\ndc: {value}\n"
        "o: Data Scientist Portal\n",
        "o": f"objectClass: organization\no: {value}\n",
        "ou": f"objectClass: organizationalUnit\nou: {value}\n",
    }
    if attr.lower() not in classes:
        raise DeployError(f"cannot make a base entry for {base_dn} (use dc=, o= or ou=)")
    return f"dn: {base_dn}\n{classes[attr.lower()]}\n"


def gid_of(group):
    for name, gid, _ in DEMO_GROUPS:
        if name == group:
            return gid
    raise DeployError(f"no demo group {group} (DEMO_GROUPS)")


def group_entry(name, groups_dn, changetype=None):
    """The demo group's entry as LDIF (with a changetype line for ldapmodify)."""
    _, gid, members = next(g for g in DEMO_GROUPS if g[0] == name)
    change = f"changetype: {changetype}\n" if changetype else ""
    lines = "".join(f"memberUid: {m}\n" for m in members)
    return (
        f"dn: cn={name},{groups_dn}\n{change}objectClass: posixGroup\ncn: {name}\n"
        f"gidNumber: {gid}\n{lines}\n"
    )


def demo_ldif(layout, hashes):
    """The demo data as LDIF, parents first; ``hashes`` maps user to password hash."""
    parts = [base_entry(layout.base_dn)]
    for dn, ou in ((layout.people_dn, "people"), (layout.groups_dn, "groups")):
        parts.append(f"dn: {dn}\nobjectClass: organizationalUnit\nou: {ou}\n\n")
    parts += [group_entry(name, layout.groups_dn) for name, _, _ in DEMO_GROUPS]
    for name, uid, group, given, surname in DEMO_USERS:
        parts.append(
            render(
                "demo-user.ldif",
                name=name,
                people_dn=layout.people_dn,
                given=given,
                surname=surname,
                uid=uid,
                gid=gid_of(group),
                home=layout.home_root / name,
                mail=layout.mail_of(name),
                password_hash=hashes[name],
            )
        )
    return "".join(parts)


def groups_of(user):
    return [name for name, _, members in DEMO_GROUPS if user in members]


def accounts_json(passwords):
    """The demo accounts as JSON: username, password, admin, uid, groups."""
    accounts = [
        {
            "username": name,
            "password": passwords[name],
            "admin": ADMIN_GROUP in groups_of(name),
            "uid": uid,
            "groups": groups_of(name),
        }
        for name, uid, *_ in DEMO_USERS
    ]
    return json.dumps(accounts, indent=2) + "\n"


def migration(layout, read):
    """What brings a directory loaded by an older deploy/ldap.sh up to the
    demo data, as (LDIF for ldapmodify, [(user, new gid)]): the demo groups
    that are some demo user's primary group (guests), or lab groups
    (:data:`LAB_GROUPS`), and are missing are added, the demo users whose
    gidNumber is still the old common one (portal-users) move to their own
    primary group, and those without a ``mail`` get theirs. Groups, members
    and addresses an admin changed are left alone. ``read(dn)`` gives an
    entry's gidNumber and mail as ``{attribute: value}`` (either may be
    missing), None when the entry is.

    >>> from portal.settings import defaults
    >>> read = lambda dn: {} if dn.startswith("uid=eve,") else {"mail": "x@y"}
    >>> print(migration(Layout.of(defaults()), read)[0], end="")
    dn: uid=eve,ou=people,dc=portal,dc=example
    changetype: modify
    add: mail
    mail: eve@portal.localhost
    <BLANKLINE>
    """
    ldif, moved = [], []
    primary = {group for _, _, group, _, _ in DEMO_USERS}
    for name, _, _ in DEMO_GROUPS:
        added = name in primary or name in LAB_GROUPS
        if added and read(f"cn={name},{layout.groups_dn}") is None:
            ldif.append(group_entry(name, layout.groups_dn, "add"))
    for name, _, group, _, _ in DEMO_USERS:
        dn = f"uid={name},{layout.people_dn}"
        have = read(dn)
        if have is None:
            continue
        changes = []
        gid = gid_of(group)
        if have.get("gidNumber") == str(OLD_USERS_GID) and gid != OLD_USERS_GID:
            changes.append(f"replace: gidNumber\ngidNumber: {gid}\n")
            moved.append((name, gid))
        if not have.get("mail"):
            changes.append(f"add: mail\nmail: {layout.mail_of(name)}\n")
        if changes:
            ldif.append(f"dn: {dn}\nchangetype: modify\n" + "-\n".join(changes) + "\n")
    return "".join(ldif), moved


def shell_lines(layout):
    """The facts deploy/ldap.sh needs, as shell assignments."""
    facts = {
        "LDAP_DIR": layout.ldap_dir,
        "DATA_DIR": layout.data_dir,
        "SLAPD_CONF": layout.slapd_conf,
        "SLAPD_PID": SLAPD_RUN / "slapd.pid",
        "OLD_SLAPD_PID": layout.ldap_dir / "slapd.pid",  # where an earlier version kept it
        "ACCOUNTS_FILE": layout.accounts_file,
        "BASE_DN": layout.base_dn,
        "PORT": layout.port,
        "LISTEN_URI": layout.listen_uri,
        "LISTEN_URIS": layout.listen_uris,
        "SERVER_URI": layout.server_uri,
        "CA_CERT": layout.ca_cert,
        "NSLCD_CONF": NSLCD_CONF,
        "NSLCD_PID": NSLCD_RUN / "nslcd.pid",  # compiled into nslcd
    }
    return [f"{k}={shlex.quote(str(v))}" for k, v in facts.items()]


# ---------------------------------------------------------------- writers


def ssha(password):
    """The {SSHA} hash of ``password``, by slappasswd; through a pipe, not
    argv (-T hashes the bytes as they are: no trailing newline)."""
    out = run(["slappasswd", "-T", "/dev/stdin"], input=password, capture_output=True, text=True)
    return out.stdout.strip()


def ldap_env(layout):
    """ldap-utils check slapd's certificate against [tls] ca_cert (with -ZZ)."""
    return {**os.environ, "LDAPTLS_CACERT": layout.ca_cert, "LDAPTLS_REQCERT": "demand"}


def ensure_admin_password(layout):
    files = (layout.admin_pw_file, layout.admin_hash_file)
    if all(p.is_file() and p.stat().st_size for p in files):
        return
    password = secrets.token_urlsafe(12)
    old = os.umask(0o077)
    try:
        layout.admin_pw_file.write_text(password)  # no newline: ldap* -y FILE reads it all
        layout.admin_hash_file.write_text(ssha(password) + "\n")
    finally:
        os.umask(old)
    log(f"new password of {layout.admin_dn} in {layout.admin_pw_file}")


def cmd_slapd_conf(settings):
    """Write slapd.conf (prints "changed" when it did), with its folders, the
    certificate and slapd's copy of the key, and the rootdn's password."""
    layout = Layout.of(settings)
    # root:openldap 0750: slapd, once it dropped root, reads slapd.conf here;
    # only root writes here (openldap could otherwise plant links for it).
    make_dir(layout.ldap_dir.parent)
    make_dir(layout.ldap_dir, 0o750, "root", "openldap")
    make_dir(SLAPD_RUN.parent)
    make_dir(SLAPD_RUN, 0o755, "openldap")
    make_dir(layout.data_dir, 0o700, "openldap")
    tls_setup.cmd_ensure(settings)
    tls_setup.key_copy(settings, "openldap", layout.slapd_key)
    ensure_admin_password(layout)
    tls_files = (layout.ca_cert, layout.tls_cert, layout.slapd_key)
    tls_sum = files_sum(*(Path(f).read_bytes() for f in tls_files))
    rootpw = layout.admin_hash_file.read_text().rstrip("\n")
    text = slapd_conf(layout, tls_sum, rootpw)
    if write_if_changed(layout.slapd_conf, text, 0o640, "root", "openldap"):
        log(f"wrote {layout.slapd_conf}")
        test = ["runuser", "-u", "openldap", "--", "slaptest", "-Q", "-u", "-f"]
        if subprocess.run([*test, str(layout.slapd_conf)], stdout=sys.stderr).returncode:
            raise DeployError(f"{layout.slapd_conf} is not valid (see above)")
        print("changed")


def cmd_load_demo(settings):
    """Load the demo data into the empty directory (offline, with slapadd,
    before slapd first starts) and write the accounts file with new passwords."""
    layout = Layout.of(settings)
    log("empty directory: loading the demo users and groups")
    passwords = {name: secrets.token_urlsafe(12) for name, *_ in DEMO_USERS}
    hashes = {name: ssha(password) for name, password in passwords.items()}
    # The accounts file first: a failed load leaves an empty directory, and
    # the next start begins again with new passwords.
    make_dir(layout.accounts_file.parent)
    tmp = layout.accounts_file.with_name(layout.accounts_file.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(accounts_json(passwords))
    os.chown(tmp, 0, 0)
    os.replace(tmp, layout.accounts_file)
    load = ["runuser", "-u", "openldap", "--", "slapadd", "-q", "-f", str(layout.slapd_conf)]
    if subprocess.run(load, input=demo_ldif(layout, hashes), text=True).returncode:
        for mdb in glob.glob(str(layout.data_dir / "*.mdb")):
            os.unlink(mdb)
        raise DeployError("loading the demo data failed (see above)")
    log(f"demo accounts in {layout.accounts_file} (deploy/ldap.sh accounts)")


MIGRATED = ("gidNumber", "mail")


def entry_reader(layout):
    """``read(dn)``: the entry's gidNumber and mail (``migration``), read
    through slapd, as ``{attribute: first value}``; None when it is missing."""

    def read(dn):
        search = ["ldapsearch", "-x", "-ZZ", "-LLL", "-o", "ldif-wrap=no"]
        out = subprocess.run(
            [*search, "-H", layout.listen_uri, "-b", dn, "-s", "base", *MIGRATED],
            env=ldap_env(layout),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if out.returncode == 32:  # no such object
            return None
        if out.returncode:
            raise DeployError(f"reading {dn} from slapd failed: {out.stdout}")
        values = {}
        for line in out.stdout.splitlines():
            attr, sep, value = line.partition(": ")
            if sep and attr in MIGRATED:
                values.setdefault(attr, value)
        return values

    return read


def cmd_migrate(settings):
    """Apply ``migration``: through slapd, as the admin DN over StartTLS, and
    the files of the moved users' homes; a second run changes nothing."""
    layout = Layout.of(settings)
    ldif, moved = migration(layout, entry_reader(layout))
    if not ldif:
        return
    count = sum(line.startswith("dn:") for line in ldif.splitlines())
    log(f"migrating the directory: {count} entries (the demo users' primary groups and mail)")
    modify = ["ldapmodify", "-x", "-ZZ", "-H", layout.listen_uri, "-D", layout.admin_dn]
    done = subprocess.run(
        [*modify, "-y", str(layout.admin_pw_file)],
        input=ldif,
        text=True,
        env=ldap_env(layout),
        stdout=subprocess.DEVNULL,
    )
    if done.returncode:
        raise DeployError("migrating the directory failed (see above)")
    for name, gid in moved:
        home = layout.home_root / name
        # As the user, never root, in a folder the user controls (a link or a
        # swapped folder must not make root change another file); -h: a link
        # is changed itself. What the user does not own is left as it is.
        if home.is_dir():
            try:
                uid = pwd.getpwnam(name).pw_uid
            except KeyError:
                uid = None
            if uid is not None:
                as_user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups"]
                find = ["find", str(home), "-xdev", "-gid", str(OLD_USERS_GID)]
                subprocess.run(
                    [*as_user, *find, "-exec", "chgrp", "-h", str(gid), "{}", "+"],
                    stderr=subprocess.DEVNULL,
                )
        log(f"{name}: primary group {gid}")


def cmd_nslcd_conf(settings):
    """Write nslcd.conf and its run folder; passwd: and group: of
    nsswitch.conf end with ldap, once."""
    layout = Layout.of(settings)
    text = nslcd_conf(layout, files_sum(Path(layout.ca_cert).read_bytes()))
    if write_if_changed(NSLCD_CONF, text, 0o640, "root", "nslcd"):
        log(f"wrote {NSLCD_CONF}")
    _, missing = nsswitch.with_ldap(nsswitch.NSSWITCH.read_text())
    if missing and nsswitch.update(lambda text: nsswitch.with_ldap(text)[0]):
        log(f"added ldap to {' '.join(missing)} in {nsswitch.NSSWITCH}")
    make_dir(NSLCD_RUN, 0o755, "nslcd")


def cmd_homes(settings):
    """Nobody else creates the users' homes (no pam_mkhomedir): make the
    missing ones, from /etc/skel, owned by the user as LDAP says."""
    for name, *_ in DEMO_USERS:
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            continue
        home = Path(user.pw_dir)
        if not user.pw_dir or home.is_dir():
            continue
        make_dir(home.parent)
        # root's until filled: the user never owns a folder root writes in
        make_dir(home, 0o700, "root")
        for entry in SKEL.iterdir():  # as cp -R /etc/skel/. HOME: HOME's mode kept
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, home / entry.name, symlinks=True, copy_function=shutil.copy)
            else:
                shutil.copy(entry, home / entry.name, follow_symlinks=False)
        for folder, dirs, files in os.walk(home):
            for entry in (folder, *(os.path.join(folder, n) for n in dirs + files)):
                os.lchown(entry, user.pw_uid, user.pw_gid)
        log(f"created {home}")


def cmd_shell(settings):
    print("\n".join(shell_lines(Layout.of(settings))))


def cmd_groups(settings):
    """The portal's Unix groups, one a line (deploy/slurm.sh's account users)."""
    print("\n".join(portal_groups(settings)))


main = main_of(
    {
        "shell": cmd_shell,
        "slapd-conf": cmd_slapd_conf,
        "load-demo": cmd_load_demo,
        "migrate": cmd_migrate,
        "nslcd-conf": cmd_nslcd_conf,
        "homes": cmd_homes,
        "groups": cmd_groups,
    },
    log,
)

if __name__ == "__main__":
    sys.exit(main())
