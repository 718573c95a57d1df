"""Sessions over several nodes: one Slurm job, Jupyter on its first node, and
``srun`` from the session reaching every node; a node count beyond the
profile is refused before anything is submitted."""

import asyncio
import re
import subprocess
import time

import pytest

from portal.slurm.parse import expand_hostlist
from tests.support.jobs import partition_nodes, scontrol_job, squeue, user_jobs
from tests.support.kernelcells import run_in_session
from tests.support.testhub import JOB_NAME

PARTITION = "gpu"
# Each task prints its node and the GPUs it sees; one task per GPU on each node.
SRUN_CELL = """
import subprocess
say = 'echo "task $SLURM_PROCID on $SLURMD_NODENAME GPUs $CUDA_VISIBLE_DEVICES"'
done = subprocess.run(["srun", "bash", "-c", say], capture_output=True, text=True, timeout=90)
print(done.stdout, done.stderr)
"""


@pytest.fixture
def two_nodes(cluster):
    nodes = partition_nodes(PARTITION)
    if len(nodes) < 2:
        pytest.skip(
            f"partition {PARTITION} has {len(nodes)} node(s) ({', '.join(nodes)}): "
            "a 2-node session needs the embedded cluster's compute nodes ([cluster] nodes >= 2)"
        )
    return nodes


def tres(job):
    return dict(item.split("=", 1) for item in job["TRES"].split(","))


def test_a_two_node_session_is_one_job_over_both_and_srun_reaches_them(session, two_nodes):
    alice = session("alice", profile="distributed", nodes=2, gpus=1)
    [(job_id, state)] = user_jobs("alice")
    assert state == "RUNNING"
    job = scontrol_job(job_id)
    nodes = expand_hostlist(job["NodeList"])
    assert len(nodes) == len(set(nodes)) == 2 and set(nodes) <= set(two_nodes)
    t = tres(job)
    assert (t["node"], t["gres/gpu"], t["cpu"], t["mem"]) == ("2", "2", "16", "96G")
    assert job["BatchHost"] == nodes[0]

    # Jupyter answers through the proxy, from the first node
    assert alice.lab_answers("alice")
    server = alice.user_model("alice")["servers"][""]
    assert server["user_options"] == {"profile": "distributed", "nodes": 2, "gpus": 1}

    # the home page's card lists both nodes and their GPUs
    home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    node_cell = re.search(r'id="session-node">(.*?)</td>', home, re.S).group(1)
    assert node_cell.strip() == ", ".join(nodes)
    gpus_cell = re.search(r'id="session-gpus">(.*?)</td>', home, re.S).group(1)
    assert re.fullmatch(rf"2 \({nodes[0]}: GPU \d, {nodes[1]}: GPU \d\)", gpus_cell.strip())

    # srun in a notebook's kernel starts one task on each node
    r = alice.api(
        "POST",
        "/users/alice/tokens",
        json={"scopes": ["access:servers!user=alice"], "note": "multinode test", "expires_in": 600},
    )
    assert r.status_code == 201, r.text
    status, printed = asyncio.run(
        run_in_session(alice.url("/user/alice/"), r.json()["token"], SRUN_CELL)
    )
    assert status == "ok", printed
    tasks = sorted(re.findall(r"task (\d) on (\S+) GPUs (\S+)", printed))
    assert [(rank, node) for rank, node, _ in tasks] == [("0", nodes[0]), ("1", nodes[1])], printed
    assert all(gpus.isdigit() for _, _, gpus in tasks), printed


@pytest.mark.parametrize(
    "options, message",
    [
        ({"profile": "pytorch", "nodes": 2, "gpus": 1}, "Nodes must be 1, not 2"),
        ({"profile": "distributed", "nodes": 3, "gpus": 1}, "Nodes must be between 1 and 2, not 3"),
        ({"profile": "distributed", "nodes": "2; id", "gpus": 1}, "Nodes must be a whole number"),
    ],
)
def test_the_rest_api_refuses_nodes_beyond_the_profile_and_submits_nothing(login, options, message):
    bob = login("bob")
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    r = bob.api("POST", "/users/bob/server", json=options)
    assert r.status_code == 400, r.text
    assert message in r.json()["message"]
    time.sleep(0.2)
    assert not squeue("-n", JOB_NAME, "-u", "bob", "-o", "%i")
    sacct = subprocess.run(
        ["sacct", "-n", "-X", "-u", "bob", "--name", JOB_NAME, "-S", since, "-o", "JobID"],
        capture_output=True,
        text=True,
    )
    assert sacct.returncode == 0 and sacct.stdout.strip() == "", sacct.stdout
    assert not bob.user_model("bob")["servers"]


def test_the_admin_api_keeps_max_nodes_within_the_partition(portal, restore_profiles, cluster):
    carol = portal("carol")
    current = carol.profile("distributed")
    assert current["max_nodes"] == 2
    beyond = len(partition_nodes(PARTITION)) + 1
    r = carol.put("distributed", max_nodes=beyond, revision=current["revision"])
    assert r.status_code == 400 and r.json()["field"] == "max_nodes", r.text
    assert f"max_nodes {beyond} is more than the" in r.json()["error"]
    for bad in ("two", 0, 65, True):
        r = carol.put("distributed", max_nodes=bad, revision=current["revision"])
        assert r.status_code == 400 and r.json()["field"] == "max_nodes", (bad, r.text)
    assert carol.profile("distributed")["revision"] == current["revision"]
    # the check's sbatch lines show the largest session over the nodes
    if len(partition_nodes(PARTITION)) < 2:
        return  # a single-node cluster refuses max_nodes 2 itself: the lines below need two
    verdict = carol.send("POST", "api/check", json=current).json()
    assert verdict["error"] is None, verdict
    assert verdict["lines"]["2 nodes × 4 GPUs"].startswith(
        "sbatch --nodes=2 --ntasks-per-node=4 --partition=gpu --gres=gpu:4 --cpus-per-task=8 "
        "--mem=192G"
    )
