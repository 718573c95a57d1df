"""The site's catalog (portal.slurm.model.SiteCatalog): its parsers, on
Slurm 22.05's own output for the demo's shape (partitions gpu, sxm2 on n1
and n3, pcie on n2 with DenyQos=nlp, cpu; accounts portal, the default,
lab-vision {alice, carol} with QOS vision, lab-nlp {bob, carol} with QOS
nlp; the reservation vision-course for alice on n3), what it lets each
user choose and why not, and how the shared poll reads it."""

import asyncio
import dataclasses
import json
from datetime import datetime
from pathlib import Path

import pytest

from portal.slurm import commands, parse
from portal.slurm.model import (
    GpuModel,
    Node,
    Partition,
    SiteCatalog,
    snapshot_from_json,
    snapshot_to_json,
)
from portal.slurm.parse import (
    parse_associations,
    parse_default_accounts,
    parse_partition_policies,
    parse_qos,
    parse_reservations,
    parse_shares,
    parse_sinfo,
)
from spawners.poller import SlurmPoller
from tests.support import slurm_output

# Slurm 22.05.8's output: the demo cluster's own before its reshaping (captured_*) and
# after (shape_*), and made in that shape with more cases (demo_*)
OUTPUT = Path(__file__).parent / "slurm_2205"

# sinfo --noheader --Node --Format SINFO_FIELDS (Features last)
SINFO = (OUTPUT / "demo_sinfo.txt").read_text()

# sacctmgr -n -P show assoc format=User,Account,Partition,QOS,DefaultQOS
ASSOC = """\
|root||normal|
root|root||normal|
|lab-nlp||nlp|nlp
bob|lab-nlp||nlp|nlp
carol|lab-nlp||nlp|nlp
portal|lab-nlp||nlp|nlp
root|lab-nlp||nlp|nlp
|lab-vision||vision|vision
alice|lab-vision||vision|vision
carol|lab-vision||vision|vision
portal|lab-vision||vision|vision
root|lab-vision||vision|vision
|portal||cpu,portal|portal
alice|portal||cpu,portal|portal
bob|portal||cpu,portal|portal
carol|portal||cpu,portal|portal
portal|portal||cpu,portal|portal
root|portal||cpu,portal|portal
"""

# sacctmgr -n -P show user format=User,DefaultAccount
USERS = """\
alice|portal
bob|portal
carol|portal
portal|portal
root|root
"""

# sacctmgr -n -P show qos format=Name,Priority,MaxWall,MaxTRESPerUser,MaxTRESPerJob,
# MinTRESPerJob,Flags
QOS = """\
normal|0|||||
portal|0|1-00:00:00|gres/gpu=4||gres/gpu=1|DenyOnLimit
cpu|0|1-00:00:00|gres/gpu=4|gres/gpu=0||DenyOnLimit
vision|10|1-00:00:00|gres/gpu=4|||DenyOnLimit
nlp|10|12:00:00|gres/gpu=2|||DenyOnLimit
"""

# sshare -a -n -P -o Account,User,FairShare,GrpTRESRaw
SSHARE = """\
root|||cpu=1217,mem=7479296,energy=0,node=68,billing=1217,fs/disk=0,vmem=0,pages=0,gres/gpu=76
 root|root|1.000000|cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0
 lab-nlp||0.400000|cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0
  lab-nlp|bob|0.333333|cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0
  lab-nlp|carol|0.333333|cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0
 lab-vision||0.600000|cpu=840,mem=5160960,energy=0,node=42,billing=840,fs/disk=0,vmem=0,pages=0,gres/gpu=90
  lab-vision|alice|0.250000|cpu=840,mem=5160960,energy=0,node=42,billing=840,fs/disk=0,vmem=0,pages=0,gres/gpu=90
  lab-vision|carol|0.666667|cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0
 portal||0.500000|cpu=377,mem=2318336,energy=0,node=26,billing=377,fs/disk=0,vmem=0,pages=0,gres/gpu=0
  portal|alice|0.600000|cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0
"""

# scontrol show reservation -o
RESERVATIONS = (
    "ReservationName=vision-course StartTime=2026-11-28T09:00:00 EndTime=2026-12-05T09:00:00 "
    "Duration=7-00:00:00 Nodes=n3 NodeCnt=1 CoreCnt=16 Features=(null) PartitionName=(null) "
    "Flags=SPEC_NODES TRES=cpu=16 Users=alice Groups=(null) Accounts=(null) Licenses=(null) "
    "State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"
    "ReservationName=nlp-deadline StartTime=2026-12-10T00:00:00 EndTime=2026-12-11T00:00:00 "
    "Duration=1-00:00:00 Nodes=n2 NodeCnt=1 CoreCnt=32 Features=(null) PartitionName=pcie "
    "Flags=SPEC_NODES TRES=cpu=32 Users=(null) Groups=(null) Accounts=lab-nlp "
    "Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"
    "ReservationName=last-week StartTime=2026-11-20T09:00:00 EndTime=2026-11-21T09:00:00 "
    "Duration=1-00:00:00 Nodes=n1 NodeCnt=1 CoreCnt=32 Features=(null) PartitionName=(null) "
    "Flags=SPEC_NODES TRES=cpu=32 Users=-bob Groups=(null) Accounts=(null) "
    "Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"
)

# scontrol show partition -o
PARTITIONS = (OUTPUT / "demo_partitions.txt").read_text()

NOW = datetime(2026, 11, 28, 12, 0)


def catalog():
    return SiteCatalog(
        time=NOW,
        associations=parse_associations(ASSOC),
        default_accounts=parse_default_accounts(USERS),
        qos=parse_qos(QOS),
        shares=parse_shares(SSHARE),
        reservations=parse_reservations(RESERVATIONS),
        partitions=parse_partition_policies(PARTITIONS),
    )


# -- nodes: GPU models and features --------------------------------------------


def test_each_partition_lists_its_gpu_models_with_their_free_counts():
    parts = parse_sinfo(SINFO)
    assert parts["sxm2"].gpu_models() == {"v100-sxm2": GpuModel("v100-sxm2", 6, 4, 2)}
    assert parts["pcie"].gpu_models() == {"v100-pcie": GpuModel("v100-pcie", 4, 4, 4)}
    assert parts["gpu"].gpu_models() == {
        "v100-sxm2": GpuModel("v100-sxm2", 4, 2, 2),
        "v100-pcie": GpuModel("v100-pcie", 4, 4, 4),
    }
    n1, n3 = parts["sxm2"].nodes
    assert n1.gpu_types == (("v100-sxm2", 4, 2),) and n1.gpus == 4 and n1.gpus_used == 2
    assert n1.features == ("v100", "sxm2", "nvlink") and n3.features == ("v100", "sxm2", "course")
    assert parts["pcie"].nodes[0].features == ("v100", "pcie")
    # the CPU partition's nodes have GPUs: its own QOS (the catalog's) allows none
    assert parts["cpu"].gpus == 8 and catalog().cpu_only("cpu")
    assert not catalog().cpu_only("gpu") and not catalog().cpu_only("nowhere")


def test_a_node_with_two_models_and_a_down_one_count_apart():
    sinfo = (
        "a1 gpu* gpu:a100:2(S:0),gpu:v100:2(S:1) gpu:a100:1(IDX:0),gpu:v100:0(IDX:N/A) "
        "8/24/0/32 mix 196608 49152 7-00:00:00 (null)\n"
        "a2 gpu* gpu:a100:4 gpu:a100:0(IDX:N/A) 0/0/32/32 down* 196608 0 7-00:00:00 (null)\n"
        "u1 gpu* gpu:2 gpu:1(IDX:0) 8/24/0/32 mix 196608 49152 7-00:00:00 (null)\n"
    )
    models = parse_sinfo(sinfo)["gpu"].gpu_models()
    assert models == {
        "a100": GpuModel("a100", 6, 1, 1),  # the down node's 4 are not free
        "v100": GpuModel("v100", 2, 2, 2),
        "": GpuModel("", 2, 1, 1),  # untyped GRES
    }
    assert parse_sinfo(sinfo)["gpu"].nodes[0].features == ()


def test_a_snapshot_keeps_the_types_and_features_and_an_old_one_still_loads():
    parts = parse_sinfo(SINFO)
    _, loaded, _, _ = snapshot_from_json(snapshot_to_json(parts, {}))
    assert loaded == parts
    old = json.loads(snapshot_to_json(
        {"gpu": Partition("gpu", (Node("vm", ("gpu",), 4, 1, 32, 8, 1024, 0, "mix"),), "1:00:00")},
        {},
    ))  # fmt: skip
    for node in old["partitions"]["gpu"]["nodes"]:
        del node["gpu_types"], node["features"]  # as a hub before them wrote it
    _, loaded, _, _ = snapshot_from_json(json.dumps(old))
    node = loaded["gpu"].nodes[0]
    assert node.gpu_types == () and node.features == ()
    assert loaded["gpu"].gpu_models() == {"": GpuModel("", 4, 3, 3)}


# -- the catalog's parsers -----------------------------------------------------


def test_the_parsers_read_the_demo_s_accounts_qos_shares_and_reservations():
    site = catalog()
    assert {(a.user, a.account) for a in site.associations} >= {
        ("alice", "lab-vision"), ("bob", "lab-nlp"), ("carol", "lab-nlp"), ("carol", "lab-vision"),
    }  # fmt: skip
    assert all(a.user for a in site.associations)  # the accounts' own lines are left out
    assert site.default_accounts["alice"] == "portal" and site.default_accounts["root"] == "root"
    assert site.qos["nlp"].max_wall_minutes == 720 and site.qos["nlp"].max_gpus_per_user == 2
    assert site.qos["portal"].min_gpus_per_job == 1 and site.qos["vision"].priority == 10
    assert site.qos["vision"].describe() == "up to 4 GPUs per user, 1 day per job"
    assert site.qos["normal"].describe() == "no limits"
    alice = site.shares["lab-vision", "alice"]
    assert alice.fairshare == 0.25 and alice.gpu_hours == 1.5
    assert site.shares["lab-vision", ""].gpu_hours == 1.5  # the account's own line
    course, deadline, past = site.reservations
    assert course.nodes == ("n3",) and course.users == ("alice",) and course.partition == ""
    assert deadline.accounts == ("lab-nlp",) and deadline.partition == "pcie"
    assert past.users == ("-bob",)
    gpu, pcie, cpu = site.partitions["gpu"], site.partitions["pcie"], site.partitions["cpu"]
    assert pcie.deny_qos == ("cpu", "nlp") and pcie.allow_qos is None
    assert pcie.allow_accounts is None and pcie.allow_groups is None
    assert gpu.deny_qos == ("cpu",) and gpu.qos == "" and cpu.qos == "cpu"
    assert site.qos["cpu"].max_gpus_per_job == 0


def test_the_parsers_read_the_demo_cluster_s_own_output():
    """The demo cluster's output as Slurm 22.05.8 printed it (captured_*):
    one account, portal, with its QOS; two untyped nodes; a reservation
    for alice in the account portal, one for a group."""

    def captured(name):
        return slurm_output.captured("captured", name)

    _, site = slurm_output.captured_site("captured")
    assert site.accounts_of("alice") == ["portal"] and site.accounts_of("root") == [
        "root",
        "portal",
    ]
    assert site.qos_choices("alice", "portal", "gpu") == [("portal", "")]
    assert site.qos["portal"].describe() == (
        "up to 4 GPUs per user, at least 1 GPU per job, 1 day per job"
    )
    assert site.qos["normal"].describe() == "no limits"
    assert site.shares["portal", "alice"].gpu_hours == 0.0 and site.shares["portal", ""]
    alice, group = site.reservations
    assert (alice.users, alice.accounts, alice.partition) == (("alice",), ("portal",), "gpu")
    assert alice.window() == "Tue 01 Jan 09:00 to 17:00" and alice.upcoming(NOW)
    assert site.reservation_refusal("catalog-probe", "alice", ["portal"], NOW) == ""
    assert group.groups == ("portal-users",) and group.partition == ""
    assert group.refusal("bob", ["portal"], groups=["portal-users"]) == ""
    assert group.refusal("bob", ["portal"]) == (
        "Reservation catalog-probe2 is for members of group portal-users"
    )
    assert site.partitions["gpu"].allow_qos is None and site.partitions["gpu"].deny_qos == ()
    assert parse_reservations(captured("no_reservations")) == ()
    gpu = parse_sinfo(captured("sinfo"))["gpu"]
    assert [(n.name, n.gpu_types, n.features) for n in gpu.nodes] == [
        ("n1", (("", 4, 0),), ()), ("n2", (("", 4, 0),), ()),
    ]  # fmt: skip
    assert gpu.gpu_models() == {"": GpuModel("", 8, 8, 4)}


def test_the_reshaped_demo_cluster_s_own_output_gives_what_the_spawn_page_shows():
    """The demo cluster in its new shape, as Slurm 22.05.8 printed it
    (shape_*, taken while a job held one of n1's GPUs): both GPU models
    with their free counts, each user's accounts, the QOS pcie denies,
    the CPU partition's QOS, the reservation for alice alone."""

    parts, site = slurm_output.captured_site("shape")
    assert parts["gpu"].gpu_models() == {
        "v100-sxm2": GpuModel("v100-sxm2", 4, 3, 3),
        "v100-pcie": GpuModel("v100-pcie", 4, 4, 4),
    }
    assert parts["sxm2"].gpu_models() == {"v100-sxm2": GpuModel("v100-sxm2", 6, 5, 3)}
    assert [n.features for n in parts["sxm2"].nodes] == [
        ("v100", "sxm2", "nvlink"), ("v100", "sxm2", "course"),
    ]  # fmt: skip
    assert site.accounts_of("alice") == ["portal", "lab-vision"]
    assert site.accounts_of("carol") == ["portal", "lab-nlp", "lab-vision"]
    assert site.account_refusal("bob", "lab-vision", "gpu") == (
        "You have no association with account lab-vision"
    )
    assert site.qos_choices("bob", "lab-nlp", "pcie")[0] == ("nlp", "Partition pcie denies QOS nlp")
    assert site.default_qos("bob", "lab-nlp", "sxm2") == "nlp"
    assert site.cpu_only("cpu") and site.default_qos("alice", "portal", "cpu", gpus=0) == "cpu"
    assert site.qos["nlp"].describe() == "up to 4 GPUs per user, 1 day per job"
    share = site.shares["portal", "alice"]
    assert share.fairshare == 0.071429 and round(share.gpu_hours, 3) == 0.067  # 4 GPU-minutes
    now = datetime(2026, 11, 28, 12, 30)
    ((course, reason),) = site.reservation_choices("alice", site.accounts_of("alice"), now)
    assert (course.name, reason, course.nodes, course.end) == (
        "vision-course",
        "",
        ("n3",),
        datetime(2027, 11, 28, 12, 8, 10),
    )
    assert course.flags == ("IGNORE_JOBS", "SPEC_NODES") and course.active(now)
    for user in ("bob", "carol"):
        assert site.reservation_refusal("vision-course", user, site.accounts_of(user), now) == (
            "Reservation vision-course is not open to you"
        )


# -- what each user may choose -------------------------------------------------


def test_a_user_is_offered_their_own_accounts_the_default_first():
    site = catalog()
    assert site.accounts_of("alice") == ["portal", "lab-vision"]
    assert site.accounts_of("bob") == ["portal", "lab-nlp"]
    assert site.accounts_of("carol") == ["portal", "lab-nlp", "lab-vision"]
    assert site.accounts_of("mallory") == []


def test_another_user_s_account_is_refused():
    site = catalog()
    assert site.account_refusal("alice", "lab-vision", "sxm2") == ""
    assert site.account_refusal("alice", "lab-nlp", "sxm2") == (
        "You have no association with account lab-nlp"
    )
    # another user's account: every QOS disabled, the account named
    assert set(dict(site.qos_choices("alice", "lab-nlp", "sxm2")).values()) == {
        "You have no association with account lab-nlp"
    }


def test_a_qos_the_partition_denies_is_offered_disabled_with_the_reason():
    site = catalog()
    assert site.qos_choices("bob", "lab-nlp", "sxm2") == [
        ("nlp", ""),
        ("cpu", "Your association with account lab-nlp does not include QOS cpu"),
        ("portal", "Your association with account lab-nlp does not include QOS portal"),
    ]
    assert site.qos_choices("bob", "lab-nlp", "pcie")[0] == ("nlp", "Partition pcie denies QOS nlp")
    assert site.default_qos("bob", "lab-nlp", "pcie") == ""
    assert site.default_qos("bob", "lab-nlp", "sxm2") == "nlp"
    assert site.qos_choices("carol", "lab-vision", "pcie") == [
        ("vision", ""),
        ("cpu", "Your association with account lab-vision does not include QOS cpu"),
        ("nlp", "Your association with account lab-vision does not include QOS nlp"),
        ("portal", "Your association with account lab-vision does not include QOS portal"),
    ]
    assert site.default_qos("carol", "lab-vision", "pcie") == "vision"
    assert dict(site.qos_choices("alice", "portal", "gpu")) == {
        "portal": "",
        "cpu": "Partition gpu denies QOS cpu",
        "vision": "Your association with account portal does not include QOS vision",
    }


def test_a_cpu_session_gets_the_cpu_qos_and_gpus_none_on_the_cpu_partition():
    site = catalog()
    assert dict(site.qos_choices("alice", "portal", "cpu", gpus=0)) == {
        "portal": "QOS portal needs at least 1 GPU per job",
        "cpu": "",
        "vision": "Your association with account portal does not include QOS vision",
    }
    assert site.default_qos("alice", "portal", "cpu", gpus=0) == "cpu"
    assert site.default_qos("alice", "portal", "cpu") == "portal"  # GPUs not known yet
    assert set(dict(site.qos_choices("alice", "portal", "cpu", gpus=1)).values()) == {
        "Partition cpu's QOS cpu is for jobs without GPUs"
    }
    assert site.default_qos("alice", "portal", "cpu", gpus=1) == ""
    assert site.default_qos("alice", "portal", "gpu", gpus=2) == "portal"


def test_a_partition_s_allow_lists_refuse_other_accounts_qos_and_groups():
    site = dataclasses.replace(
        catalog(),
        partitions=parse_partition_policies((OUTPUT / "demo_partition_restricted.txt").read_text()),
    )
    labs = site.partitions["labs"]
    assert labs.allow_qos == ("portal", "vision") and labs.allow_accounts == (
        "portal",
        "lab-vision",
    )
    assert labs.allow_groups == ("lab-vision",) and labs.deny_qos == ()
    assert site.account_refusal("bob", "lab-nlp", "labs") == (
        "Partition labs does not allow account lab-nlp"
    )
    assert dict(site.qos_choices("carol", "lab-vision", "labs"))["vision"] == ""
    assert labs.qos_refusal("nlp") == "Partition labs allows only QOS portal, vision"
    assert labs.groups_refusal(["lab-vision", "users"]) == ""
    assert labs.groups_refusal(["lab-nlp"]) == "Partition labs is for members of group lab-vision"


def test_an_association_of_one_partition_covers_only_that_partition():
    rows = "dave|lab-x|pcie|xq|\ndave|lab-y||yq|yq\n"
    site = SiteCatalog(associations=parse_associations(rows))
    assert site.association("dave", "lab-x", "pcie").qos == ("xq",)
    assert site.association("dave", "lab-x", "sxm2") is None
    assert site.account_refusal("dave", "lab-x", "sxm2") == (
        "Your association with account lab-x does not cover partition sxm2"
    )
    assert site.default_qos("dave", "lab-x", "pcie") == "xq"  # its only QOS


def test_the_reservation_is_offered_to_its_users_only_with_its_window():
    site = catalog()
    choices = site.reservation_choices("alice", ["portal", "lab-vision"], NOW)
    assert [(r.name, reason) for r, reason in choices] == [
        ("vision-course", ""),  # active first
        ("nlp-deadline", "Reservation nlp-deadline is for account lab-nlp"),
    ]  # last-week is over: not listed
    assert choices[0][0].window() == "Sat 28 Nov 09:00 to Sat 05 Dec 09:00"
    bob = dict((r.name, reason) for r, reason in site.reservation_choices("bob", ["lab-nlp"], NOW))
    assert bob == {"vision-course": "Reservation vision-course is not open to you",
                   "nlp-deadline": ""}  # fmt: skip
    assert site.reservation_refusal("vision-course", "alice", ["lab-vision"], NOW) == ""
    assert site.reservation_refusal("vision-course", "bob", ["lab-nlp"], NOW) == (
        "Reservation vision-course is not open to you"
    )
    assert site.reservation_refusal("last-week", "alice", ["portal"], NOW) == (
        "Reservation last-week is over"
    )
    assert site.reservation_refusal("nope", "alice", ["portal"], NOW) == (
        "There is no reservation nope"
    )


def test_reservation_users_with_a_minus_are_shut_out_and_both_lists_must_match():
    site = catalog()
    past = site.reservations[2]
    assert past.refusal("bob", ["portal"]) == "Reservation last-week is not open to you"
    assert past.refusal("alice", ["portal"]) == ""
    both = parse_reservations(
        "ReservationName=r StartTime=2026-11-28T09:00:00 EndTime=2026-11-28T17:00:00 "
        "Users=carol Accounts=lab-nlp Flags=(null)"
    )[0]
    assert both.refusal("carol", ["lab-nlp"]) == ""
    assert both.refusal("carol", ["lab-vision"]) == "Reservation r is for account lab-nlp"
    assert both.refusal("bob", ["lab-nlp"]) == "Reservation r is not open to you"
    assert both.open_accounts(["portal", "lab-nlp"]) == ["lab-nlp"]


def test_an_aware_now_is_taken_in_the_controller_s_local_time():
    site = catalog()
    now = NOW.astimezone()  # the same moment, with its offset
    assert [r.name for r, _ in site.reservation_choices("alice", ["portal"], now)] == [
        "vision-course", "nlp-deadline",
    ]  # fmt: skip


def test_the_catalog_reads_back_from_json_as_it_was():
    site = catalog()
    assert SiteCatalog.from_json(site.to_json()) == site
    assert SiteCatalog.from_json(SiteCatalog().to_json()) == SiteCatalog()


# -- the reads ----------------------------------------------------------------

OUTPUTS = {
    "assoc": ASSOC, "user": USERS, "qos": QOS, "sshare": SSHARE,
    "reservation": RESERVATIONS, "partition": PARTITIONS,
}  # fmt: skip


def fake_slurm(failing=()):
    """Slurm's runner, faked in this unit test only: each read's output by
    its command; those named in ``failing`` fail as Slurm does."""
    ran = []

    async def fake_run(argv, **kwargs):
        ran.append(argv)
        key = "sshare" if argv[0].endswith("sshare") else argv[argv.index("show") + 1]
        if key in failing:
            raise parse.SlurmError(f"{key} failed: Unable to contact slurm controller")
        return OUTPUTS[key]

    return ran, fake_run


def test_the_catalog_is_read_with_six_commands_each_its_own_command_line(monkeypatch):
    ran, fake_run = fake_slurm()
    monkeypatch.setattr(commands, "run", fake_run)
    site = asyncio.run(commands.site_catalog(5, now=NOW))
    assert site == catalog()
    assert sorted(ran) == sorted([
        ["/usr/bin/sacctmgr", "-n", "-P", "show", "assoc",
         "format=User,Account,Partition,QOS,DefaultQOS"],
        ["/usr/bin/sacctmgr", "-n", "-P", "show", "user", "format=User,DefaultAccount"],
        ["/usr/bin/sacctmgr", "-n", "-P", "show", "qos", "format=Name,Priority,MaxWall,"
         "MaxTRESPerUser,MaxTRESPerJob,MinTRESPerJob,Flags"],
        ["/usr/bin/sshare", "-a", "-n", "-P", "-o", "Account,User,FairShare,GrpTRESRaw"],
        ["/usr/bin/scontrol", "show", "reservation", "-o"],
        ["/usr/bin/scontrol", "show", "partition", "-o"],
    ])  # fmt: skip


def test_without_sshare_the_catalog_has_no_shares_and_says_why(monkeypatch):
    _, fake_run = fake_slurm(failing=("sshare",))
    monkeypatch.setattr(commands, "run", fake_run)
    site = asyncio.run(commands.site_catalog(5))
    assert site.shares == {} and site.error.startswith("sshare failed")
    assert site.accounts_of("carol") == ["portal", "lab-nlp", "lab-vision"]
    _, fake_run = fake_slurm(failing=("assoc",))
    monkeypatch.setattr(commands, "run", fake_run)
    with pytest.raises(parse.SlurmError, match="assoc failed"):
        asyncio.run(commands.site_catalog(5))


# -- the shared poll -----------------------------------------------------------


def test_the_poll_reads_the_catalog_once_for_everyone_and_keeps_it_on_failure(monkeypatch):
    ran, fake_run = fake_slurm()
    monkeypatch.setattr(commands, "run", fake_run)
    poller = SlurmPoller("unit-test-catalog", catalog_interval=120.0)
    poller.ensure_running = lambda: None  # no loops: this test reads as pages do
    assert poller.catalog is None

    async def pages():
        first = await asyncio.gather(*(poller.catalog_since(300.0) for _ in range(20)))
        assert all(c is first[0] for c in first) and first[0] is not None
        assert len(ran) == 6 and poller.catalog_calls == 1  # 20 pages, one read
        again = await poller.catalog_since(300.0)
        assert again is first[0] and len(ran) == 6  # recent enough: no read
        _, failing = fake_slurm(failing=("assoc",))
        monkeypatch.setattr(commands, "run", failing)
        poller._catalog_started -= 1000
        kept = await poller.catalog_since(300.0)
        assert kept is first[0] and poller.catalog_error.startswith("assoc failed")
        # sshare alone failing: the new catalog, with the last shares
        _, no_shares = fake_slurm(failing=("sshare",))
        monkeypatch.setattr(commands, "run", no_shares)
        poller._catalog_started -= 1000
        latest = await poller.catalog_since(300.0)
        assert latest is not first[0] and latest.shares == first[0].shares
        assert poller.catalog_error.startswith("sshare failed")

    asyncio.run(pages())


def test_the_poll_loop_reads_the_catalog_every_catalog_interval(monkeypatch):
    ran, fake_run = fake_slurm()
    monkeypatch.setattr(commands, "run", fake_run)
    poller = SlurmPoller("unit-test-catalog-loop", catalog_interval=0.2)

    async def loop():
        task = asyncio.ensure_future(poller._catalog_loop())
        await asyncio.sleep(0.5)
        task.cancel()

    asyncio.run(loop())
    # at 0, 0.2 and 0.4 s (a loaded machine may be late for the last)
    assert poller.catalog_calls in (2, 3) and poller.catalog is not None
    assert len(ran) == 6 * poller.catalog_calls


def test_the_catalog_interval_is_declared_once_and_reaches_the_shared_poll(monkeypatch):
    from traitlets.config import Config

    from portal.settings import defaults
    from spawners.spawner import PortalSpawner

    assert defaults()["slurm"]["catalog_interval"] == 120.0
    assert SlurmPoller("unit-test-catalog-default").catalog_interval == 120.0
    c = Config()
    c.PortalSpawner.catalog_interval = 45.0
    c.PortalSpawner.job_name = "unit-test-catalog-setting"
    spawner = PortalSpawner(config=c, user=type("User", (), {"name": "alice"})())
    monkeypatch.setattr(SlurmPoller, "ensure_running", lambda self: None)
    assert spawner.poller.catalog_interval == 45.0
    SlurmPoller._instances.pop("unit-test-catalog-setting", None)


def test_each_read_is_written_beside_the_snapshot_for_the_hub_s_account_alone(
    monkeypatch, tmp_path
):
    import os

    from portal.slurm.model import catalog_path

    _, fake_run = fake_slurm()
    monkeypatch.setattr(commands, "run", fake_run)
    poller = SlurmPoller("unit-test-catalog-file", snapshot_path=str(tmp_path / "cluster.json"))
    assert asyncio.run(poller._query_catalog()) is True
    path = catalog_path(poller.snapshot_path)
    assert path == str(tmp_path / "cluster-catalog.json")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert SiteCatalog.from_json(open(path).read()) == poller.catalog
