"""``portal check``: the site's preflight, live against the real system.

Each check prints one line: ``ok``, ``WARN`` (what only degrades: mail, a
queued test job) or ``FAIL``, with what it saw and, when not ok, the fix.
``portal check`` exits 1 when any check fails; ``portal setup`` runs it at
its end. It runs as root, and runs as the hub's account ([hub] user) what
the hub would run itself (sudo's rules, the hub's view of jobs), and as
``[check] user`` the test job of each partition:

- prerequisites: what ``portal setup`` needs and does not install;
- Slurm: the commands in [slurm] bin_dir and their version, slurmctld
  (``scontrol ping``) and slurmdbd (``sacctmgr show cluster``);
- each profile's partition: it exists, has a node that can run jobs, and
  has the GPUs its profiles ask for;
- each allowed group: it resolves on this host (NSS: sssd, nslcd), and its
  members' uids are within [hub] uid_min..uid_max;
- Slurm associations: each member has one (a default account), under the
  name the Unix account has (slurmdbd lower-cases names unless
  ``Parameters=PreserveCaseUser``);
- sudo: its version (the rules use regular expressions: 1.9.10 or later)
  and the portal's rules, as the hub's account asks sudo (``sudo -n -l``);
- LDAP: a bind (the lookup account, or anonymous), over TLS with the CA of
  the settings, and a search of each allowed group and of the users;
- the databases: reachable, and the portal's store at its newest schema;
- the certificate: the proxy's names the public host and the users' hosts
  (``*.[hub] domain``), and so does the web server's in front ([hub]
  public_url), checked against the system's CAs and [tls] ca_cert;
- mail: the relay the hub's mail goes through answers SMTP;
- a test job on each partition, as [check] user with a one-minute limit:
  the hub's account sees it (as the hub sees jobs, under the site's
  PrivateData), and on its node it finds the environments and the session
  launcher and reaches the hub's API (when the hub is not running, this
  command listens on the API's port itself for the job's try).
"""

import asyncio
import grp
import os
import pwd
import re
import smtplib
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from portal import settings as site_settings
from portal.slurm import commands as slurm
from portal.slurm.parse import SlurmError

OK, WARN, FAIL = "ok", "WARN", "FAIL"
TIMEOUT = 20
SUDO_REGEX_VERSION = (1, 9, 10)  # sudoers' "^...$" arguments (the extend helper's rule)
JOB_SUFFIX = "-check"  # the test jobs' name: [slurm] job_name + this
JOB_MARK = "portal-check:"  # the lines the test job prints for this command
OUTPUT_MOST = 65536  # bytes of the test job's output read: it prints a few lines


@dataclass
class Result:
    mark: str
    name: str
    detail: str
    fix: str = ""

    def line(self):
        """One line: the mark, the check, what it saw, and the fix when not ok.

        >>> Result(FAIL, "partition a100", "not in Slurm", "create it").line()
        'FAIL partition a100: not in Slurm; fix: create it'
        >>> Result(OK, "slurmctld", "UP", "never shown").line()
        'ok   slurmctld: UP'
        """
        text = f"{self.mark:<4} {self.name}: {self.detail}"
        return text + (f"; fix: {self.fix}" if self.fix and self.mark != OK else "")


# ---------------------------------------------------------------- pure


def version_tuple(text):
    """The first dotted version in ``text``, as numbers.

    >>> version_tuple("Sudo version 1.9.13p3"), version_tuple("slurm 22.05.8")
    ((1, 9, 13), (22, 5, 8))
    >>> version_tuple("none")
    ()
    """
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(n) for n in found.groups() if n is not None) if found else ()


def uids_outside(members, uid_min, uid_max):
    """``[(name, uid)]`` of ``members`` (``{name: uid}``) outside the range.

    >>> uids_outside({"a": 20001, "b": 999, "c": 1_200_000_001}, 10000, 60000)
    [('b', 999), ('c', 1200000001)]
    """
    return sorted((n, u) for n, u in members.items() if not uid_min <= u <= uid_max)


def parse_associations(text):
    """``{user: {accounts}}`` of ``sacctmgr -n -P show assoc format=User,Account``.

    >>> found = parse_associations("|root\\nalice|lab-a\\nalice|lab-b\\nj.smith|lab-a\\n")
    >>> {user: sorted(accounts) for user, accounts in found.items()}
    {'alice': ['lab-a', 'lab-b'], 'j.smith': ['lab-a']}
    """
    users = {}
    for line in text.splitlines():
        user, _, account = line.partition("|")
        if user.strip() and account.strip():
            users.setdefault(user.strip(), set()).add(account.strip())
    return users


def missing_associations(members, associations):
    """``(missing, lowered)``: the members with no association, and those
    Slurm holds only under their lower-case name (slurmdbd without
    ``Parameters=PreserveCaseUser``).

    >>> missing_associations(["alice", "J.Smith", "bob"], {"alice": {"x"}, "j.smith": {"x"}})
    (['bob'], ['J.Smith'])
    """
    missing, lowered = [], []
    for name in sorted(members):
        if name in associations:
            continue
        (lowered if name.lower() in associations else missing).append(name)
    return missing, lowered


def cert_covers(names, host):
    """Whether a certificate's DNS ``names`` cover ``host`` (one leftmost ``*``).

    >>> cert_covers(["portal.example.org", "*.portal.example.org"], "u-bob.portal.example.org")
    True
    >>> cert_covers(["*.portal.example.org"], "a.b.portal.example.org")
    False
    """
    host = host.lower().rstrip(".")
    for name in names:
        name = name.lower().rstrip(".")
        if name == host:
            return True
        if name.startswith("*.") and "." in host and host.split(".", 1)[1] == name[2:]:
            return True
    return False


def job_script(envs, hub_host, hub_port, python):
    """The test job's script: where it runs, whether it sees each of
    ``envs`` (``{name: folder}``) and reaches the hub's API, one
    ``JOB_MARK`` line each (``parse_job_output`` reads them).

    >>> "portal-check: env jupyter" in job_script({"jupyter": "/opt/e"}, "10.0.0.1", 8081, "/x")
    True
    """
    lines = ["#!/bin/sh", f'echo "{JOB_MARK} node $(hostname)"']
    for name, folder in envs.items():
        lines.append(
            f'if [ -x "{folder}" ]; then echo "{JOB_MARK} env {name} ok"; '
            f'else echo "{JOB_MARK} env {name} missing {folder}"; fi'
        )
    probe = (
        "import socket,sys\n"
        "try:\n"
        f"    socket.create_connection(({hub_host!r}, {int(hub_port)}), 10).close()\n"
        f"    print('{JOB_MARK} hub ok')\n"
        "except OSError as e:\n"
        f"    print('{JOB_MARK} hub unreachable', e)\n"
    )
    lines.append(f'if [ -x "{python}" ]; then "{python}" - <<\'EOF\'\n{probe}EOF')
    lines.append(f'else echo "{JOB_MARK} hub untested: no {python}"; fi')
    return "\n".join(lines) + "\n"


def parse_job_output(text):
    """What the test job saw: ``{"node": ..., "env NAME": "ok" | why, "hub": ...}``.

    >>> parse_job_output("x\\nportal-check: node n1\\nportal-check: env jupyter ok\\n"
    ...                  "portal-check: hub unreachable [Errno 113] No route to host\\n")
    {'node': 'n1', 'env jupyter': 'ok', 'hub': 'unreachable [Errno 113] No route to host'}
    """
    seen = {}
    for line in text.splitlines():
        if not line.startswith(JOB_MARK):
            continue
        words = line[len(JOB_MARK) :].split()
        if words[:1] == ["env"] and len(words) >= 3:
            seen[f"env {words[1]}"] = " ".join(words[2:])
        elif words:
            seen[words[0]] = " ".join(words[1:])
    return seen


def private_data(config):
    """The PrivateData values of ``scontrol show config``'s text.

    >>> sorted(private_data("MpiDefault = none\\nPrivateData = jobs,usage\\n"))
    ['jobs', 'usage']
    >>> private_data("PrivateData = none")
    set()
    """
    found = re.search(r"(?m)^PrivateData\s*=\s*(\S+)", config)
    values = set(found[1].lower().split(",")) if found else set()
    return values - {"none", "(null)"}


# ---------------------------------------------------------------- the checks


def _run(argv, timeout=TIMEOUT, **kwargs):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(argv, 127, "", str(e))


def _said(done):
    return (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]


def as_hub(settings, *argv, timeout=TIMEOUT):
    """``argv`` as the hub's account, in the environment the hub's units give it."""
    from portal.setup import install

    layout = install.Layout.of(settings)
    argv = ["setpriv", f"--reuid={layout.hub_user}", f"--regid={layout.hub_user}",
            "--init-groups", "--inh-caps=-all", "--", *argv]  # fmt: skip
    return _run(argv, timeout=timeout, env=install.hub_env(layout), cwd="/")


def prerequisites(settings):
    from portal.setup import install

    missing = install.missing_prerequisites(settings)
    if missing:
        return [Result(FAIL, "prerequisites", "; ".join(missing), "install what is named")]
    return [Result(OK, "prerequisites", ", ".join(install.PREREQUISITES))]


def slurm_parts(settings):
    bin_dir = settings["slurm"]["bin_dir"]
    problem = slurm.missing_commands(bin_dir)
    if problem:
        return [Result(FAIL, "Slurm commands", problem, "set [slurm] bin_dir")]
    done = _run([slurm.command("sinfo", bin_dir), "--version"])
    results = [Result(OK, "Slurm commands", f"{bin_dir}, {done.stdout.strip() or '?'}")]
    done = _run([slurm.command("scontrol", bin_dir), "ping"])
    up = "is UP" in done.stdout
    results.append(Result(OK if up else FAIL, "slurmctld", (done.stdout or done.stderr).strip()
                          .replace("\n", "; ")[:200], "start slurmctld, or check slurm.conf's"
                          " SlurmctldHost from this host"))  # fmt: skip
    done = _run([slurm.command("sacctmgr", bin_dir), "-n", "-P", "show", "cluster",
                 "format=Cluster"])  # fmt: skip
    up = done.returncode == 0 and done.stdout.strip()
    results.append(Result(OK if up else FAIL, "slurmdbd",
                          f"clusters {', '.join(done.stdout.split())}" if up else _said(done)[0],
                          "start slurmdbd (AccountingStorageHost in slurm.conf)"))  # fmt: skip
    return results


def profiles_of(settings):
    """The profiles the hub offers: its store's, else the settings'."""
    from portal.core.profiles import profile_from_dict, slice_defaults
    from portal.store import ProfileStore, store_url

    try:
        stored = ProfileStore(store_url(settings)).profiles()
        if stored:
            return stored
    except Exception:  # noqa: BLE001 (the database check says why)
        pass
    defaults = slice_defaults(settings)
    return [profile_from_dict({**defaults, **p}) for p in settings.get("profiles", [])]


def partition_parts(settings):
    try:
        partitions = asyncio.run(slurm.partitions(TIMEOUT))
    except SlurmError as e:
        return [Result(FAIL, "partitions", f"sinfo: {str(e)[:200]}", "see slurmctld above")]
    wanted = {}
    for profile in profiles_of(settings):
        if profile.enabled:
            wanted.setdefault(profile.partition, []).append(profile)
    results = []
    for name, profiles in sorted(wanted.items()):
        used_by = ", ".join(p.name for p in profiles)
        label = f"partition {name}"
        partition = partitions.get(name)
        if partition is None:
            fix = (f"create partition {name} in slurm.conf, or give profiles {used_by} a "
                   f"partition Slurm has: {', '.join(partitions)}")  # fmt: skip
            results.append(Result(FAIL, label, f"not in Slurm (profiles {used_by})", fix))
            continue
        able = [n.name for n in partition.nodes if n.available]
        if not able:
            states = ", ".join(f"{n.name} {n.state}" for n in partition.nodes) or "no nodes"
            results.append(Result(FAIL, label, f"no node can run jobs ({states})",
                                  "resume the nodes (scontrol update NodeName=... "
                                  "State=RESUME) or start their slurmd"))  # fmt: skip
            continue
        most = max(n.gpus for n in partition.nodes)
        asked = max(p.max_gpus for p in profiles)
        detail = f"{len(able)} of {len(partition.nodes)} nodes up, {most} GPUs on its largest"
        if asked > 0 and most == 0:
            results.append(Result(FAIL, label, f"no GPUs (profiles {used_by} ask up to {asked})",
                                  "give its nodes Gres=gpu:... in slurm.conf and gres.conf, or "
                                  "move those profiles to a partition with GPUs"))  # fmt: skip
        elif asked > most:
            results.append(Result(WARN, label, f"{detail}; profiles {used_by} allow {asked}",
                                  f"set their max_gpus to at most {most}"))  # fmt: skip
        else:
            results.append(Result(OK, label, detail))
    return results


def group_members(settings):
    """``{group: {member: uid}}`` of the allowed groups as this host resolves
    them (None: the group does not resolve)."""
    groups = {}
    for name in site_settings.portal_groups(settings):
        try:
            entry = grp.getgrnam(name)
        except KeyError:
            groups[name] = None
            continue
        members = {}
        for member in entry.gr_mem:
            try:
                members[member] = pwd.getpwnam(member).pw_uid
            except KeyError:
                members[member] = -1
        groups[name] = members
    return groups


def group_parts(settings, groups):
    hub = settings["hub"]
    results = []
    for name, members in groups.items():
        label = f"group {name}"
        if members is None:
            results.append(Result(FAIL, label, "does not resolve on this host (getent group)",
                                  "create it in the directory, or fix [ldap] allowed_groups and "
                                  "sssd/nslcd's group search base"))  # fmt: skip
            continue
        if not members:
            results.append(Result(WARN, label, "resolves, with no members",
                                  "add its members in the directory"))  # fmt: skip
            continue
        outside = uids_outside(members, hub["uid_min"], hub["uid_max"])
        if outside:
            shown = ", ".join(f"{n} ({u})" for n, u in outside[:5])
            results.append(Result(FAIL, label, f"members outside uid {hub['uid_min']}.."
                                  f"{hub['uid_max']}: {shown}",
                                  "set [hub] uid_min and uid_max to the range of your users' "
                                  "uids, or take system accounts out of the group"))  # fmt: skip
            continue
        low, high = min(members.values()), max(members.values())
        results.append(Result(OK, label, f"{len(members)} members, uids {low}..{high}"))
    return results


def visibility_part(settings):
    """Whether the hub will see its sessions' jobs: Slurm's PrivateData
    (slurmctld's and slurmdbd's) against [slurm] private_data."""
    mode = settings["slurm"]["private_data"]
    try:
        hidden = asyncio.run(slurm.jobs_hidden(TIMEOUT))
    except SlurmError as e:
        return Result(FAIL, "PrivateData", f"scontrol/sacctmgr show config: {str(e)[:200]}",
                      "see slurmctld and slurmdbd above")  # fmt: skip
    if not hidden:
        return Result(OK, "PrivateData", "hides no job: the hub reads its jobs itself")
    if mode == "direct":
        return Result(FAIL, "PrivateData", "hides other users' jobs, and [slurm] private_data "
                      '= "direct": the hub would not see its sessions',
                      'set [slurm] private_data = "auto" and run portal setup')  # fmt: skip
    return Result(OK, "PrivateData", "hides other users' jobs: the hub reads its own through "
                                     "portal-slurm-read")  # fmt: skip


CATALOG_KINDS = {
    "accounts": "accounts",
    "users": "users' associations",
    "reservations": "reservations",
}


def catalog_part(kinds):
    """Whether PrivateData (``kinds``: what it hides, ``private_kinds``)
    leaves the spawn page's site choices whole: accounts, users or
    reservations hidden from the hub's account (no Slurm operator) leave
    the page without them; Slurm still checks what a session names.

    >>> catalog_part({"jobs", "usage"}).mark
    'ok'
    >>> catalog_part({"accounts", "reservations"}).detail[:46]
    "hides accounts, reservations from the hub's ac"
    """
    hidden = [CATALOG_KINDS[k] for k in sorted(kinds) if k in CATALOG_KINDS]
    if not hidden:
        return Result(OK, "PrivateData catalog", "hides no account, user or reservation")
    return Result(
        WARN, "PrivateData catalog",
        f"hides {', '.join(hidden)} from the hub's account: the spawn page lists no account, "
        "QOS or reservation choice it cannot see (Slurm still checks what a session names)",
        "make the hub's account a Slurm operator (sacctmgr modify user NAME set "
        "adminlevel=operator), or take accounts, users and reservations out of PrivateData",
    )  # fmt: skip


def association_parts(settings, groups):
    members = sorted({m for ms in groups.values() if ms for m in ms})
    if not members:
        return []
    argv = [slurm.command("sacctmgr"), "-n", "-P", "show", "assoc", "format=User,Account"]
    done = _run(argv)
    if done.returncode:
        return [Result(FAIL, "associations", f"sacctmgr: {_said(done)[0]}", "see slurmdbd above")]
    missing, lowered = missing_associations(members, parse_associations(done.stdout))
    results = []
    if lowered:
        results.append(Result(FAIL, "associations", f"Slurm holds {', '.join(lowered[:5])} "
                              "only in lower case", "set Parameters=PreserveCaseUser in "
                              "slurmdbd.conf and add the users again"))  # fmt: skip
    if missing:
        fix = "sacctmgr add user NAME account=ACCOUNT (the account their sessions run under)"
        said = f"{len(missing)} members with none: {', '.join(missing[:5])}"
        results.append(Result(FAIL, "associations", said, fix))
    if not results:
        results.append(Result(OK, "associations", f"each of the {len(members)} members has one"))
    return results


def sudo_parts(settings, groups, check_user):
    from portal.helper import extend as extendhelper
    from portal.helper import slurmread

    done = _run(["sudo", "-V"])
    version = version_tuple(done.stdout.splitlines()[0] if done.stdout else "")
    if version < SUDO_REGEX_VERSION:
        shown = ".".join(map(str, version)) or "not found"
        return [Result(FAIL, "sudo", f"version {shown}", "install sudo 1.9.10 or later")]
    member = check_user or next((m for ms in groups.values() if ms for m in ms), "")
    asks = [("root", [extendhelper.INSTALLED_AT, "1", "60", "60"]),
            ("root", [slurmread.INSTALLED_AT, "squeue", "-h"])]  # fmt: skip
    if member:
        # scancel only of a job named as the portal's (the rule's regular expression)
        cancel = [slurm.command("scancel"), f"--name={settings['slurm']['job_name']}", "1"]
        asks[:0] = [(member, [slurm.command("sbatch")]), (member, cancel)]
    refused = []
    for user, argv in asks:
        done = as_hub(settings, "sudo", "-n", "-l", "-u", user, *argv)
        if done.returncode:
            refused.append(f"{os.path.basename(argv[0])} as {user}")
    hub_user = settings["hub"]["user"]
    if refused:
        return [Result(FAIL, "sudo", f"{hub_user} may not run {', '.join(refused)}",
                       "run portal setup (it writes /etc/sudoers.d/portal), and keep "
                       "#includedir /etc/sudoers.d in /etc/sudoers")]  # fmt: skip
    shown = ".".join(map(str, version))
    return [Result(OK, "sudo", f"{shown}; {hub_user}'s rules for {len(asks)} commands")]


def ldap_part(settings):
    import ldap3
    from ldap3.core.exceptions import LDAPNoSuchObjectResult

    ldap = settings["ldap"]
    ca = site_settings.ldap_ca_cert(settings)
    strategy = ldap["tls_strategy"]
    label = "ldap"
    where = f"{ldap['server_address']}:{ldap['server_port']}"
    try:
        tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=ca)
        server = ldap3.Server(ldap["server_address"], port=ldap["server_port"],
                              use_ssl=strategy == "on_connect", tls=tls,
                              connect_timeout=TIMEOUT)  # fmt: skip
        user, password = None, None
        if ldap["lookup_bind_dn"]:
            user = ldap["lookup_bind_dn"]
            password = Path(ldap["lookup_password_file"]).read_text().strip()
        conn = ldap3.Connection(server, user=user, password=password,
                                receive_timeout=TIMEOUT, raise_exceptions=True)  # fmt: skip
        conn.open()
        if strategy == "before_bind":
            conn.start_tls()
        conn.bind()
    except ssl.SSLError as e:
        return Result(FAIL, label, f"{where}: TLS: {e}",
                      f"set [ldap] ca_cert to the CA that signed the directory's certificate "
                      f"(now {ca})")  # fmt: skip
    except Exception as e:  # noqa: BLE001 (what the directory said is the answer)
        text = f"{type(e).__name__}: {str(e)[:200]}"
        fix = "check [ldap] server_address, server_port, tls_strategy, lookup_bind_dn"
        if "certificate" in text.lower() or "ssl" in text.lower():
            fix = f"set [ldap] ca_cert to the CA that signed the directory's certificate ({ca})"
        return Result(FAIL, label, f"{where}: {text}", fix)
    try:
        missing = []
        for dn in ldap["allowed_groups"]:
            try:
                if not conn.search(dn, "(objectClass=*)", search_scope=ldap3.BASE, attributes=[]):
                    missing.append(dn)
            except LDAPNoSuchObjectResult:
                missing.append(dn)
        base = ldap["user_search_base"] or ldap["base_dn"]
        found = conn.search(base, f"({ldap['user_attribute']}=*)", size_limit=1, attributes=[])
    except Exception as e:  # noqa: BLE001
        return Result(FAIL, label, f"{where}: search: {type(e).__name__}: {str(e)[:200]}",
                      "give the lookup account read access to the users and groups")  # fmt: skip
    finally:
        conn.unbind()
    if missing:
        return Result(FAIL, label, f"groups not found: {', '.join(missing)}",
                      "fix [ldap] allowed_groups")  # fmt: skip
    if not found:
        return Result(FAIL, label, f"no users under {base}", "set [ldap] user_search_base")
    bound = f"as {user}" if user else "anonymously"
    return Result(OK, label, f"{where}, {strategy}, bound {bound}, "
                             f"{len(ldap['allowed_groups'])} groups found")  # fmt: skip


def database_part(settings):
    from portal import database
    from portal.store import ProfileStore, store_url

    try:
        for setting, url in (("[hub] db_url", settings["hub"]["db_url"]),
                             ("[portal] db_url", store_url(settings))):  # fmt: skip
            url = database.database_url(url, setting)
            if database.is_postgresql(url):
                database.check_connection(url, setting, "portal-check")
        store = ProfileStore(store_url(settings))
        schema = store.schema()
    except Exception as e:  # noqa: BLE001 (DatabaseError names the setting)
        return Result(FAIL, "database", str(e).splitlines()[0][:300],
                      "start the database server, or fix the db_url named")  # fmt: skip
    if schema is None:
        return Result(FAIL, "database", "the portal's store has no schema", "run portal setup")
    newest = newest_revision()
    if newest and schema != newest:
        return Result(FAIL, "database", f"store at {schema}, newest {newest}", "run portal migrate")
    kind = "PostgreSQL" if "postgresql" in settings["hub"]["db_url"] else "SQLite"
    return Result(OK, "database", f"{kind} answers; the store is at {schema}")


def newest_revision():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from portal.store import MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config).get_current_head()


def _served_names(host, port, cafile, server_name):
    context = ssl.create_default_context()
    if cafile and os.path.exists(cafile):
        context.load_verify_locations(cafile=cafile)
    with socket.create_connection((host, port), timeout=TIMEOUT) as raw:
        with context.wrap_socket(raw, server_hostname=server_name) as tls:
            return [v for k, v in tls.getpeercert().get("subjectAltName", ()) if k == "DNS"]


def _file_names(path):
    done = _run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", path])
    return re.findall(r"DNS:([^,\s]+)", done.stdout), done


def certificate_part(settings):
    domain = settings["hub"]["domain"]
    user_host = f"portal-check.{domain}"
    public = urlsplit(site_settings.public_url(settings))
    wanted = [public.hostname, user_host]
    results = []
    if settings["hub"]["bind_url"].startswith("https://"):
        cert = settings["tls"]["cert"]
        names, done = _file_names(cert)
        if done.returncode:
            results.append(Result(FAIL, "certificate", f"{cert}: {_said(done)[0]}",
                                  "set [tls] cert to the web certificate (PEM)"))  # fmt: skip
        else:
            uncovered = [h for h in wanted if not cert_covers(names, h)]
            if uncovered:
                said = f"{cert} does not name {', '.join(uncovered)} (it names {', '.join(names)})"
                fix = f"issue it for {public.hostname} and *.{domain}"
                results.append(Result(FAIL, "certificate", said, fix))
            else:
                results.append(Result(OK, "certificate", f"{cert} names {public.hostname} and "
                                                          f"*.{domain}"))  # fmt: skip
    if settings["hub"]["public_url"]:
        port = public.port or (443 if public.scheme == "https" else 80)
        where = f"{public.hostname}:{port}"
        if public.scheme != "https":
            results.append(Result(WARN, "front certificate", f"{where} is plain HTTP",
                                  "serve [hub] public_url over HTTPS"))  # fmt: skip
        else:
            try:
                for host in wanted:
                    _served_names(public.hostname, port, settings["tls"]["ca_cert"], host)
                results.append(Result(OK, "front certificate", f"{where} serves a certificate "
                                      f"for {public.hostname} and *.{domain}"))  # fmt: skip
            except (OSError, ssl.SSLError, ssl.CertificateError) as e:
                results.append(Result(FAIL, "front certificate", f"{where}: {e}",
                                      f"serve a certificate for {public.hostname} and "
                                      f"*.{domain}, from a CA this host trusts"))  # fmt: skip
    return results


def mail_part(settings):
    smarthost = settings["mail"]["smarthost"]
    host, _, port = (smarthost or "localhost").partition(":")
    where = f"{host}:{port or 25}"
    try:
        with smtplib.SMTP(host, int(port or 25), timeout=TIMEOUT) as smtp:
            code, _ = smtp.ehlo()
            if code != 250:
                raise smtplib.SMTPException(f"EHLO answered {code}")
    except (OSError, smtplib.SMTPException) as e:
        return Result(WARN, "mail", f"{where}: {e}",
                      "run a mail relay there ([mail] smarthost): without it no notice is "
                      "mailed")  # fmt: skip
    return Result(OK, "mail", f"{where} answers SMTP")


# -- the test job ----------------------------------------------------------


class Listener:
    """A stand-in for the hub's API while the hub is not running: it accepts
    connections on the API's address and port, so a node's try proves the
    network lets it through. None when the port is in use (the hub runs)."""

    def __init__(self, host, port):
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(16)
        self.sock.settimeout(0.5)
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
                conn.close()
            except OSError:
                continue

    def close(self):
        self.stopped = True
        self.thread.join(2)
        self.sock.close()


def hub_api_address(settings):
    listen = site_settings.hub_api_ip(settings)
    reach = settings["hub"]["connect_ip"] or listen
    return listen, reach, settings["hub"]["api_port"]


def hub_sees(settings, job_id):
    """Whether the hub's account sees ``job_id`` as the hub sees jobs (its
    own process, as that account: ``python -m portal.check --hub-sees``)."""
    done = as_hub(settings, sys.executable, "-m", "portal.check", "--hub-sees", job_id)
    return done.returncode == 0, (done.stdout + done.stderr).strip()[-300:]


def _hub_sees_main(job_id):
    """As the hub's account: exit 0 when the hub's query (the shared poll's
    squeue, read as [slurm] private_data says: through portal-slurm-read
    where Slurm's PrivateData hides jobs) lists ``job_id``, a test job."""
    settings = site_settings.load()
    slurm.use_bin_dir(settings["slurm"]["bin_dir"])
    slurm.use_private_data(settings["slurm"]["private_data"])
    try:
        seen = asyncio.run(slurm.queue(settings["slurm"]["job_name"] + JOB_SUFFIX, TIMEOUT))
    except SlurmError as e:
        print(f"squeue: {e}")
        return 2
    print("listed" if job_id in seen else "not listed")
    return 0 if job_id in seen else 1


def job_parts(settings, broken=()):
    """A test job on each profile's partition but the ``broken`` ones (a
    FAIL above already: a job there would fail or wait for nothing)."""
    user = settings["check"]["user"]
    if not user:
        fix = "set [check] user to an account of an allowed group, kept for this"
        return [Result(WARN, "test jobs", "[check] user is not set: no test job ran", fix)]
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return [Result(FAIL, "test jobs", f"[check] user {user} does not resolve",
                       "set [check] user to an account of an allowed group")]  # fmt: skip
    partitions = {}  # partition -> the first profile on it: its smallest session's slice
    for profile in profiles_of(settings):
        if profile.enabled and profile.partition not in broken:
            partitions.setdefault(profile.partition, profile)
    listen, reach, port = hub_api_address(settings)
    listener = None
    try:
        listener = Listener(listen, port)
    except OSError:
        pass  # the hub listens there: the job reaches the hub itself
    try:
        return [_test_job(settings, user, entry, profile, reach, port)
                for _, profile in sorted(partitions.items())]  # fmt: skip
    finally:
        if listener:
            listener.close()


def _envs(settings):
    envs = settings["envs"]
    folders = {"jupyter": f"{envs['jupyter']}/bin/python",
               "launcher": f"{envs['jupyter']}/bin/portal-session"}  # fmt: skip
    for name in envs["frameworks"]:
        folders[name] = f"{envs['prefix']}/envs/{name}/bin/python"
    return folders


def _as_user(entry, argv, **kwargs):
    who = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups",
           "--inh-caps=-all", "--"]  # fmt: skip
    env = {"PATH": slurm.job_path(), "LANG": "C.UTF-8", "HOME": entry.pw_dir,
           "USER": entry.pw_name, "LOGNAME": entry.pw_name}  # fmt: skip
    return _run([*who, *argv], env=env, cwd="/", **kwargs)


def _test_job(settings, user, entry, profile, hub_host, hub_port):
    """The smallest session of ``profile`` (one GPU, or none where it has
    none), with a one-minute limit, as ``user``."""
    partition = profile.partition
    label = f"test job on {partition}"
    out_dir = Path(entry.pw_dir) / ".portal" / "check"
    done = _as_user(entry, ["mkdir", "-p", str(out_dir)])
    if done.returncode:
        return Result(FAIL, label, f"{user} cannot write {out_dir}: {_said(done)[0]}",
                      "give the check user a home on the shared file system")  # fmt: skip
    envs = _envs(settings)
    script = job_script(envs, hub_host, hub_port, envs["jupyter"])
    job_name = settings["slurm"]["job_name"] + JOB_SUFFIX
    job_slice = profile.make_slice(min(1, profile.max_gpus))
    argv = slurm.sbatch_argv(job_slice, job_name=job_name, chdir="/",
                             output=str(out_dir / "%j.out"), time_limit="1")  # fmt: skip
    # held until the hub's account has looked for it: a job of a second
    # could end before, and squeue lists only queued and running jobs
    argv.insert(1, "--hold")
    done = _as_user(entry, argv, input=script)
    if done.returncode:
        return Result(FAIL, label, f"sbatch as {user}: {_said(done)[0]}",
                      f"let {user} run profile {profile.name}'s smallest session on "
                      f"{partition} (its association, QOS and the partition's limits)")  # fmt: skip
    job_id = done.stdout.strip().split(";")[0]
    if not re.fullmatch(r"[1-9][0-9]{0,9}", job_id, re.ASCII):
        # the user's sbatch said it: root releases and cancels this id
        return Result(FAIL, label, f"sbatch as {user} gave no job id: {job_id[:40]!r}",
                      "see the sbatch of [slurm] bin_dir")  # fmt: skip
    seen, why = hub_sees(settings, job_id)
    try:
        asyncio.run(slurm.release_as_root([job_id], TIMEOUT))
    except SlurmError as e:
        asyncio.run(slurm.cancel_as_root([job_id], TIMEOUT))
        return Result(FAIL, label, f"scontrol release {job_id}: {str(e)[:200]}",
                      "see slurmctld above")  # fmt: skip
    wait = settings["check"]["wait_seconds"]
    state = _wait_ended(job_id, wait)
    if state:
        asyncio.run(slurm.cancel_as_root([job_id], TIMEOUT))
        return Result(WARN, label, f"job {job_id} still {state} after {wait} s",
                      "run portal check when the partition has a free node")  # fmt: skip
    if not seen:
        config = _run([slurm.command("scontrol"), "show", "config"]).stdout
        hidden = ",".join(sorted(private_data(config))) or "none"
        return Result(FAIL, label, f"the hub's account ({settings['hub']['user']}) does not see "
                      f"{user}'s job {job_id} ({why}; PrivateData={hidden})",
                      '[slurm] private_data = "auto" and portal setup: the hub then reads its '
                      "jobs through portal-slurm-read where PrivateData hides them")  # fmt: skip
    output = str(out_dir / f"{job_id}.out")
    # read and removed as the user: the folder is the user's, and root would
    # follow a link there (to /etc/shadow), or wait on a FIFO for ever
    done = _as_user(entry, ["head", "-c", str(OUTPUT_MOST), "--", output], errors="replace")
    _as_user(entry, ["rm", "-f", "--", output])
    if done.returncode:
        return Result(FAIL, label, f"job {job_id} left no output ({_said(done)[0]})",
                      "the nodes must share the users' homes")  # fmt: skip
    seen = parse_job_output(done.stdout)
    node = seen.get("node", "?")
    missing = [f"{k[4:]} ({v})" for k, v in seen.items() if k.startswith("env ") and v != "ok"]
    if missing or len([k for k in seen if k.startswith("env ")]) < len(envs):
        return Result(FAIL, label, f"on {node}: not found: {', '.join(missing) or '?'}",
                      f"mount the environments ([envs] prefix {settings['envs']['prefix']}) on "
                      f"every node of {partition}")  # fmt: skip
    if seen.get("hub") != "ok":
        return Result(FAIL, label, f"on {node}: the hub's API {hub_host}:{hub_port} "
                      f"{seen.get('hub', 'untested')}",
                      "let the nodes reach the login node on [hub] api_port (firewall), and "
                      "set [hub] connect_ip to an address they reach")  # fmt: skip
    return Result(OK, label, f"job {job_id} on {node}: environments and launcher found, hub's "
                             f"API reached; the hub's account sees the job")  # fmt: skip


def _wait_ended(job_id, wait):
    """ "" once ``job_id`` has ended; else its state when ``wait`` seconds pass."""
    deadline = time.monotonic() + wait
    state = "PENDING"
    while time.monotonic() < deadline:
        done = _run([slurm.command("squeue"), "-h", "-j", job_id, "-o", "%T"])
        state = done.stdout.strip()
        if done.returncode == 0 and not state:
            return ""
        if done.returncode and "Invalid job id" in done.stderr:
            return ""
        time.sleep(1)
    return state or "PENDING"


# ---------------------------------------------------------------- the command


def checks(settings):
    """Every check's results, in order, as each is done."""
    slurm.use_bin_dir(settings["slurm"]["bin_dir"])
    yield from prerequisites(settings)
    yield from slurm_parts(settings)
    broken = set()
    for result in partition_parts(settings):
        if result.mark == FAIL and result.name.startswith("partition "):
            broken.add(result.name.removeprefix("partition "))
        yield result
    groups = group_members(settings)
    yield from group_parts(settings, groups)
    yield from association_parts(settings, groups)
    yield visibility_part(settings)
    try:
        yield catalog_part(asyncio.run(slurm.private_kinds(TIMEOUT)))
    except SlurmError:
        pass  # visibility_part said why
    yield from sudo_parts(settings, groups, settings["check"]["user"])
    yield ldap_part(settings)
    yield database_part(settings)
    yield from certificate_part(settings)
    yield mail_part(settings)
    yield from job_parts(settings, broken)


def run(settings, out=print):
    """Print each check's line as it is done; 1 when any failed, else 0."""
    failed = 0
    for result in checks(settings):
        out(result.line())
        failed += result.mark == FAIL
    out(f"portal check: {failed} failed" if failed else "portal check: every check passed")
    return 1 if failed else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--hub-sees"] and len(argv) == 2 and argv[1].isdigit():
        return _hub_sees_main(argv[1])
    return run(site_settings.load(), out=lambda line: print(line, flush=True))


if __name__ == "__main__":
    sys.exit(main())
