"""The site's catalog read from the real slurmctld and slurmdbd, checked
against what sacctmgr, scontrol and sinfo print themselves (not fixed
names: the demo's shape may change under it): every user's accounts,
their default first; another user's account refused; a QOS a partition
denies shown disabled with the reason; reservations offered to their
users alone; each node's GPU models and features; the shared poll's
reads, one for every user, and what each costs slurmctld (sdiag). The
hub's own account reads the same catalog as root. Run it under the
tests' lock (``flock -o /tmp/portal-it.lock``)."""

import asyncio
import json
import re
import subprocess
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from portal import settings as site_settings
from portal.slurm import commands
from portal.slurm.model import SiteCatalog, catalog_path
from portal.slurm.parse import expand_hostlist, max_time_minutes, parse_time
from spawners.poller import SlurmPoller
from tests.support import REPO
from tests.support.testhub import STATE

HUB_USER = site_settings.load()["hub"]["user"]
HUB_PYTHON = "/opt/portal/envs/hub/bin/python"


def slurm(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout


def in_thread(coroutine):
    """Run ``coroutine`` in an event loop of its own thread (a browser test may
    hold one in the main thread) and return its result."""
    result = {}

    def target():
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as e:  # noqa: BLE001 (raised again below)
            result["error"] = e

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    if "error" in result:
        raise result["error"]
    return result["value"]


def records(text):
    """scontrol's multi-line records (``show partition NAME``, ``show
    reservation``) as dicts: a reading apart from the catalog's ``-o`` one."""
    found = []
    for block in re.split(r"\n\s*\n", text.strip()):
        words = dict(re.findall(r"(\w+)=(\S*)", block))
        if words:
            found.append(words)
    return found


def listed(value):
    return [] if value in ("", "(null)", "ALL", "N/A") else value.split(",")


@pytest.fixture(scope="module")
def own_reservation(cluster, sacctmgr_assocs):
    """A reservation of this module's, for one user, in 2030 (it holds no
    node now), beside the site's own: ``(name, user)``; deleted at the end."""
    name = f"portal-catalog-test-{uuid.uuid4().hex[:8]}"
    user = sorted(u for u in sacctmgr_assocs if u not in ("root", HUB_USER))[0]
    node = sorted(in_thread(commands.partitions(30)).values(), key=lambda p: p.name)[0].nodes[0]
    slurm("scontrol", "create", "reservation", f"ReservationName={name}",
          "StartTime=2030-01-07T09:00:00", "Duration=08:00:00", f"Nodes={node.name}",
          f"Users={user}")  # fmt: skip
    try:
        yield name, user
    finally:
        subprocess.run(["scontrol", "delete", f"ReservationName={name}"], check=False)


@pytest.fixture(scope="module")
def catalog(cluster, own_reservation):
    return in_thread(commands.site_catalog(30))


@pytest.fixture(scope="module")
def sacctmgr_assocs(cluster):
    """``{user: {account: [qos]}}`` as sacctmgr lists the users' associations."""
    found = {}
    for line in slurm("sacctmgr", "-n", "-P", "list", "assoc", "format=user,account,qos").split(
        "\n"
    ):
        user, _, rest = line.partition("|")
        account, _, qos = rest.partition("|")
        if user and account:
            found.setdefault(user, {})[account] = sorted(filter(None, qos.split(",")))
    return found


def test_every_user_is_offered_their_own_accounts_the_default_first(catalog, sacctmgr_assocs):
    defaults = dict(
        line.split("|") for line in
        slurm("sacctmgr", "-n", "-P", "list", "user", "format=user,defaultaccount").split()
    )  # fmt: skip
    assert catalog.error == "" and sacctmgr_assocs
    all_accounts = {a for accounts in sacctmgr_assocs.values() for a in accounts}
    for user, accounts in sacctmgr_assocs.items():
        offered = catalog.accounts_of(user)
        assert sorted(offered) == sorted(accounts), user
        if defaults.get(user) in accounts:
            assert offered[0] == defaults[user], user
        for account in accounts:
            assert sorted(catalog.association(user, account, "").qos) == accounts[account]
        for other in sorted(all_accounts - set(accounts)):
            assert catalog.account_refusal(user, other, "") == (
                f"You have no association with account {other}"
            )


def test_the_qos_limits_are_sacctmgr_s(catalog):
    for line in slurm(
        "sacctmgr", "-n", "-P", "list", "qos", "format=name,maxwall,maxtrespu"
    ).split():
        name, wall, per_user = line.split("|")
        qos = catalog.qos[name]
        assert qos.max_wall_minutes == max_time_minutes(wall), name
        gpus = re.search(r"gres/gpu=(\d+)", per_user)
        assert qos.max_gpus_per_user == (int(gpus.group(1)) if gpus else None), name
        assert qos.describe()


def test_a_qos_a_partition_denies_or_does_not_allow_is_disabled_with_the_reason(
    catalog, sacctmgr_assocs
):
    partitions = records(slurm("scontrol", "show", "partition"))
    assert {p["PartitionName"] for p in partitions} == set(catalog.partitions)
    checked, refused = 0, 0
    for part in partitions:
        name = part["PartitionName"]
        denied, allowed = listed(part.get("DenyQos", "")), part.get("AllowQos", "ALL")
        assert catalog.partitions[name].deny_qos == tuple(denied)
        for user, accounts in sacctmgr_assocs.items():
            for account, qos_list in accounts.items():
                if catalog.account_refusal(user, account, name):
                    continue
                choices = dict(catalog.qos_choices(user, account, name))
                for qos in qos_list:
                    checked += 1
                    if qos in denied:
                        assert choices[qos] == f"Partition {name} denies QOS {qos}"
                        refused += 1
                    elif allowed != "ALL" and qos not in allowed.split(","):
                        assert choices[qos].startswith(f"Partition {name} allows only QOS")
                    else:
                        assert choices[qos] == "", (user, account, name, qos)
                default = catalog.default_qos(user, account, name)
                assert default == "" or choices[default] == ""
    assert checked
    # a QOS some association has and some partition denies (the demo's
    # pcie and nlp) is seen refused
    held = {q for accounts in sacctmgr_assocs.values() for qos in accounts.values() for q in qos}
    if any(set(listed(p.get("DenyQos", ""))) & held for p in partitions):
        assert refused


def test_reservations_are_offered_to_their_users_alone(catalog, sacctmgr_assocs, own_reservation):
    text = slurm("scontrol", "show", "reservation")
    shown = records(text)
    assert [r.name for r in catalog.reservations] == [r["ReservationName"] for r in shown]
    name, user = own_reservation
    assert name in [r.name for r in catalog.reservations]
    found = next(r for r in catalog.reservations if r.name == name)
    assert found.upcoming(datetime.now()) and found.window() == "Mon 07 Jan 09:00 to 17:00"
    assert (found, "") in catalog.reservation_choices(
        user, catalog.accounts_of(user), datetime.now()
    )
    now, checked = datetime.now(), 0
    for resv in shown:
        name = resv["ReservationName"]
        found = next(r for r in catalog.reservations if r.name == name)
        assert found.start == parse_time(resv["StartTime"])
        assert found.nodes == expand_hostlist(resv["Nodes"])
        users = listed(resv.get("Users", ""))
        if not users or users[0].startswith("-") or listed(resv.get("Accounts", "")):
            continue
        for user, accounts in sacctmgr_assocs.items():
            reason = catalog.reservation_refusal(name, user, list(accounts), now)
            if found.end is not None and found.end <= now:
                assert reason == f"Reservation {name} is over"
            elif user in users:
                assert reason == "", (name, user)
                offered = catalog.reservation_choices(user, list(accounts), now)
                assert (found, "") in offered
            else:
                assert reason == f"Reservation {name} is not open to you", (name, user)
            checked += 1
    assert checked >= 2  # this module's own reservation: its user and another


def test_every_association_has_its_fairshare_and_gpu_hours(catalog, sacctmgr_assocs):
    for user, accounts in sacctmgr_assocs.items():
        for account in accounts:
            share = catalog.shares[account, user]
            assert 0.0 <= share.fairshare <= 1.0 and share.gpu_hours >= 0.0


def test_each_node_s_gpu_models_and_features_are_scontrol_s(cluster):
    partitions = in_thread(commands.partitions(30))
    nodes = {n.name: n for p in partitions.values() for n in p.nodes}
    assert nodes
    for node in records(slurm("scontrol", "show", "node")):
        ours = nodes[node["NodeName"]]
        assert ours.features == tuple(listed(node.get("AvailableFeatures", "")))
        typed = {}
        for item in listed(node.get("Gres", "")):
            parts = re.sub(r"\(.*\)$", "", item).split(":")
            if parts[0] == "gpu":
                kind = parts[1] if len(parts) == 3 else ""
                typed[kind] = typed.get(kind, 0) + int(parts[-1])
        assert {kind: total for kind, total, _ in ours.gpu_types} == typed, node["NodeName"]
    for partition in partitions.values():
        models = partition.gpu_models()
        assert sum(m.total for m in models.values()) == partition.gpus
        assert sum(m.free for m in models.values()) == partition.gpus_free


def test_the_hub_s_account_reads_the_same_catalog(catalog):
    code = (
        "import asyncio; from portal.slurm import commands; "
        "print(asyncio.run(commands.site_catalog(30)).to_json())"
    )
    ran = subprocess.run(
        ["setpriv", f"--reuid={HUB_USER}", f"--regid={HUB_USER}", "--init-groups",
         HUB_PYTHON, "-c", code],
        capture_output=True, text=True, timeout=120, cwd="/tmp",
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    theirs = json.loads(ran.stdout)
    ours = json.loads(catalog.to_json())
    for key in ("associations", "default_accounts", "qos", "reservations", "partitions"):
        assert theirs[key] == ours[key], key
    # sshare's usage decays between the reads: the same associations
    assert {(s["account"], s["user"]) for s in theirs["shares"]} == {
        (s["account"], s["user"]) for s in ours["shares"]
    }


def sdiag_counts():
    """slurmctld's RPC counts by type (sdiag)."""
    return {
        name: int(count)
        for name, count in re.findall(r"^\s*(REQUEST_\w+)\s+\(\s*\d+\)\s+count:(\d+)",
                                      slurm("sdiag"), re.M)
    }  # fmt: skip


def test_the_shared_poll_reads_the_catalog_once_for_every_page(cluster, capsys):
    """20 pages at once share one read, and the poll's own catalog loop,
    which the first page starts, shares it too; what one read costs
    slurmctld: one RPC of each kind it asks (sdiag; the poll's squeue and
    sinfo loops and the demo hub's own add partition, node and job-info ones
    meanwhile, so only reservations and shares are exact). Nothing patched."""
    poller = SlurmPoller("portal-catalog-test", catalog_interval=600.0, timeout=30)

    async def pages():
        before = sdiag_counts()
        found = await asyncio.gather(*(poller.catalog_since(600.0, timeout=30) for _ in range(20)))
        after = sdiag_counts()
        return found, before, after

    found, before, after = in_thread(pages())
    assert all(c is found[0] for c in found) and found[0] is not None
    assert poller.catalog_calls == 1 and poller.catalog_error == ""
    cost = {k: after.get(k, 0) - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert cost.get("REQUEST_RESERVATION_INFO") == 1, cost
    assert cost.get("REQUEST_SHARE_INFO") == 1, cost
    with capsys.disabled():
        print(f"\nCATALOG one read's slurmctld RPCs (sdiag, others' included): {cost}")


def test_the_hub_s_poll_reads_the_catalog_as_it_starts_and_writes_it_for_the_service(hub, catalog):
    """The test hub's own poll: its catalog, beside its snapshot, the hub's
    account's alone, is the one read here (its time and usage aside)."""
    path = Path(catalog_path(str(STATE / "cluster.json")))
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.5)
    assert path.stat().st_mode & 0o777 == 0o600 and path.owner() == HUB_USER
    written = SiteCatalog.from_json(path.read_text())
    assert written.error == "" and written.time is not None
    assert written.associations == catalog.associations
    assert written.qos == catalog.qos and written.partitions == catalog.partitions

    # the accounts' and the portal's users' lines: a read through the helper
    # (under PrivateData=usage, which an earlier module may have set while
    # this hub polled) shows no other account's, the hub's or root's
    def users_lines(shares):
        return {key for key in shares if key[1] not in ("root", HUB_USER)}

    assert users_lines(written.shares) == users_lines(catalog.shares)
