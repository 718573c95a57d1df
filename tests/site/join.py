"""A site machine joined to the demo cluster as a second login node is joined
by hand: the demo's slurm.conf and munge key, the cluster's names in
/etc/hosts, the demo's CA in the system's store, and sssd (not nslcd)
resolving the users from the demo's directory over StartTLS.

The demo's slapd listens on loopback only ([ldap] server_address 127.0.0.1;
deploy/ldap_setup.py's ``listen_uri``), which a second login node cannot
reach. Until the demo offers it on the bridge, ``ensure_ldap_relay`` relays
[cluster] network .1:[ldap] server_port to it (tests/site/relay.py, one for
all machines, stopped with the last of them); the machine names the host by
its own name, which slapd's certificate names ([tls] cert), so sssd checks
the certificate as it would a site's directory.
"""

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.site.machine import STATE, MachineError, nspawn_alive

REPO = Path(__file__).resolve().parents[2]
SLURM_CONF = Path("/etc/slurm/slurm.conf")
MUNGE_KEY = Path("/etc/munge/munge.key")
CA_IN_MACHINE = "/usr/local/share/ca-certificates/portal-demo-ca.crt"
RELAY_PID = STATE.parent / "ldap-relay.pid"
RELAY_LOG = STATE.parent / "ldap-relay.log"
BEGIN, END = "# BEGIN demo cluster (tests/site/join.py)", "# END demo cluster"


# ---------------------------------------------------------------- pure


def cluster_hosts(slurm_conf):
    """``[(address, name)]`` of slurm.conf's controller and nodes, as each
    is given there (``SlurmctldHost=NAME(ADDR)``, ``NodeName=N NodeAddr=A``).

    >>> cluster_hosts('''SlurmctldHost=vm(10.200.0.1)
    ... NodeName=n1 NodeAddr=10.200.0.2 CPUs=32
    ... NodeName=n2 NodeAddr=10.200.0.3 CPUs=32
    ... NodeName=n3 CPUs=8''')
    [('10.200.0.1', 'vm'), ('10.200.0.2', 'n1'), ('10.200.0.3', 'n2')]
    """
    hosts = []
    for line in slurm_conf.splitlines():
        line = line.split("#", 1)[0].strip()
        controller = re.match(r"(?i)SlurmctldHost=([^\s(]+)\(([^)\s]+)\)", line)
        node = re.match(r"(?i)NodeName=(\S+)\s.*\bNodeAddr=(\S+)", line)
        if controller:
            hosts.append((controller[2], controller[1]))
        elif node:
            hosts.append((node[2], node[1]))
    return hosts


def with_hosts(hosts_file, hosts):
    """/etc/hosts's text with the block of ``hosts`` put in (replacing an earlier one).

    >>> print(with_hosts("127.0.0.1 localhost\\n", [("10.200.0.1", "vm")]), end="")
    127.0.0.1 localhost
    # BEGIN demo cluster (tests/site/join.py)
    10.200.0.1 vm
    # END demo cluster
    >>> with_hosts(with_hosts("", [("10.0.0.1", "a")]), [("10.0.0.2", "b")]).count("BEGIN")
    1
    """
    kept = re.sub(rf"(?ms)^{re.escape(BEGIN)}$.*?^{re.escape(END)}$\n?", "", hosts_file)
    lines = [BEGIN, *(f"{address} {name}" for address, name in hosts), END]
    return kept + "\n".join(lines) + "\n"


def sssd_conf(uri, base_dn, ca_file, domain="demo"):
    """sssd.conf of a login node that resolves and authenticates the users of
    the directory at ``uri`` (RFC 2307: ``posixGroup`` with ``memberUid``),
    over StartTLS with the certificate checked against ``ca_file``. No
    ``services`` line: Debian's sssd-nss and sssd-pam sockets start the
    responders, and refuse to start (a failed unit) when the line names them.

    >>> print(sssd_conf("ldap://vm:3890", "dc=portal,dc=example", "/ca.crt"), end="")
    ... # doctest: +ELLIPSIS
    # The responders (nss, pam) start on demand, by Debian's socket units.
    [sssd]
    domains = demo
    <BLANKLINE>
    [domain/demo]
    id_provider = ldap
    auth_provider = ldap
    ldap_uri = ldap://vm:3890
    ldap_search_base = dc=portal,dc=example
    ldap_schema = rfc2307
    ldap_id_use_start_tls = true
    ldap_tls_reqcert = demand
    ldap_tls_cacert = /ca.crt
    ...
    """
    return f"""# The responders (nss, pam) start on demand, by Debian's socket units.
[sssd]
domains = {domain}

[domain/{domain}]
id_provider = ldap
auth_provider = ldap
ldap_uri = {uri}
ldap_search_base = {base_dn}
ldap_schema = rfc2307
ldap_id_use_start_tls = true
ldap_tls_reqcert = demand
ldap_tls_cacert = {ca_file}
cache_credentials = false
enumerate = false
"""


# ---------------------------------------------------------------- the relay


def answers(host, port, timeout=1.0):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def relay_pid():
    try:
        pid = int(RELAY_PID.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"tests.site.relay" in cmdline else None


def ensure_ldap_relay(host, port, target=("127.0.0.1", None), log=print):
    """``host:port`` answered by the demo's slapd: as it is when something
    listens there already (slapd itself, or the relay), else by a relay
    started now. True when it started one."""
    if answers(host, port):
        return False
    target_host, target_port = target[0], target[1] or port
    RELAY_PID.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    log(f"relaying {host}:{port} to slapd on {target_host}:{target_port}")
    with open(RELAY_LOG, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.site.relay", host, str(port), target_host,
             str(target_port)],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    RELAY_PID.write_text(f"{process.pid}\n")
    deadline = time.monotonic() + 10
    while not answers(host, port):
        if process.poll() is not None or time.monotonic() > deadline:
            raise MachineError(f"the LDAP relay on {host}:{port} did not start: see {RELAY_LOG}")
        time.sleep(0.1)
    return True


def stop_ldap_relay_if_unused(log=print):
    """Stop the relay when no site machine runs any more."""
    pid = relay_pid()
    if not pid:
        return
    for pid_file in STATE.glob("*/nspawn.pid"):
        try:
            if nspawn_alive(int(pid_file.read_text())):
                return
        except (OSError, ValueError):
            continue
    log("stopping the LDAP relay: no site machine left")
    subprocess.run(["kill", str(pid)], check=False)
    RELAY_PID.unlink(missing_ok=True)


# ---------------------------------------------------------------- joining


def join_demo(machine, probe_user="alice", log=print):
    """Join ``machine`` to the demo cluster; it then resolves ``probe_user``
    through sssd and reaches slurmctld. The seconds it took."""
    from portal import settings as site_settings

    settings = site_settings.load()
    ldap, cluster = settings["ldap"], settings["cluster"]
    began = time.monotonic()
    gateway = f"{cluster['network']}.1"
    # The demo's slapd, on the bridge, by the host's own name (its certificate's).
    ldap_host = socket.gethostname()
    slurm_conf = SLURM_CONF.read_text()
    hosts = cluster_hosts(slurm_conf)
    if ldap_host not in (name for _, name in hosts):
        hosts.insert(0, (gateway, ldap_host))
    ensure_ldap_relay(gateway, ldap["server_port"], log=log)

    log(f"joining {machine.name} to the demo cluster")
    machine.write("/etc/hosts", with_hosts(machine.read("/etc/hosts"), hosts))
    machine.write("/etc/slurm/slurm.conf", slurm_conf)
    machine.write("/etc/munge/munge.key", MUNGE_KEY.read_bytes(), mode="0400",
                  owner="munge:munge")  # fmt: skip
    machine.write(CA_IN_MACHINE, Path(settings["tls"]["ca_cert"]).read_text())
    machine.run(["update-ca-certificates"])
    uri = f"ldap://{ldap_host}:{ldap['server_port']}"
    machine.write("/etc/sssd/sssd.conf", sssd_conf(uri, ldap["base_dn"], CA_IN_MACHINE),
                  mode="0600")  # fmt: skip
    machine.run(["systemctl", "restart", "munge", "sssd"])
    machine.run(["systemctl", "reset-failed"])
    machine.wait_for(f"{probe_user} resolving through sssd",
                     ["getent", "-s", "sss", "passwd", probe_user])  # fmt: skip
    machine.wait_for("slurmctld answering", ["sinfo", "--noheader"])
    took = time.monotonic() - began
    log(f"{machine.name} joined in {took:.1f} s")
    return took
