"""A cluster the portal did not build (issue 36): site1, on a network of its
own, different from the demo in every name, from real parts.

- The network: the host's bridge ``site1``, 10.201.0.0/24 (the host is .1);
  nothing of the demo's (its bridge, munge key, slapd, slurmctld, ports) is
  used or touched.
- The machines, each a ``systemd-nspawn --boot`` machine with its own /etc
  (tests/site/machine.py), from two cached roots (CACHE, kept across
  ``make purge``, keyed by their packages): the login node ``hpc-login``
  (.10), which is also the site's head (slurmctld, slurmdbd with MariaDB,
  the directory, PostgreSQL, nginx: cheaper than a machine of its own), and
  the compute nodes ``a100-n1`` (.21) and ``v100-n1`` (.22), each running
  slurmd. /home is a host folder (HOME) bound into all three; the host's
  /opt/portal (the environments, built by the demo's ``make up``; they are
  not relocatable) is bound read-only at the site's [envs] prefix, the same.
- Slurm: Debian's 22.05, its commands diverted (dpkg-divert --rename) to
  /opt/slurm/bin alone; ClusterName=site1; partitions ``a100`` and ``v100``
  with typed GRES (``gpu:a100:2``, ``gpu:v100:2``: File= character devices
  made with mknod, major 195 as NVIDIA's; ``config_overrides``) and ``cpu``
  over both nodes; accounts ``lab-vision`` and ``lab-nlp`` with fairshare
  and QOS ``vision-normal`` and ``nlp-normal`` (and ``hpc-ops`` for the
  service accounts), no account named ``portal``; ``PrivateData=jobs,usage``;
  ``AccountingStorageEnforce=associations,limits,qos``; slurmdbd with
  ``Parameters=PreserveCaseUser`` (J.Smith stays J.Smith).
- Slurm's plugins inside these machines (the spike's finding): the host's
  cgroups are v1 (with a named systemd hierarchy), and systemd-nspawn gives
  a machine none of their controllers writable, so proctrack/cgroup,
  task/cgroup and job_container/tmpfs do not run there: PLUGINS lists what
  does (proctrack/linuxproc, task/affinity, select/cons_tres,
  jobacct_gather/linux). A job is therefore not confined to its GPUs here:
  the demo's netns nodes test that.
- The directory laid out as FreeIPA lays it out: slapd with
  ``cn=users,cn=accounts,dc=site1,dc=test`` and ``cn=groups,cn=accounts``,
  ``groupOfNames`` groups (member DNs; the memberof overlay keeps each
  user's memberOf), uids and gids above 1,000,000,000, the logins ``mlee``
  and ``J.Smith``, LDAPS on 636 only (and ldapi, a local socket, for its own
  setup) with a certificate of the site's CA for ``ipa.site1.test``, no
  anonymous bind or search, service accounts for sssd and for the portal's
  look-ups under ``cn=sysaccounts,cn=etc``. OpenLDAP's nis schema makes
  posixGroup structural, as groupOfNames is: a group's gidNumber comes with
  extensibleObject (FreeIPA's rfc2307bis makes posixGroup auxiliary).
- Every machine resolves the users through sssd over LDAPS (rfc2307bis,
  groupOfNames), its CA at /etc/ipa/ca.crt as FreeIPA clients keep it.

    with ForeignSite() as site:          # boots and configures everything
        site.login.run(["/opt/slurm/bin/sinfo"])
    # machines stopped, bridge and host folders removed

``python -m tests.site.foreign up [--portal] | down`` does the same by hand
(as root); ``--portal`` also installs the portal (``install_portal``), which
the site then serves on https://jupyter.site1.test/ (the name resolves to
10.201.0.10 inside the machines only).
"""

import concurrent.futures
import os
import shutil
import sys
import time
from pathlib import Path

import requests

from tests.site.install import (
    CHP_ON_HOST,
    DIST,
    NGINX_TLS,
    Resolved,
    install_chp,
    install_nginx_site,
    issue_certificate,
    journal,
    make_ca,
    pip_install,
    wait_answering,
)
from tests.site.machine import (
    PACKAGES,
    STATE,
    Machine,
    MachineError,
    ensure_bridge,
    remove_bridge,
)

SITE = "site1"
BRIDGE = "site1"
NETWORK = "10.201.0"
DOMAIN = "site1.test"
BASE_DN = "dc=site1,dc=test"
USERS_DN = f"cn=users,cn=accounts,{BASE_DN}"
GROUPS_DN = f"cn=groups,cn=accounts,{BASE_DN}"
SYSACCOUNTS_DN = f"cn=sysaccounts,cn=etc,{BASE_DN}"
LDAP_HOST = f"ipa.{DOMAIN}"
PUBLIC = f"jupyter.{DOMAIN}"  # the portal's public name (nginx's), *.PUBLIC the users'
SLURM_BIN = "/opt/slurm/bin"
IPA_CA = "/etc/ipa/ca.crt"
ENVS = "/opt/portal"
HERE = STATE.parent / SITE  # the host's folders of the site (its homes, its CA)
HOME = HERE / "home"

LOGIN = ("hpc-login", 10)
# name, host number, partition, GPU type
NODES = (("a100-n1", 21, "a100", "a100"), ("v100-n1", 22, "v100", "v100"))
NODE_CPUS, NODE_MEM_MB, NODE_GPUS = 8, 16000, 2

HEAD_PACKAGES = (*PACKAGES, "slurmctld", "slurmdbd", "mariadb-server", "slapd", "postgresql",
                 "nodejs", "exim4-daemon-light")  # fmt: skip
NODE_PACKAGES = (*PACKAGES, "slurmd", "nftables")  # a node's own firewall

PLUGINS = {
    "ProctrackType": "proctrack/linuxproc",
    "TaskPlugin": "task/affinity",
    "SelectType": "select/cons_tres",
    "JobAcctGatherType": "jobacct_gather/linux",
}

UID_BASE = 1_234_400_000  # FreeIPA draws a random range of 200,000 above 1e9


class User:
    def __init__(self, name, number, cn, account, groups):
        self.name, self.uid, self.cn = name, UID_BASE + number, cn
        self.account, self.groups = account, groups
        self.password = f"{name.lower().replace('.', '-')}-Pw-{number}"
        self.dn = f"uid={name},{USERS_DN}"
        self.home = f"/home/{name}"


USERS = {
    u.name: u
    for u in (
        User("mlee", 1, "Min Lee", "lab-vision", ("ml-users",)),
        User("J.Smith", 2, "Jane Smith", "lab-nlp", ("ml-users",)),
        User("rkhan", 3, "Rafi Khan", "lab-nlp", ()),  # in the directory, not a portal user
        User("hpccheck", 4, "Check User", "hpc-ops", ("ml-users", "hpc-admins")),
    )
}
GROUPS = {"ml-users": UID_BASE + 100, "hpc-admins": UID_BASE + 101}
# Service accounts of the directory: sssd's, and the portal's look-ups.
SERVICE_ACCOUNTS = {"sssd": "sssd-Bind-Pw-1", "svc-jupyter": "svc-Jupyter-Pw-2"}
# The portal's system accounts, made by the site's administrator before the
# install (ensure_accounts then keeps them): none of the demo's names.
HUB_USER, PROXY_USER = "dsp-hub", "dsp-proxy"
SLURM_ACCOUNTS = {  # account: (fairshare, QOS, its GPUs per user)
    "lab-vision": (60, "vision-normal", 4),
    "lab-nlp": (40, "nlp-normal", 4),
    "hpc-ops": (1, "ops-normal", 1),
}
DB_PASSWORD = "pg-Site1-Pw"
# The portal on the login node: its venv, its ports (none of the demo's nor
# the other tests'), its Slurm job name, its settings and look-up password.
VENV = "/opt/dsportal"
PORT = 8200
JOB_NAME = "jupyter-site1"
SITE_TOML = "/etc/portal/portal.toml"
LOOKUP_PASSWORD = "/etc/portal/ldap-lookup.password"
PROFILES = {"vision-a100": "a100", "nlp-v100": "v100"}  # profile: its partition
CHECK_USER = "hpccheck"  # portal check's test jobs run as this account
MARIADB_PASSWORD = "slurmdbd-Site1-Pw"


def address(number):
    return f"{NETWORK}.{number}"


# ---------------------------------------------------------------- pure


def hosts_file(name):
    """The machine's /etc/hosts: the site's machines and the names the login
    node serves (the directory, the portal).

    >>> print(hosts_file("a100-n1"), end="")  # doctest: +ELLIPSIS
    127.0.0.1 localhost
    127.0.1.1 a100-n1.site1.test a100-n1
    10.201.0.10 hpc-login.site1.test hpc-login ipa.site1.test jupyter.site1.test
    10.201.0.21 a100-n1.site1.test a100-n1
    ...
    """
    lines = ["127.0.0.1 localhost", f"127.0.1.1 {name}.{DOMAIN} {name}"]
    login, number = LOGIN
    lines.append(f"{address(number)} {login}.{DOMAIN} {login} {LDAP_HOST} {PUBLIC}")
    lines += [f"{address(n)} {node}.{DOMAIN} {node}" for node, n, _, _ in NODES]
    return "\n".join(lines) + "\n"


def slurm_conf(plugins=PLUGINS):
    """site1's slurm.conf.

    >>> conf = slurm_conf()
    >>> "PrivateData=jobs,usage" in conf and "ClusterName=site1" in conf
    True
    >>> [line.split()[0] for line in conf.splitlines() if line.startswith("PartitionName")]
    ['PartitionName=a100', 'PartitionName=v100', 'PartitionName=cpu']
    """
    login, number = LOGIN
    lines = [
        "# site1's Slurm (tests/site/foreign.py): not the portal's",
        "ClusterName=site1",
        f"SlurmctldHost={login}({address(number)})",
        "SlurmUser=slurm",
        "AuthType=auth/munge",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "MailProg=/bin/true",
        *(f"{key}={value}" for key, value in plugins.items()),
        "SelectTypeParameters=CR_Core_Memory",
        "SlurmdParameters=config_overrides",
        "GresTypes=gpu",
        "DefMemPerCPU=1000",
        "EnforcePartLimits=ALL",
        "ReturnToService=2",
        "MessageTimeout=10",
        "KillWait=5",
        "MinJobAge=300",
        "InactiveLimit=0",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1",
        "PriorityType=priority/multifactor",
        "PriorityWeightFairshare=10000",
        "PrivateData=jobs,usage",
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={login}",
        "AccountingStorageEnforce=associations,limits,qos",
        "AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:v100",
        "JobCompType=jobcomp/none",
    ]
    for node, n, _, gpu_type in NODES:
        lines.append(
            f"NodeName={node} NodeAddr={address(n)} CPUs={NODE_CPUS} Sockets=1 "
            f"CoresPerSocket={NODE_CPUS} ThreadsPerCore=1 RealMemory={NODE_MEM_MB} "
            f"Gres=gpu:{gpu_type}:{NODE_GPUS} State=UNKNOWN"
        )
    for node, _, partition, _ in NODES:
        lines.append(f"PartitionName={partition} Nodes={node} MaxTime=1-00:00:00 State=UP")
    every = ",".join(node for node, *_ in NODES)
    lines.append(f"PartitionName=cpu Nodes={every} Default=YES MaxTime=1-00:00:00 State=UP")
    return "\n".join(lines) + "\n"


def gres_conf():
    """
    >>> print(gres_conf(), end="")
    NodeName=a100-n1 Name=gpu Type=a100 File=/dev/nvidia[0-1]
    NodeName=v100-n1 Name=gpu Type=v100 File=/dev/nvidia[0-1]
    """
    return "".join(
        f"NodeName={node} Name=gpu Type={gpu_type} File=/dev/nvidia[0-{NODE_GPUS - 1}]\n"
        for node, _, _, gpu_type in NODES
    )


def slurmdbd_conf():
    login, _ = LOGIN
    return f"""# site1's slurmdbd (tests/site/foreign.py)
AuthType=auth/munge
DbdHost={login}
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass={MARIADB_PASSWORD}
StorageLoc=site1_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
Parameters=PreserveCaseUser
"""


def sssd_conf():
    """sssd.conf of every machine: the directory as FreeIPA lays it out,
    over LDAPS, bound as sssd's service account.

    >>> conf = sssd_conf()
    >>> "ldap_uri = ldaps://ipa.site1.test" in conf and "ldap_schema = rfc2307bis" in conf
    True
    """
    return f"""# site1's sssd (tests/site/foreign.py): FreeIPA's layout, LDAPS
[sssd]
domains = {DOMAIN}

[domain/{DOMAIN}]
id_provider = ldap
auth_provider = ldap
ldap_uri = ldaps://{LDAP_HOST}
ldap_search_base = {BASE_DN}
ldap_user_search_base = {USERS_DN}
ldap_group_search_base = {GROUPS_DN}
ldap_schema = rfc2307bis
ldap_group_object_class = groupOfNames
ldap_group_member = member
ldap_default_bind_dn = uid=sssd,{SYSACCOUNTS_DN}
ldap_default_authtok_type = password
ldap_default_authtok = {SERVICE_ACCOUNTS["sssd"]}
ldap_tls_reqcert = demand
ldap_tls_cacert = {IPA_CA}
cache_credentials = false
enumerate = false
"""


def slapd_config():
    """slapd's cn=config (slapadd -n0): LDAPS with the site's certificate,
    no anonymous bind, every operation but a bind needs one; the memberof
    overlay; root over ldapi (its peer credentials) manages it all."""
    root = "gidNumber=0+uidNumber=0,cn=peercred,cn=external,cn=auth"
    schemas = "".join(
        f"include: file:///etc/ldap/schema/{name}.ldif\n"
        for name in ("core", "cosine", "nis", "inetorgperson")
    )
    return f"""dn: cn=config
objectClass: olcGlobal
cn: config
olcArgsFile: /var/run/slapd/slapd.args
olcPidFile: /var/run/slapd/slapd.pid
olcTLSCACertificateFile: /etc/ldap/tls/ca.crt
olcTLSCertificateFile: /etc/ldap/tls/{LDAP_HOST}.crt
olcTLSCertificateKeyFile: /etc/ldap/tls/{LDAP_HOST}.key
olcDisallows: bind_anon
olcRequires: authc

dn: cn=module{{0}},cn=config
objectClass: olcModuleList
cn: module{{0}}
olcModulePath: /usr/lib/ldap
olcModuleLoad: {{0}}back_mdb
olcModuleLoad: {{1}}memberof

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

{schemas}
dn: olcDatabase={{-1}}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {{-1}}frontend
olcAccess: {{0}}to * by dn.exact={root} manage by * break

dn: olcDatabase={{0}}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {{0}}config
olcAccess: {{0}}to * by dn.exact={root} manage by * none

dn: olcDatabase={{1}}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {{1}}mdb
olcDbDirectory: /var/lib/ldap
olcSuffix: {BASE_DN}
olcDbIndex: objectClass eq
olcDbIndex: uid,member,memberOf eq
olcRequires: authc
olcAccess: {{0}}to * by dn.exact={root} manage by * break
olcAccess: {{1}}to attrs=userPassword by self write by anonymous auth by * none
olcAccess: {{2}}to * by users read by * none

dn: olcOverlay={{0}}memberof,olcDatabase={{1}}mdb,cn=config
objectClass: olcOverlayConfig
objectClass: olcMemberOf
olcOverlay: {{0}}memberof
olcMemberOfRefInt: TRUE
olcMemberOfGroupOC: groupOfNames
olcMemberOfMemberAD: member
olcMemberOfMemberOfAD: memberOf
"""


def directory_ldif(users=USERS, groups=GROUPS):
    """The entries: FreeIPA's containers, the users (each with a private
    group, as FreeIPA makes), the groups (groupOfNames with member DNs) and
    the service accounts."""
    entries = [
        f"dn: {BASE_DN}\nobjectClass: domain\ndc: site1\n",
        f"dn: cn=accounts,{BASE_DN}\nobjectClass: organizationalRole\ncn: accounts\n",
        f"dn: {USERS_DN}\nobjectClass: organizationalRole\ncn: users\n",
        f"dn: {GROUPS_DN}\nobjectClass: organizationalRole\ncn: groups\n",
        f"dn: cn=etc,{BASE_DN}\nobjectClass: organizationalRole\ncn: etc\n",
        f"dn: {SYSACCOUNTS_DN}\nobjectClass: organizationalRole\ncn: sysaccounts\n",
    ]
    for name, password in SERVICE_ACCOUNTS.items():
        entries.append(
            f"dn: uid={name},{SYSACCOUNTS_DN}\nobjectClass: account\n"
            f"objectClass: simpleSecurityObject\nuid: {name}\nuserPassword: {password}\n"
        )
    for u in users.values():
        first, _, last = u.cn.partition(" ")
        entries.append(
            f"dn: {u.dn}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
            f"uid: {u.name}\ncn: {u.cn}\ngivenName: {first}\nsn: {last}\n"
            f"mail: {u.name.lower()}@{DOMAIN}\nuidNumber: {u.uid}\ngidNumber: {u.uid}\n"
            f"homeDirectory: {u.home}\nloginShell: /bin/bash\nuserPassword: {u.password}\n"
        )
        entries.append(group_entry(u.name, u.uid, [u.dn]))
    for group, gid in groups.items():
        members = [u.dn for u in users.values() if group in u.groups]
        entries.append(group_entry(group, gid, members))
    return "\n".join(entries)


def group_entry(name, gid, member_dns):
    members = "".join(f"member: {dn}\n" for dn in member_dns)
    return (
        f"dn: cn={name},{GROUPS_DN}\nobjectClass: groupOfNames\nobjectClass: extensibleObject\n"
        f"cn: {name}\ngidNumber: {gid}\n{members}"
    )


def sacctmgr_script(users=USERS):
    """sacctmgr's commands (-i), one a line, for QOS, accounts and users.

    >>> script = sacctmgr_script()
    >>> "add user J.Smith Account=lab-nlp" in script, " portal" in script
    (True, False)
    """
    lines = []
    for account, (fairshare, qos, gpus) in SLURM_ACCOUNTS.items():
        lines.append(f"add qos {qos} MaxTRESPerUser=gres/gpu={gpus} MaxWall=1-00:00:00")
        lines.append(f"add account {account} Fairshare={fairshare} QOS={qos} DefaultQOS={qos}")
    for u in users.values():
        lines.append(f"add user {u.name} Account={u.account}")
    lines.append(f"add user {HUB_USER} Account=hpc-ops")
    return "\n".join(lines) + "\n"


def portal_toml():
    """The site's /etc/portal/portal.toml, as its administrator writes it:
    what differs from the package's defaults. No CPU profile: a profile's
    max_gpus is 1 at least (portal/core/profiles.py), so the ``cpu``
    partition is offered to no one."""
    login, number = LOGIN
    profiles = "".join(
        f'\n[[profiles]]\nname = "{name}"\ndisplay_name = "{partition.upper()}"\n'
        f'environment = "pytorch"\npartition = "{partition}"\nmax_gpus = {NODE_GPUS}\n'
        for name, partition in PROFILES.items()
    )
    groups = ", ".join(f'"cn={g},{GROUPS_DN}"' for g in GROUPS)
    return f"""# site1's settings of the portal (tests/site/foreign.py)
[cluster]
embedded = false

[hub]
user = "{HUB_USER}"
proxy_user = "{PROXY_USER}"
uid_min = 1000000000
uid_max = 1999999999
# configurable-http-proxy on loopback; the site's nginx terminates TLS on 443
bind_url = "http://127.0.0.1:{PORT}"
public_url = "https://{PUBLIC}/"
domain = "{PUBLIC}"
api_ip = "{address(number)}"
api_port = {PORT + 81}
connect_ip = "{login}"
proxy_api_port = {PORT + 1}
state_dir = "/var/lib/dsportal/hub"
db_url = "postgresql://dsphub:{DB_PASSWORD}@127.0.0.1/jupyterhub"

[portal]
service_port = {PORT + 2}
db_url = "postgresql://dsphub:{DB_PASSWORD}@127.0.0.1/dsportal"

[tls]
ca_cert = "{IPA_CA}"
cert = "{NGINX_TLS}/{PUBLIC}.crt"
key = "{NGINX_TLS}/{PUBLIC}.key"

[ldap]
server_address = "{LDAP_HOST}"
server_port = 636
tls_strategy = "on_connect"
ca_cert = "{IPA_CA}"
base_dn = "{BASE_DN}"
bind_dn_template = ""
user_search_base = "{USERS_DN}"
lookup_bind_dn = "uid=svc-jupyter,{SYSACCOUNTS_DN}"
lookup_password_file = "{LOOKUP_PASSWORD}"
group_membership = "memberOf"
allowed_groups = [{groups}]
admin_groups = ["cn=hpc-admins,{GROUPS_DN}"]

[check]
user = "{CHECK_USER}"

[slurm]
bin_dir = "{SLURM_BIN}"
partition = "a100"
job_name = "{JOB_NAME}"
cores_per_gpu = 2
mem_per_gpu_gb = 4
default_hours = 2
max_hours = 12
poll_interval = 2.0
cluster_interval = 2.0

[envs]
prefix = "{ENVS}"

[metrics]
prometheus_listen = ""

[containers]
build = []
{profiles}"""


# ---------------------------------------------------------------- the site


def why_not_here():
    from tests.site.machine import why_not_here as machine_reason

    reason = machine_reason()
    if reason:
        return reason
    for path in (Path(ENVS, "envs", "jupyter"), CHP_ON_HOST):
        if not path.is_dir():
            return f"no {path}: the environments and the proxy come from the demo's make up"
    return ""


class ForeignSite:
    """site1: its bridge, its machines (``login``, ``nodes``), its CA (the
    host's copy at ``ca_file``). ``extra_ro_binds``: more host folders the
    login node sees read-only (the wheels for pip)."""

    def __init__(self, extra_ro_binds=(), log=print):
        self.log = log
        binds = (f"{HOME}:/home",)
        login, number = LOGIN
        self.login = Machine(login, address(number), bridge=BRIDGE, binds=binds,
                             ro_binds=(ENVS, str(DIST), *extra_ro_binds), packages=HEAD_PACKAGES,
                             log=log)  # fmt: skip
        self.nodes = {
            node: Machine(
                node,
                address(n),
                bridge=BRIDGE,
                binds=binds,
                ro_binds=(ENVS,),
                packages=NODE_PACKAGES,
                log=log,
            )  # fmt: skip
            for node, n, _, _ in NODES
        }
        self.partitions = {partition: node for node, _, partition, _ in NODES}
        self.ca_folder = HERE / "ca"
        self.ca_file = str(self.ca_folder / "ca.crt")
        self.users = USERS
        self.figures = {}

    @property
    def machines(self):
        return [self.login, *self.nodes.values()]

    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()

    # ------------------------------------------------ up and down

    def up(self):
        """``boot``, then ``configure``."""
        began = time.monotonic()
        self.boot()
        self.configure()
        self.figures["site up"] = f"{time.monotonic() - began:.0f} s"
        self.log(f"site1 up in {time.monotonic() - began:.0f} s")

    def boot(self):
        """The bridge, the host's folders and the machines, booted as their
        roots made them (what an interrupted run left removed first)."""
        began = time.monotonic()
        self.down()
        ensure_bridge(BRIDGE, address(1))
        self.make_host_folders()
        DIST.mkdir(mode=0o755, parents=True, exist_ok=True)  # seen by the login node
        with concurrent.futures.ThreadPoolExecutor(len(self.machines)) as pool:
            list(pool.map(lambda m: m.boot(), self.machines))
        self.figures["boot"] = f"{time.monotonic() - began:.0f} s"

    def configure(self):
        """Each machine set up as site1's administrator would: its names,
        Slurm, munge, the CA, sssd; the directory, Slurm's daemons and
        accounts, PostgreSQL."""
        began = time.monotonic()
        key = os.urandom(1024)  # site1's own munge key
        for machine in self.machines:
            self.configure_common(machine, key)
        self.start_directory()
        for machine in self.machines:
            machine.run(["systemctl", "restart", "munge", "sssd"])
        for machine in self.machines:
            for user in ("mlee", "J.Smith"):
                machine.wait_for(f"{user} resolving through sssd", ["id", user], timeout=60)
        self.start_slurm()
        self.start_postgresql()
        self.figures["configure"] = f"{time.monotonic() - began:.0f} s"

    def down(self):
        for machine in self.machines:
            try:
                machine.remove()
            except (MachineError, OSError) as e:
                self.log(f"removing {machine.name}: {e}")
        remove_bridge(BRIDGE)
        shutil.rmtree(HERE, ignore_errors=True)

    def make_host_folders(self):
        HERE.mkdir(mode=0o755, parents=True, exist_ok=True)
        HOME.mkdir(mode=0o755, exist_ok=True)
        for u in USERS.values():
            home = HOME / u.name
            home.mkdir(mode=0o700, exist_ok=True)
            os.chown(home, u.uid, u.uid)
        self.ca_folder.mkdir(mode=0o700, exist_ok=True)
        make_ca(self.ca_folder, PUBLIC, subject="/O=SITE1.TEST/CN=Certificate Authority")
        issue_certificate(self.ca_folder, LDAP_HOST, wildcard=False)
        os.chmod(self.ca_folder / "ca.crt", 0o644)

    def ca_text(self, name="ca"):
        return (self.ca_folder / f"{name}.crt").read_text()

    # ------------------------------------------------ every machine

    def configure_common(self, machine, munge_key):
        machine.write("/etc/hosts", hosts_file(machine.name))
        # Slurm's commands in /opt/slurm/bin alone, as dpkg knows them
        machine.sh(
            f"mkdir -p {SLURM_BIN}\n"
            "for f in $(dpkg -L slurm-client | grep '^/usr/bin/'); do\n"
            '  [ -e "$f" ] || continue\n'
            f'  dpkg-divert --quiet --local --rename --divert "{SLURM_BIN}/${{f##*/}}" --add "$f"\n'
            "done"
        )
        machine.write("/etc/slurm/slurm.conf", slurm_conf())
        machine.write("/etc/slurm/gres.conf", gres_conf())
        machine.write("/etc/munge/munge.key", munge_key, mode="0400", owner="munge:munge")
        machine.run(["mkdir", "-p", "/etc/ipa", "/etc/ldap"])
        machine.write(IPA_CA, self.ca_text())
        machine.write("/usr/local/share/ca-certificates/site1-ca.crt", self.ca_text())
        machine.run(["update-ca-certificates"])
        machine.write("/etc/sssd/sssd.conf", sssd_conf(), mode="0600")
        # the LDAP tools' defaults, as ipa-client-install writes them
        machine.write("/etc/ldap/ldap.conf", f"URI ldaps://{LDAP_HOST}\nBASE {BASE_DN}\n"
                      f"TLS_CACERT {IPA_CA}\n")  # fmt: skip

    # ------------------------------------------------ the login node

    def start_directory(self):
        login = self.login
        login.run(["mkdir", "-p", "/etc/ldap/tls"])
        login.write("/etc/ldap/tls/ca.crt", self.ca_text())
        login.write(f"/etc/ldap/tls/{LDAP_HOST}.crt", self.ca_text(LDAP_HOST))
        login.write(f"/etc/ldap/tls/{LDAP_HOST}.key",
                    (self.ca_folder / f"{LDAP_HOST}.key").read_text(), mode="0600",
                    owner="openldap:openldap")  # fmt: skip
        login.write("/root/site1-config.ldif", slapd_config(), mode="0600")
        login.write("/root/site1-data.ldif", directory_ldif(), mode="0600")
        login.sh(
            "systemctl stop slapd\n"
            "rm -rf /etc/ldap/slapd.d/* /var/lib/ldap/*\n"
            "slapadd -q -n0 -F /etc/ldap/slapd.d -l /root/site1-config.ldif\n"
            "chown -R openldap:openldap /etc/ldap/slapd.d /var/lib/ldap\n"
            "sed -i 's|^SLAPD_SERVICES=.*|SLAPD_SERVICES=\"ldaps:/// ldapi:///\"|' "
            "/etc/default/slapd\n"
            "systemctl start slapd"
        )
        login.wait_for("slapd answering on ldapi",
                       ["ldapsearch", "-Q", "-Y", "EXTERNAL", "-H", "ldapi:///", "-b",
                        "cn=config", "-s", "base", "dn"])  # fmt: skip
        login.run(["ldapadd", "-Q", "-Y", "EXTERNAL", "-H", "ldapi:///", "-f",
                   "/root/site1-data.ldif"])  # fmt: skip
        login.run(["rm", "-f", "/root/site1-config.ldif", "/root/site1-data.ldif"])

    def start_slurm(self):
        login = self.login
        # the portal's service accounts, which the site's administrator makes
        # before the install, and whose association Slurm then knows by uid
        for user in (HUB_USER, PROXY_USER):
            login.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                       "/nonexistent", "--shell", "/usr/sbin/nologin", user])  # fmt: skip
        sql = (
            f"CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '{MARIADB_PASSWORD}';\n"
            "GRANT ALL ON site1_acct_db.* TO 'slurm'@'localhost';\n"
        )
        login.wait_for("MariaDB answering", ["mysqladmin", "ping"], timeout=60)
        login.run(["mysql"], input=sql)
        login.write("/etc/slurm/slurmdbd.conf", slurmdbd_conf(), mode="0600", owner="slurm:slurm")
        login.run(["systemctl", "restart", "slurmdbd"])
        sacctmgr = f"{SLURM_BIN}/sacctmgr"
        login.wait_for("slurmdbd answering", [sacctmgr, "-n", "show", "cluster"], timeout=60)
        login.run([sacctmgr, "-i", "add", "cluster", SITE])
        login.run(["systemctl", "restart", "slurmctld"])
        login.wait_for("slurmctld answering", [f"{SLURM_BIN}/scontrol", "ping"], timeout=60)
        for line in sacctmgr_script().splitlines():
            login.run([sacctmgr, "-i", *line.split()])
        for machine in self.nodes.values():
            last = NODE_GPUS - 1
            machine.sh(f"for i in $(seq 0 {last}); do mknod -m 0666 /dev/nvidia$i c 195 $i; done")
            machine.run(["systemctl", "restart", "slurmd"])
        login.run([f"{SLURM_BIN}/scontrol", "reconfigure"])
        every = ",".join(self.nodes)
        deadline = time.monotonic() + 60
        while True:
            states = self.slurm("sinfo", "-h", "-N", "-n", every, "-o", "%N %t").stdout
            if states.split() and all(line.split()[1] == "idle" for line in states.splitlines()):
                break
            if time.monotonic() > deadline:
                raise MachineError(f"site1's nodes not idle after 60 s: {states}")
            time.sleep(1)

    def start_postgresql(self):
        sql = (
            f"CREATE ROLE dsphub LOGIN PASSWORD '{DB_PASSWORD}';\n"
            "CREATE DATABASE jupyterhub OWNER dsphub;\n"
            "CREATE DATABASE dsportal OWNER dsphub;\n"
        )
        self.login.wait_for("PostgreSQL answering", ["pg_isready", "-q"], timeout=60)
        self.login.run(["runuser", "-u", "postgres", "--", "psql", "-q", "-v",
                        "ON_ERROR_STOP=1"], input=sql)  # fmt: skip

    # ------------------------------------------------ the portal

    def install_portal(self, deps):
        """The portal on the login node as issue 35 installs it: what the
        site sets up first (configurable-http-proxy, nginx on 443 with its
        certificate, the settings, the look-up password), the wheel with pip
        into a new venv, ``portal setup``, the units enabled; then the login
        page answers through nginx."""
        login = self.login
        install_chp(login)
        install_nginx_site(login, PUBLIC, PORT, self.ca_folder, who="tests/site/foreign.py")
        login.run(["mkdir", "-p", "/etc/portal"])
        login.write(SITE_TOML, portal_toml(), mode="0640", owner=f"root:{HUB_USER}")
        login.write(LOOKUP_PASSWORD, SERVICE_ACCOUNTS["svc-jupyter"] + "\n", mode="0600",
                    owner=f"{HUB_USER}:{HUB_USER}")  # fmt: skip
        took = pip_install(login, VENV, deps, "dsportal[postgresql]")  # its PostgreSQL driver
        self.figures["pip install"] = f"{took:.0f} s"
        began = time.monotonic()
        done = self.portal("setup", check=False)  # its steps, then portal check
        unit = login.run(["test", "-f", "/etc/systemd/system/portal-hub.service"], check=False)
        if unit.returncode:
            raise MachineError(f"portal setup failed: {done.stderr[-3000:]}")
        self.setup_check = (done.returncode, done.stdout.splitlines())
        self.figures["portal setup (with its check)"] = f"{time.monotonic() - began:.0f} s"
        login.run(["systemctl", "enable", "--now", "portal-proxy", "portal-hub"])
        try:
            with Resolved(PUBLIC, self.login.address):
                wait_answering(self, timeout=90)
        except AssertionError:
            print(journal(login, "portal-proxy"), journal(login, "portal-hub"), sep="\n")
            raise

    def portal(self, *args, check=True, timeout=300):
        """``portal ARGS`` as root on the login node, from the venv; its result."""
        return self.login.run([f"{VENV}/bin/portal", *args], check=check, timeout=timeout)

    def portal_check(self):
        """``portal check``'s exit status and what it printed, a line each
        (one a check, beginning ``ok``, ``WARN`` or ``FAIL``; then its
        summary, ``portal check: ...``)."""
        done = self.portal("check", check=False)
        return done.returncode, [x for x in (done.stdout + done.stderr).splitlines() if x]

    @property
    def base(self):
        return f"https://{PUBLIC}:443"  # with its port: the users' hosts get it too (HubClient)

    def get(self, path, **kwargs):
        """``path`` through nginx, its certificate checked against the site's CA
        (PUBLIC resolved to the login node: tests.site.install.Resolved)."""
        return requests.get(self.base + path, verify=self.ca_file, timeout=10, **kwargs)

    def jobs(self, name=JOB_NAME):
        """``[(job id, user, state, partition, nodes)]`` of the jobs named
        ``name`` (the sessions'), as root sees them (PrivateData hides none)."""
        out = self.slurm("squeue", "-h", "-n", name, "-o", "%i %u %T %P %N").stdout
        return [tuple(line.split()) for line in out.splitlines() if line.strip()]

    # ------------------------------------------------ handy

    def slurm(self, command, *args, user=None, check=True, machine=None):
        """A Slurm command from /opt/slurm/bin, on the login node (or
        ``machine``), as root or ``user``."""
        return (machine or self.login).run([f"{SLURM_BIN}/{command}", *args], user=user,
                                           check=check)  # fmt: skip


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["up"]:
        reason = why_not_here()
        if reason:
            print(f"error: {reason}", file=sys.stderr)
            return 1
        from tests.site.install import build_wheel, ensure_dependencies

        with_portal = "--portal" in argv
        deps = ensure_dependencies() if with_portal else None
        site = ForeignSite(extra_ro_binds=(str(deps),) if deps else ())
        site.up()
        if with_portal:
            build_wheel()
            site.install_portal(deps)
        print(site.figures)
        return 0
    if argv[:1] == ["down"]:
        ForeignSite().down()
        return 0
    print("usage: python -m tests.site.foreign up [--portal] | down", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
