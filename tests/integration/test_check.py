"""``portal check`` (issue 36) against the real parts of the demo cluster and
the test hub: every check ok and exit 0; then faults, each made in the live
system (or, for a setting, in the settings) one at a time, each giving a
FAIL line that names it, with its fix, and exit 1; undone after.

The faults a demo cluster cannot show without breaking the other tests (a
partition's GPUs gone, the environments unmounted on one node, PrivateData)
are made on the foreign site (tests/site)."""

import copy
import shutil
import subprocess
import sys
import threading

import ldap3
import pytest

from portal import check
from portal import settings as site_settings
from portal.core.profiles import slice_defaults
from portal.setup.install import SUDOERS
from portal.store import ProfileStore
from tests.support import REPO
from tests.support.loadusers import admin_connection
from tests.support.postgres import BIN, Cluster
from tests.support.testhub import SETTINGS_FILE

PARTITION = "portal-chk"  # a partition made for the test, on the demo's node n2
GROUP = "portal-chk"  # an allowed group made for the test


def in_thread(function):
    """``function()`` in a thread of its own (its asyncio.run beside any
    loop this thread runs: the browser tests' Playwright)."""
    out = {}
    thread = threading.Thread(target=lambda: out.update(value=function()))
    thread.start()
    thread.join(600)
    return out["value"]


def run_check(settings):
    """``(exit status, lines)`` of the checks with ``settings``."""
    lines = []
    rc = in_thread(lambda: check.run(settings, out=lines.append))
    return rc, lines


def failures(lines):
    return [line for line in lines if line.startswith("FAIL")]


@pytest.fixture
def settings(hub, hub_env, monkeypatch, tmp_path):
    """The test hub's settings, a copy a test may change; the hub's account
    reads the same file (``--hub-sees``)."""
    monkeypatch.setenv("PORTAL_CONFIG", hub_env["PORTAL_CONFIG"])
    return copy.deepcopy(site_settings.load(str(SETTINGS_FILE)))


def test_portal_check_passes_on_the_demo_cluster(hub, hub_env):
    done = subprocess.run(
        [sys.executable, "-m", "portal.cli", "check"], env=hub_env, cwd=REPO,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[-1] == "portal check: every check passed", lines
    assert all(line.startswith("ok ") for line in lines[:-1]), lines
    names = [line[5:].split(":")[0] for line in lines[:-1]]
    for name in ("prerequisites", "slurmctld", "slurmdbd", "partition gpu", "associations",
                 "sudo", "ldap", "database", "certificate", "mail", "test job on gpu"):  # fmt: skip
        assert name in names, lines
    assert any(n.startswith("group ") for n in names), lines


# ---------------------------------------------------------------- faults


def test_a_profiles_partition_removed(settings, tmp_path):
    subprocess.run(["scontrol", "create", f"PartitionName={PARTITION}", "Nodes=n2",
                    "MaxTime=1-00:00:00", "State=UP"], check=True)  # fmt: skip
    try:
        url = f"sqlite:///{tmp_path}/store.sqlite"
        store = ProfileStore(url)
        store.upgrade()
        store.seed([{"name": "chk", "display_name": "Check", "environment": "pytorch",
                     "partition": PARTITION, "max_gpus": 1}])  # fmt: skip
        settings["portal"]["db_url"] = url
        rc, lines = run_check(settings)
        assert rc == 0, lines
        assert any(line.startswith(f"ok   partition {PARTITION}") for line in lines), lines
        subprocess.run(["scontrol", "delete", f"PartitionName={PARTITION}"], check=True)
        rc, lines = run_check(settings)
        assert rc == 1
        failed = failures(lines)
        assert failed and all(PARTITION in line for line in failed), lines
        assert (
            f"FAIL partition {PARTITION}: not in Slurm (profiles chk); fix: create " in (failed[0])
        ), failed
    finally:
        subprocess.run(["scontrol", "delete", f"PartitionName={PARTITION}"],
                       capture_output=True)  # fmt: skip


@pytest.fixture
def group(settings):
    """A posixGroup of the directory with bob, allowed in ``settings``;
    removed at the end."""
    site = site_settings.load()
    dn = f"cn={GROUP},ou=groups,{site['ldap']['base_dn']}"
    conn = admin_connection(site)
    conn.delete(dn)
    conn.add(dn, ["posixGroup"], {"cn": GROUP, "gidNumber": 20090, "memberUid": ["bob"]})
    assert conn.result["result"] == 0, conn.result
    settings["ldap"]["allowed_groups"] = [*settings["ldap"]["allowed_groups"], dn]
    try:
        yield conn, dn
    finally:
        conn.delete(dn)
        conn.unbind()


def test_an_allowed_group_deleted_from_the_directory(settings, group):
    conn, dn = group
    rc, lines = run_check(settings)
    assert rc == 0 and f"ok   group {GROUP}: 1 members, uids 20002..20002" in lines, lines
    conn.delete(dn)
    assert conn.result["result"] == 0, conn.result
    rc, lines = run_check(settings)
    assert rc == 1
    failed = failures(lines)
    assert (
        f"FAIL group {GROUP}: does not resolve on this host (getent group); fix: create "
        in (failed[0])
    ), lines
    assert all(GROUP in line for line in failed), failed  # the ldap check names its DN


def test_a_member_outside_the_uid_range(settings, group):
    conn, dn = group
    conn.modify(dn, {"memberUid": [(ldap3.MODIFY_ADD, ["nobody"])]})  # uid 65534, a system account
    assert conn.result["result"] == 0, conn.result
    rc, lines = run_check(settings)
    assert rc == 1
    failed = failures(lines)
    assert (
        f"FAIL group {GROUP}: members outside uid 10000..60000: nobody (65534); fix: set "
        in (failed[0])
    ), lines
    assert all("nobody" in line for line in failed), failed  # and no association: named too


def test_the_sudoers_rule_removed(settings, tmp_path):
    kept = tmp_path / "sudoers"
    shutil.move(SUDOERS, kept)
    try:
        rc, lines = run_check(settings)
    finally:
        shutil.move(kept, SUDOERS)
    assert rc == 1
    failed = failures(lines)
    hub_user = settings["hub"]["user"]
    assert failed and failed[0].startswith(f"FAIL sudo: {hub_user} may not run sbatch as bob, "
                                           "scancel as bob, portal-extend as root, "
                                           "portal-slurm-read as root; fix: run "
                                           "portal setup"), lines  # fmt: skip
    # the test job runs as the check user, not through the hub's rules
    assert len(failed) == 1, failed


def test_the_wrong_ldap_ca(settings, tmp_path):
    key, ca = tmp_path / "other.key", tmp_path / "other-ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", ca,
                    "-days", "1", "-subj", "/CN=Another CA"], check=True,
                   capture_output=True)  # fmt: skip
    settings["ldap"]["ca_cert"] = str(ca)
    rc, lines = run_check(settings)
    assert rc == 1
    failed = failures(lines)
    assert len(failed) == 1 and failed[0].startswith("FAIL ldap: "), lines
    assert "certificate verify failed" in failed[0], failed
    assert (
        "fix: set [ldap] ca_cert to the CA that signed the directory's certificate " in (failed[0])
    ), failed


def test_postgresql_stopped(settings):
    cluster = Cluster().start()
    try:
        cluster.add_role("chk", "chk-password")
        for name in ("jupyterhub", "portal"):
            cluster.add_database(name, "chk")
        settings["hub"]["db_url"] = cluster.url("chk", "chk-password", "jupyterhub")
        settings["portal"]["db_url"] = cluster.url("chk", "chk-password", "portal")
        store = ProfileStore(settings["portal"]["db_url"])
        store.upgrade()
        store.seed([{**slice_defaults(settings), **p} for p in settings["profiles"]])
        store.engine.dispose()
        rc, lines = run_check(settings)
        assert rc == 0 and any(x.startswith("ok   database: PostgreSQL") for x in lines), lines
        cluster.run(BIN / "pg_ctl", "-D", cluster.data, "-m", "fast", "-w", "stop")
        rc, lines = run_check(settings)
    finally:
        cluster.stop()
    assert rc == 1
    failed = failures(lines)
    assert len(failed) == 1 and failed[0].startswith("FAIL database: "), lines
    assert "[hub] db_url" in failed[0] and "fix: start the database server" in failed[0], failed


def test_the_hubs_api_unreachable_from_the_nodes(settings):
    settings["hub"]["connect_ip"] = "10.200.0.250"  # on the nodes' network, where nothing is
    rc, lines = run_check(settings)
    assert rc == 1
    failed = failures(lines)
    assert len(failed) == 1, lines
    assert failed[0].startswith("FAIL test job on gpu: on n"), failed
    assert "the hub's API 10.200.0.250:" in failed[0], failed
    assert "fix: let the nodes reach the login node on [hub] api_port" in failed[0], failed


def test_check_is_a_command_of_root():
    done = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable,
         "-m", "portal.cli", "check"], cwd=REPO, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 2 and "portal check: run as root" in done.stderr, done.stderr
