"""What the spawn page offers and what a spawn is refused (issue 38), from
the reshaped demo cluster's own Slurm 22.05.8 output (tests/unit/slurm_2205
shape_*): ``portal.slurm.choices.offer`` shows disabled, with its reason,
what ``check`` refuses, naming the field."""

from datetime import datetime

import pytest

from portal.core.profiles import profile_from_dict
from portal.core.slice import SliceError
from portal.slurm import choices
from tests.support.slurm_output import captured_site

NOW = datetime(2026, 11, 28, 12, 30)
SITE = profile_from_dict({
    "name": "pytorch-site", "display_name": "PyTorch site", "environment": "pytorch",
    "partition": "gpu", "partitions": ["sxm2", "pcie", "cpu"],
    "choose": ["account", "qos", "reservation", "feature"], "max_gpus": 4, "max_cores": 16,
    "max_mem_gb": 64,
})  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    return captured_site("shape")


def check(cluster, user, groups=(), **options):
    partitions, catalog = cluster
    gpus = options.pop("gpus", 1)
    job_slice = SITE.make_slice(gpus, 2, None, options.pop("partition", None), **options)
    job_slice = choices.complete(job_slice, catalog, user)
    choices.check(SITE, job_slice, partitions, catalog, user, NOW, groups)
    return job_slice


@pytest.mark.parametrize(
    "user, options, field, message",
    [
        ("alice", {"partition": "pcie", "gpu_type": "v100-sxm2"}, "gpu_type",
         "GPU model v100-sxm2 is not on partition pcie (models there: v100-pcie)"),
        ("bob", {"account": "lab-vision"}, "account",
         "You have no association with account lab-vision"),
        ("bob", {"partition": "sxm2", "reservation": "vision-course"}, "reservation",
         "Reservation vision-course is not open to you"),
        ("bob", {"partition": "pcie", "account": "lab-nlp", "qos": "nlp"}, "qos",
         "Partition pcie denies QOS nlp"),
        ("alice", {"partition": "cpu", "gpus": 1}, "gpus",
         "Partition cpu has no GPUs: choose no GPU there, or a partition with GPUs"),
        ("alice", {"partition": "gpu", "gpus": 0}, "partition",
         "A session without GPUs runs on a partition without GPUs (cpu), not gpu"),
        ("alice", {"partition": "pcie", "reservation": "vision-course"}, "reservation",
         "Reservation vision-course holds n3, none of partition pcie"),
        ("alice", {"partition": "sxm2", "gpu_type": "v100-sxm2", "gpus": 4, "feature": "course"},
         "feature", "No node of partition sxm2 with the feature course has 4 v100-sxm2 GPUs "
         "(at most 2)"),
        ("alice", {"partition": "sxm2", "gpus": 4, "reservation": "vision-course"},
         "reservation", "Reservation vision-course's nodes (n3) have at most 2 GPUs each, not 4"),
        ("bob", {"partition": "pcie", "account": "lab-nlp"}, "qos",
         "Partition pcie denies QOS nlp"),  # the association's usual QOS, named or not
    ],
)  # fmt: skip
def test_what_slurm_would_refuse_is_refused_naming_the_field(
    cluster, user, options, field, message
):
    with pytest.raises(SliceError) as e:
        check(cluster, user, **options)
    assert e.value.field == field, e.value
    if message:
        assert str(e.value) == message


def test_what_fits_passes_and_a_cpu_session_gets_the_cpu_qos(cluster):
    assert check(cluster, "alice", partition="sxm2", gpu_type="v100-sxm2").gres == (
        "gpu:v100-sxm2:1"
    )
    cpu = check(cluster, "alice", partition="cpu", gpus=0, cores=4, mem_gb=8)
    assert (cpu.qos, cpu.gres, cpu.cores) == ("cpu", "", 4)  # named by the portal
    assert check(cluster, "alice", partition="sxm2", reservation="vision-course").reservation
    assert check(cluster, "carol", account="lab-nlp").account == "lab-nlp"
    assert check(cluster, "alice").qos == ""  # the usual QOS fits: Slurm's default stands


def test_the_page_offers_each_model_and_shows_what_it_refuses_disabled(cluster):
    partitions, catalog = cluster
    offer = choices.offer(SITE, partitions, catalog, "bob", NOW, gpu_memory={"v100-sxm2": 32})
    parts = {p["name"]: p for p in offer["partitions"]}
    assert [(m["type"], m["free"], m["total"], m["memory_gb"]) for m in parts["gpu"]["models"]] == [
        ("v100-pcie", 4, 4, None), ("v100-sxm2", 3, 4, 32),
    ]  # fmt: skip
    assert parts["cpu"]["gpus"] is False and parts["cpu"]["cores"] == 16
    assert [a["name"] for a in offer["accounts"]] == ["portal", "lab-nlp"]
    nlp_on_pcie = {q["name"]: q["reason"] for q in offer["qos"]["lab-nlp"]["pcie"]}
    assert nlp_on_pcie["nlp"] == "Partition pcie denies QOS nlp"
    ((course,),) = [[r for r in offer["reservations"] if r["name"] == "vision-course"]]
    assert course["reasons"]["sxm2"] == "Reservation vision-course is not open to you"
    alice = choices.offer(SITE, partitions, catalog, "alice", NOW, last={"account": "lab-vision"})
    assert [a["name"] for a in alice["accounts"]] == ["lab-vision", "portal"]  # the last first
    ((course,),) = [[r for r in alice["reservations"] if r["name"] == "vision-course"]]
    assert course["reasons"]["sxm2"] == "" and course["reasons"]["pcie"].startswith("Its nodes")
    assert course["window"] == "Sat 28 Nov 12:08 to Sun 28 Nov 2027 12:08"  # a year-long one


def test_the_account_s_default_qos_is_offered_disabled_where_the_partition_denies_it(cluster):
    """bob's lab-nlp on pcie: its usual QOS nlp is denied there, so "the
    account's default" is no choice (the page once said "Can start now");
    a CPU session's default is the cpu QOS the portal names for it."""
    partitions, catalog = cluster
    offer = choices.offer(SITE, partitions, catalog, "bob", NOW)
    assert offer["usual_qos"]["lab-nlp"]["pcie"] == {
        "name": "nlp", "reason": "Partition pcie denies QOS nlp"
    }  # fmt: skip
    assert offer["usual_qos"]["lab-nlp"]["gpu"] == {"name": "nlp", "reason": ""}
    assert offer["usual_qos"]["portal"]["cpu"] == {"name": "cpu", "reason": ""}
    assert choices.offered_qos(offer) == ["cpu", "nlp", "portal"]
    # without the QOS choice, the account itself is disabled there
    no_qos = profile_from_dict({**SITE.to_dict(), "choose": ["account"]})
    offer = choices.offer(no_qos, partitions, catalog, "bob", NOW)
    nlp = next(a for a in offer["accounts"] if a["name"] == "lab-nlp")
    assert nlp["reasons"]["pcie"] == "Partition pcie denies QOS nlp" and not nlp["reasons"]["gpu"]


def test_a_reservation_s_nodes_count_free_only_inside_it(cluster):
    """n3 (2 v100-sxm2) is held by vision-course: sxm2's free GPUs leave it
    out, and the reservation's view of sxm2 is n3's alone."""
    partitions, catalog = cluster
    sxm2 = partitions["sxm2"]
    n3 = next(n for n in sxm2.nodes if n.name == "n3")
    offer = choices.offer(SITE, partitions, catalog, "alice", NOW)
    part = next(p for p in offer["partitions"] if p["name"] == "sxm2")
    assert part["free"] == sxm2.gpus_free - n3.gpus_free and part["total"] == sxm2.gpus
    assert len(part["nodes_free"]) == len(sxm2.nodes) - 1
    course = next(r for r in offer["reservations"] if r["name"] == "vision-course")
    inside = course["free"]["sxm2"]
    assert (inside["free"], inside["nodes_free"]) == (n3.gpus_free, [n3.gpus_free])
    assert [(m["type"], m["total"], m["most_on_node"]) for m in inside["models"]] == [
        ("v100-sxm2", 2, 2)
    ]
    assert "pcie" not in course["free"]  # refused there: no view


def test_without_a_catalog_a_named_account_waits_and_plain_choices_pass(cluster):
    partitions, _ = cluster
    job_slice = SITE.make_slice(1, 2, None, "sxm2", account="lab-vision")
    with pytest.raises(SliceError) as e:
        choices.check(SITE, job_slice, partitions, None, "alice", NOW)
    assert e.value.field == "account" and "not read yet" in str(e.value)
    plain = SITE.make_slice(1, 2, None, "pcie", gpu_type="v100-pcie")
    choices.check(SITE, plain, partitions, None, "alice", NOW)


def test_the_qos_of_a_user_s_session_comes_from_the_catalog_with_no_sacctmgr(cluster):
    """issue 38's bench: 200 users logging in each cost slurmdbd a sacctmgr
    of their QOS; the catalog, read for everyone, answers instead."""
    from types import SimpleNamespace

    from spawners.quota import Quotas

    _, catalog = cluster
    quotas = Quotas(SimpleNamespace(catalog=catalog, timeout=1))
    assert quotas.catalog_qos("alice", "gpu") == "portal"  # the default account's usual QOS
    assert quotas.catalog_qos("bob", "sxm2", account="lab-nlp") == "nlp"
    assert quotas.catalog_qos("alice", "cpu", qos="cpu") == "cpu"  # named by the session
    quotas.warm("alice", ["gpu", "sxm2"])  # at login: nothing to read
    assert not quotas._asking
    assert Quotas(SimpleNamespace(catalog=None, timeout=1)).catalog_qos("alice", "gpu") is None


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"partitions": ["sxm2", "a100"]}, "partitions", "Partition 'a100' does not exist"),
        ({"partitions": ["cpu"], "max_cores": 0, "max_mem_gb": 0}, None, None),
        ({"gpu_types": ["a100"]}, "gpu_types", "GPU model 'a100' is on no node of partition"),
        ({"features": ["ib"]}, "features", "Node feature 'ib' is on no node of partition"),
        ({"max_cores": 64}, "max_cores", "max_cores 64 is more than any node"),
        ({"max_mem_gb": 1024}, "max_mem_gb", "max_mem_gb 1024 is more than any node"),
    ],
)
def test_the_profile_editor_checks_the_site_fields_against_the_cluster(
    cluster, change, field, message
):
    """The admin service's check of a profile's site fields against the
    live cluster (``portal.service.cluster.check_site_fields``), on the
    demo's own sinfo: sinfo alone shows partition cpu's nodes with GPUs, so
    a partition without GPUs there is allowed whatever max_cores says."""
    from portal.core.profiles import ProfileError
    from portal.service.cluster import check_site_fields

    partitions, _ = cluster
    profile = profile_from_dict({**SITE.to_dict(), **change})
    if field is None:
        check_site_fields(profile, partitions)
        return
    with pytest.raises(ProfileError) as e:
        check_site_fields(profile, partitions)
    assert e.value.field == field and str(e.value).startswith(message), e.value


def test_the_admin_service_takes_the_hub_s_catalog_from_its_file(cluster, tmp_path):
    """A notebook job submitted through the admin service is checked against
    what the hub's poll wrote (its snapshot and the catalog beside it), with
    no Slurm command of the service's own; a stale catalog file is not used."""
    import asyncio
    import os
    from dataclasses import replace

    from portal.service.cluster import ClusterSource
    from portal.slurm.model import catalog_path, snapshot_to_json

    partitions, catalog = cluster
    snapshot = tmp_path / "cluster.json"
    snapshot.write_text(snapshot_to_json(partitions, {}))
    fresh = replace(catalog, time=datetime.now().replace(microsecond=0))
    with open(catalog_path(str(snapshot)), "w") as f:
        f.write(fresh.to_json())
    source = ClusterSource(str(snapshot))
    seen_partitions, seen = asyncio.run(source.site_view())
    assert set(seen_partitions) == set(partitions)
    assert seen.accounts_of("carol") == catalog.accounts_of("carol")
    stale = replace(catalog, time=datetime(2026, 1, 1))
    with open(catalog_path(str(snapshot)), "w") as f:
        f.write(stale.to_json())
    assert source._catalog_from_file() is None
    os.remove(catalog_path(str(snapshot)))
    assert source._catalog_from_file() is None
