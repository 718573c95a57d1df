"""A fresh login node that a site would add to its cluster: a Debian machine
with systemd as PID 1 (tests/site/machine.py), joined to the demo cluster by
hand (tests/site/join.py), before any portal is installed on it. What the
portal's installation (issue 35) will be checked against: users resolve
through sssd, Slurm answers through the demo's munge key, and a snapshot of
the site's own files, packages and services can tell a change."""

import pwd
import subprocess

import pytest

from portal import settings as site_settings
from tests.site.join import CA_IN_MACHINE, join_demo, stop_ldap_relay_if_unused
from tests.site.machine import Machine, MachineError, why_not_here
from tests.site.snapshot import differences, snapshot

pytestmark = pytest.mark.slow

# Not login2 (.30): README's machine for a try by hand may be running beside.
NAME, HOST = "login-test", 31
USER = "alice"


@pytest.fixture(scope="module")
def node(cluster):
    """The machine, booted and joined to the demo cluster; removed at the end."""
    reason = why_not_here()
    if reason:
        pytest.skip(f"no site machine here: {reason}")
    network = site_settings.load()["cluster"]["network"]
    machine = Machine(NAME, f"{network}.{HOST}")
    machine.remove()  # one an interrupted run left
    try:
        machine.boot()
    except MachineError as e:
        machine.remove()
        pytest.skip(f"systemd-nspawn cannot boot a machine here: {e}")
    try:
        join_demo(machine, probe_user=USER)
        yield machine
    finally:
        machine.remove()
        stop_ldap_relay_if_unused()


def test_systemd_is_pid_1_and_the_system_runs(node):
    assert node.run(["cat", "/proc/1/comm"]).stdout.strip() == "systemd"
    assert node.run(["readlink", "/proc/1/exe"]).stdout.strip().endswith("/systemd")
    state = node.system_state()
    assert state == "running", f"systemd says {state}; failed: {node.failed_units()}"
    assert node.run(["hostname"]).stdout.strip() == NAME


def test_users_resolve_through_sssd_as_on_the_demo(node):
    host = pwd.getpwnam(USER)
    entry = node.run(["getent", "-s", "sss", "passwd", USER]).stdout.strip().split(":")
    assert entry[0] == USER and int(entry[2]) == host.pw_uid and entry[5] == host.pw_dir
    # from the directory, not from a file of the machine
    assert node.run(["grep", "-q", f"^{USER}:", "/etc/passwd"], check=False).returncode == 1
    host_groups = subprocess.run(["id", "-Gn", USER], capture_output=True, text=True, check=True)
    # the same groups, in whatever order the two resolvers list them
    assert sorted(node.run(["id", "-Gn", USER]).stdout.split()) == sorted(
        host_groups.stdout.split()
    )
    # sssd, not nslcd
    passwd_line = next(line for line in node.read("/etc/nsswitch.conf").splitlines()
                       if line.startswith("passwd:"))  # fmt: skip
    assert passwd_line.split()[1:] == ["files", "sss"]
    assert node.run(["systemctl", "is-active", "sssd"]).stdout.strip() == "active"


def test_sinfo_lists_the_demo_partition(node):
    partition = site_settings.load()["slurm"]["partition"]
    argv = ["sinfo", "--noheader", "--format=%R %D %N"]
    inside = node.run(argv).stdout.split("\n")
    on_host = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split("\n")
    assert any(line.split()[:1] == [partition] for line in inside if line), inside
    assert inside == on_host
    assert node.run(["squeue", "--noheader", "--me"]).returncode == 0


def test_munge_credentials_are_the_demos(node):
    """A credential made in the machine is accepted by the host's munged,
    and the host's by the machine's: the same key, and a munged running inside."""
    made_inside = node.run(["munge", "--no-input"]).stdout
    decoded = subprocess.run(["unmunge"], input=made_inside, capture_output=True, text=True)
    assert decoded.returncode == 0, decoded.stderr
    assert "STATUS:          Success (0)" in decoded.stdout
    made_here = subprocess.run(["munge", "--no-input"], capture_output=True, text=True, check=True)
    assert node.run(["unmunge"], input=made_here.stdout).returncode == 0
    assert node.run(["systemctl", "is-active", "munge"]).stdout.strip() == "active"


def test_a_snapshot_is_the_same_after_a_harmless_command(node):
    before = snapshot(node)
    node.run(["systemctl", "daemon-reload"])
    node.run(["sinfo"])
    node.sh("touch /tmp/harmless && rm /tmp/harmless")
    assert differences(before, snapshot(node)) == []
    # and it holds what it is for
    assert before["packages"]["sssd-ldap"].startswith("ii ")
    assert before["packages"]["slurm-client"].startswith("ii ")
    assert before["files"]["/etc/sssd/sssd.conf"].startswith("file 0600 0:0 sha256:")
    assert "/etc/ssl/certs/ca-certificates.crt" in before["files"]
    assert "/etc/nsswitch.conf" in before["files"]
    assert {"sssd.service", "munge.service", "nginx.service", "ssh.service"} <= set(
        before["running"]
    )


def test_a_snapshot_tells_each_kind_of_change(node):
    before = snapshot(node)
    conf = node.read("/etc/slurm/slurm.conf")
    try:
        node.write("/etc/slurm/slurm.conf", conf + "# changed\n")
        node.run(["apt-mark", "hold", "cron"])
        node.run(["systemctl", "stop", "cron"])
        changes = differences(before, snapshot(node))
    finally:
        node.write("/etc/slurm/slurm.conf", conf)
        node.run(["apt-mark", "unhold", "cron"])
        node.run(["systemctl", "start", "cron"])
    assert any(c.startswith("file changed: /etc/slurm/slurm.conf (") for c in changes), changes
    assert any(c.startswith("package changed: cron (ii ") and "-> hi " in c for c in changes)
    assert "service no longer running: cron.service" in changes
    assert len(changes) == 3, changes
    assert differences(before, snapshot(node)) == []


def test_sssd_checks_the_directory_certificate(node):
    """With another CA in ldap_tls_cacert, nobody resolves (the machine's
    sssd does check slapd's certificate); with the demo's, alice again."""
    conf = node.read("/etc/sssd/sssd.conf")
    wrong = conf.replace(f"ldap_tls_cacert = {CA_IN_MACHINE}",
                         "ldap_tls_cacert = /etc/ssl/certs/ISRG_Root_X1.pem")  # fmt: skip
    assert wrong != conf
    # without its caches: the database and the memory cache that the NSS module reads itself
    restart = "systemctl stop sssd; rm -f /var/lib/sss/db/* /var/lib/sss/mc/*; systemctl start sssd"
    try:
        node.write("/etc/sssd/sssd.conf", wrong, mode="0600")
        node.sh(restart)
        assert node.run(["getent", "-s", "sss", "passwd", USER], check=False).returncode == 2
    finally:
        node.write("/etc/sssd/sssd.conf", conf, mode="0600")
        node.sh(restart)
    node.wait_for(f"{USER} resolving again", ["getent", "-s", "sss", "passwd", USER])
