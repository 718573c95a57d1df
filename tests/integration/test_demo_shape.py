"""The demo cluster has a real site's shape (issue 38), against the real
slurmctld and slurmdbd: two GPU models as typed GRES on partitions of their
own, each model's TRES in accounting, node features, a CPU partition whose
QOS allows no GPU, lab accounts with fairshare and a QOS of their own, and a
reservation for one LDAP group's members on a node of its own. What it
checks is read from deploy/portal.toml's [cluster] tables, as deploy/slurm.sh
built it."""

import socket
import subprocess
import time
import uuid

import pytest

from deploy.slurm_accounts import group_members, lab_accounts, reservations
from deploy.slurm_conf import Cluster
from portal import settings as site_settings
from tests.support.testhub import deploy

SETTINGS = site_settings.load()
CLUSTER = Cluster.from_settings(SETTINGS, socket.gethostname().split(".")[0])
SHAPES = {shape.name: shape for shape in CLUSTER.node_shapes()}
PARTITIONS = {spec.name: spec for spec, _ in CLUSTER.partition_nodes()}
CPU_QOS = SETTINGS["cluster"]["cpu_qos"]
# A job name of our own: only this file's jobs are looked for and cancelled.
JOB_NAME = f"portal-shape-{uuid.uuid4().hex[:8]}"

pytestmark = pytest.mark.skipif(
    len(CLUSTER.gpu_types()) < 2 or not reservations(SETTINGS["cluster"]),
    reason="[cluster] declares fewer than two GPU models or no reservation",
)


def sbatch_as(user, *args, seconds=2):
    return subprocess.run(
        ["sudo", "-u", user, "sbatch", "--parsable", "-J", JOB_NAME, "--chdir=/tmp",
         "--output=/dev/null", "--time=10", *args, "--wrap", f"sleep {seconds}"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def submitted(result):
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def job(job_id):
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=True
    ).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def accounted(job_id, timeout=60):
    """sacct's fields of the ended job ``job_id``, once it has ended and its
    record is whole: a job of a second may be listed as ended before its
    start's fields (partition, QOS, reservation) are in."""
    fields = ("State", "Partition", "NodeList", "Account", "QOS", "AllocTRES", "Reservation")
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", ",".join(fields)],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        row = dict(zip(fields, out.split("|"), strict=True)) if out else {}
        ended = row and row["State"] not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING")
        if ended and row["Partition"] and row["QOS"] != "Unknown":
            return row
        assert time.monotonic() < deadline, f"job {job_id} has not ended: {out!r}"
        time.sleep(1)


def members(group):
    line = subprocess.run(["getent", "group", group], capture_output=True, text=True).stdout
    return sorted(group_members(line)[0])


def associations(account):
    out = subprocess.run(
        ["sacctmgr", "-n", "-P", "list", "assoc", f"account={account}", "cluster=portal",
         "format=user,qos,defaultqos,fairshare"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [line.split("|") for line in out.splitlines()]


@pytest.fixture
def cleanup(cluster):
    yield
    subprocess.run(["scancel", "-n", JOB_NAME], check=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-n", JOB_NAME], capture_output=True, text=True)
        if not out.stdout.strip():
            return
        time.sleep(0.3)
    raise AssertionError(f"jobs outlived scancel: {out.stdout}")


def test_each_gpu_model_is_its_nodes_gres_and_each_partition_holds_its_nodes(cluster):
    for name, shape in SHAPES.items():
        shown = node_fields(name)
        assert shown["Gres"] == shape.gres, (name, shown)
        assert shown["AvailableFeatures"] == ",".join(shape.features), (name, shown)
        assert (int(shown["CPUTot"]), int(shown["RealMemory"])) == (shape.cpus, shape.mem_mb)
    for name, spec in PARTITIONS.items():
        out = subprocess.run(
            ["scontrol", "-o", "show", "partition", name], capture_output=True, text=True,
            check=True,
        ).stdout  # fmt: skip
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        nodes = subprocess.run(
            ["scontrol", "show", "hostnames", fields["Nodes"]], capture_output=True, text=True
        ).stdout.split()
        assert nodes == list(spec.nodes), (name, fields["Nodes"])
        assert (fields["Default"] == "YES") == (name == SETTINGS["slurm"]["partition"])
        if spec.cpu_only:
            assert fields["QoS"] == CPU_QOS
        else:
            assert set(fields["DenyQos"].split(",")) == {CPU_QOS, *spec.deny_qos}, fields
    tres = subprocess.run(
        ["sacctmgr", "-n", "-P", "list", "tres", "format=type,name"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for model in CLUSTER.gpu_types():
        assert f"gres|gpu:{model}" in tres


def node_fields(name):
    out = subprocess.run(
        ["scontrol", "-o", "show", "node", name], capture_output=True, text=True, check=True
    ).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def model_partitions():
    """``{model: a partition all of whose nodes are of that model, with one
    node that takes any job}``: sxm2 and pcie in the demo."""
    found = {}
    for name, spec in PARTITIONS.items():
        models = {SHAPES[n].gpu_type for n in spec.nodes}
        if len(models) == 1 and not spec.cpu_only and name != SETTINGS["slurm"]["partition"]:
            found.setdefault(models.pop(), name)
    return found


def test_a_job_of_each_model_lands_on_its_partition_and_sacct_records_the_model(cleanup):
    by_model = model_partitions()
    assert len(by_model) >= 2, by_model
    jobs = {}
    for model, partition in by_model.items():
        r = sbatch_as("alice", "-p", partition, f"--gres=gpu:{model}:1")
        jobs[model] = (submitted(r), partition)
    for model, (job_id, partition) in jobs.items():
        ended = accounted(job_id)
        assert ended["State"] == "COMPLETED", ended
        assert ended["Partition"] == partition
        assert SHAPES[ended["NodeList"]].gpu_type == model, ended
        tres = ended["AllocTRES"].split(",")
        assert f"gres/gpu:{model}=1" in tres and "gres/gpu=1" in tres, ended
        assert not any(t.startswith("gres/gpu:") and model not in t for t in tres), ended
        assert (ended["Account"], ended["QOS"]) == ("portal", "portal")


def test_a_model_its_partition_lacks_and_a_feature_its_nodes_lack_are_refused(cleanup):
    (model_a, part_a), (model_b, _part_b) = list(model_partitions().items())[:2]
    r = sbatch_as("bob", "-p", part_a, f"--gres=gpu:{model_b}:1")
    assert r.returncode != 0, f"Slurm accepted job {r.stdout.strip()}"
    assert "Requested node configuration is not available" in r.stderr, r.stderr
    absent = next(
        f for s in SHAPES.values() for f in s.features
        if all(f not in SHAPES[n].features for n in PARTITIONS[part_a].nodes)
    )  # fmt: skip
    r = sbatch_as("bob", "-p", part_a, "--gres=gpu:1", f"--constraint={absent}")
    assert r.returncode != 0, f"Slurm accepted job {r.stdout.strip()}"
    # a feature of one of the default partition's nodes takes the job there
    default = PARTITIONS[SETTINGS["slurm"]["partition"]]
    node = default.nodes[-1]
    only = next(f for f in SHAPES[node].features if all(
        f not in SHAPES[n].features for n in default.nodes if n != node))  # fmt: skip
    ended = accounted(submitted(sbatch_as("bob", "--gres=gpu:1", f"--constraint={only}")))
    assert (ended["State"], ended["NodeList"]) == ("COMPLETED", node), ended


def test_a_cpu_job_runs_with_no_gpu_on_the_cpu_partition_only(cleanup):
    cpu = next(name for name, spec in PARTITIONS.items() if spec.cpu_only)
    ended = accounted(submitted(sbatch_as("bob", "-p", cpu, f"--qos={CPU_QOS}", "-c", "4")))
    assert (ended["State"], ended["QOS"], ended["Account"]) == ("COMPLETED", CPU_QOS, "portal")
    assert "gres/gpu" not in ended["AllocTRES"], ended
    # the partition's QOS allows no GPU, whatever the job's QOS
    r = sbatch_as("bob", "-p", cpu, f"--qos={CPU_QOS}", "--gres=gpu:1")
    assert r.returncode != 0 and "QOSMaxGRESPerJob" in r.stderr, r.stderr
    # the QOS portal still takes a GPU in every job, there too
    r = sbatch_as("bob", "-p", cpu, "-c", "4")
    assert r.returncode != 0 and "QOSMinGRES" in r.stderr, r.stderr
    # and the QOS cpu, which bob may use (above), holds no GPU node's cores on
    # the other partitions: they deny it (Slurm 22.05 says only "Invalid qos")
    r = sbatch_as("bob", "-p", SETTINGS["slurm"]["partition"], f"--qos={CPU_QOS}", "-c", "4")
    assert r.returncode != 0, f"Slurm accepted job {r.stdout.strip()}"
    assert "Invalid qos specification" in r.stderr, r.stderr


def test_lab_accounts_have_their_groups_members_their_qos_and_fairshare(cleanup):
    labs = lab_accounts(SETTINGS["cluster"])
    assert len(labs) >= 2
    service = {"root", SETTINGS["hub"]["user"]} - {""}
    everyone = set()
    for lab in labs:
        rows = associations(lab.name)
        (own,) = [row for row in rows if not row[0]]
        assert own[1:] == [lab.default_qos, lab.default_qos, str(lab.fairshare)], own
        users = {row[0] for row in rows if row[0]}
        assert users == set(members(lab.group)) | service, (lab.name, users)
        everyone |= set(members(lab.group))
        for user in members(lab.group):  # their default account stays portal
            out = subprocess.run(
                ["sacctmgr", "-n", "-P", "list", "user", user, "format=defaultaccount"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
            assert out == "portal", (user, out)
    # one demo user is in both, each of the others in one
    assert any(all(u in members(lab.group) for lab in labs) for u in everyone)
    vision, nlp = labs[0], labs[1]
    outsider = next(u for u in members(nlp.group) if u not in members(vision.group))
    insider = next(u for u in members(vision.group) if u not in members(nlp.group))
    r = sbatch_as(outsider, f"--account={vision.name}", "--gres=gpu:1")
    assert r.returncode != 0 and "Invalid account" in r.stderr, r.stderr
    ended = accounted(submitted(sbatch_as(insider, f"--account={vision.name}", "--gres=gpu:1")))
    assert (ended["State"], ended["Account"], ended["QOS"]) == (
        "COMPLETED", vision.name, vision.default_qos)  # fmt: skip
    # sshare knows the accounts' shares
    out = subprocess.run(
        ["sshare", "-n", "-P", "-A", ",".join(lab.name for lab in labs),
         "-o", "Account,User,RawShares"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = [line.split("|") for line in out.splitlines()]
    shares = {account.strip(): raw for account, user, raw in rows if not user}
    assert all(shares.get(lab.name) == str(lab.fairshare) for lab in labs), out


def test_a_partition_denies_a_lab_qos(cleanup):
    denied = next((name, spec) for name, spec in PARTITIONS.items() if spec.deny_qos)
    name, spec = denied
    lab = next(a for a in lab_accounts(SETTINGS["cluster"]) if a.default_qos in spec.deny_qos)
    user = members(lab.group)[0]
    r = sbatch_as(user, "-p", name, f"--account={lab.name}", "--gres=gpu:1")
    assert r.returncode != 0, f"Slurm accepted job {r.stdout.strip()}"
    assert "Invalid qos specification" in r.stderr, r.stderr  # 22.05's word for DenyQos
    # the same account and QOS on another partition, the same partition under
    # the account portal: both run
    other = next(n for n, s in PARTITIONS.items() if not s.cpu_only and n != name)
    ended = accounted(
        submitted(sbatch_as(user, "-p", other, f"--account={lab.name}", "--gres=gpu:1"))
    )
    assert (ended["State"], ended["QOS"]) == ("COMPLETED", lab.default_qos), ended
    ended = accounted(submitted(sbatch_as(user, "-p", name, "--gres=gpu:1")))
    assert (ended["State"], ended["QOS"]) == ("COMPLETED", "portal"), ended


def test_the_reservation_is_its_groups_members_alone(cleanup):
    (spec, *_) = reservations(SETTINGS["cluster"])
    out = subprocess.run(
        ["scontrol", "-o", "show", "reservation", spec.name], capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    assert fields["State"] == "ACTIVE"
    assert sorted(fields["Users"].split(",")) == members(spec.group)
    nodes = subprocess.run(
        ["scontrol", "show", "hostnames", fields["Nodes"]], capture_output=True, text=True
    ).stdout.split()
    assert nodes == list(spec.nodes)
    partition = next(n for n, p in PARTITIONS.items() if set(spec.nodes) <= set(p.nodes))
    member = members(spec.group)[0]
    outsider = next(u for u in ("alice", "bob", "carol") if u not in members(spec.group))
    r = sbatch_as(outsider, "-p", partition, f"--reservation={spec.name}", "--gres=gpu:1")
    assert r.returncode != 0 and "Access denied to requested reservation" in r.stderr, r.stderr
    r = sbatch_as(member, "-p", partition, f"--reservation={spec.name}", "--gres=gpu:1")
    ended = accounted(submitted(r))
    assert ended["State"] == "COMPLETED" and ended["Reservation"] == spec.name, ended
    assert ended["NodeList"] in spec.nodes


def test_a_second_start_changes_nothing(cluster):
    r = deploy("slurm.sh", "start", check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    # nothing written, added, modified or removed: nothing said
    said = [line for line in r.stderr.splitlines() if line.startswith("[slurm]")]
    assert said == [], said
