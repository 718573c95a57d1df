"""The embedded cluster has a real cluster's shape: this host is the login node
(slurmctld, the hub, the proxy), and sessions run on compute nodes, each in a
network and UTS namespace of its own, reached over the network."""

import os
import re
import socket
import subprocess
import time

import pytest

from deploy.slurm_conf import Cluster
from portal import settings as site_settings
from tests.support.jobs import scontrol_job, user_jobs
from tests.support.testhub import deploy

CLUSTER = site_settings.load()["cluster"]
# Each node as deploy/slurm.sh declares it: its GRES (gpu:MODEL:N) and GPUs
SHAPES = {
    shape.name: shape
    for shape in Cluster.from_settings(site_settings.load(), socket.gethostname()).node_shapes()
}
SCHEME = "https" if site_settings.load()["tls"]["internal"] else "http"  # inside the cluster
pytestmark = pytest.mark.skipif(
    CLUSTER["nodes"] < 2, reason="[cluster] nodes < 2: the embedded cluster is this host alone"
)


def sinfo_nodes():
    """``{node: (gres, state)}`` of every node, as sinfo lists them (once a
    partition: the same each time)."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-O", "NodeList:20,Gres:30,StateLong:20"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {
        name: (gres, state) for name, gres, state in (line.split() for line in out.splitlines())
    }


def slurmd_pid(node):
    return int(open(f"/run/slurm/slurmd-{node}.pid").read())


def namespace(pid, kind):
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def in_node(node, *argv):
    return subprocess.run(
        ["nsenter", f"--net=/var/run/netns/{node}", *argv], capture_output=True, text=True
    )


def test_compute_nodes_are_apart_from_the_login_node(cluster):
    nodes = sinfo_nodes()
    login = socket.gethostname()
    assert login not in nodes
    assert len(nodes) == CLUSTER["nodes"] >= 2
    for node, (gres, _state) in nodes.items():
        assert gres == SHAPES[node].gres, (node, gres)
        pid = slurmd_pid(node)
        # its own network and hostname; its address is its node name's
        assert namespace(pid, "net") != namespace(os.getpid(), "net"), node
        assert namespace(pid, "uts") != namespace(os.getpid(), "uts"), node
        address = socket.gethostbyname(node)
        assert address.startswith(CLUSTER["network"] + ".") and not address.endswith(".1")
        assert f"inet {address}/24" in in_node(node, "ip", "-4", "addr", "show", "eth0").stdout
        # Slurm's commands work on the node, as a user: slurmctld and
        # slurmdbd are reached at the login node's address, not the node's loopback
        for command in (["squeue", "-h"], ["sacct", "-X", "-n", "-S", "now-1hour"]):
            r = in_node(node, "sudo", "-u", "alice", "--", *command)
            assert r.returncode == 0, (node, command, r.stderr)
        # each node has its own GPU device files
        assert sorted(os.listdir(f"/dev/portal-gpu/{node}")) == [
            f"gpu{i}" for i in range(SHAPES[node].gpus)
        ]


def listeners(node, port):
    """``[{"address", "pid"}]`` of the sockets listening at ``port`` in ``node``'s network."""
    out = in_node(node, "ss", "-ltnpH", f"sport = :{port}").stdout
    return [
        {"address": line.split()[3].rsplit(":", 1)[0], "pid": re.search(r"pid=(\d+)", line)[1]}
        for line in out.splitlines()
    ]


def test_a_session_runs_on_a_compute_node_and_answers_through_the_proxy(login):
    alice = login("alice")
    r = alice.api("POST", "/users/alice/server", json={"profile": "pytorch", "gpus": 1})
    assert r.status_code in (201, 202), r.text
    try:
        model = alice.wait_ready("alice")
        (job_id, state), *_ = user_jobs("alice")
        node = scontrol_job(job_id)["BatchHost"]
        assert node in sinfo_nodes() and node != socket.gethostname()
        # Jupyter listens on its node's cluster address only, not on loopback
        # and not on every interface; the hub and the proxy reach it there
        log = open(f"/home/alice/.portal/logs/jupyter-{job_id}.log").read()
        address = socket.gethostbyname(node)
        assert f"on {node} ({address})" in log
        port = int(re.search(rf"{SCHEME}://{re.escape(address)}:(\d+)/", log).group(1))
        (listener,) = listeners(node, port)
        assert listener["address"] == address
        # it reaches the hub's API at the login node's address (over TLS: [tls] internal)
        environ = open(f"/proc/{listener['pid']}/environ", "rb").read().split(b"\0")
        api_url = next(v for v in environ if v.startswith(b"JUPYTERHUB_API_URL="))
        login = f"JUPYTERHUB_API_URL={SCHEME}://{CLUSTER['network']}.1:"
        assert api_url.startswith(login.encode())
        page = alice.session.get(alice.url(model["servers"][""]["url"] + "lab"), timeout=30)
        assert page.status_code == 200 and "JupyterLab" in page.text
    finally:
        alice.api("DELETE", "/users/alice/server")
    alice.wait_stopped("alice")


def test_the_login_node_offers_the_nodes_only_what_they_need(cluster, hub):
    """An attacker with a shell on a compute node reaches, on the login node,
    slurmctld, slurmdbd, the hub's API and the public HTTPS port: never slapd,
    MariaDB, the proxy's API or the admin service, which listen on loopback."""
    login = f"{CLUSTER['network']}.1"
    node = sorted(sinfo_nodes())[0]
    listeners = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    ports = sorted({int(line.split()[3].rsplit(":", 1)[1]) for line in listeners.splitlines()})
    probe = (
        "import socket, sys\n"
        "for port in map(int, sys.argv[2:]):\n"
        "    s = socket.socket(); s.settimeout(1)\n"
        "    if s.connect_ex((sys.argv[1], port)) == 0: print(port)\n"
        "    s.close()\n"
    )
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    out = in_node(node, *nobody, "/usr/bin/python3", "-c", probe, login, *map(str, ports)).stdout
    reached = {int(p) for p in out.split()}
    site = site_settings.load()
    never = {
        site["ldap"]["server_port"],
        site["hub"]["proxy_api_port"],
        site["portal"]["service_port"],
        3306,
    }
    assert not reached & never, f"reachable from {node}: {sorted(reached & never)}"
    assert 6817 in reached  # slurmctld: srun and squeue from the node
    assert any(8000 <= p < 65536 and p != 6817 for p in reached)  # a hub's API or HTTPS


@pytest.fixture
def crash_node():
    """crash_node(node): every process of ``node`` killed at once, as a power
    loss would (slurmd, the jobs' steps, their servers); the node is started
    again and back in service after the test."""
    crashed = []

    def crash(node):
        pids = (
            in_node(node, "true")
            and subprocess.run(
                ["ip", "netns", "pids", node], capture_output=True, text=True
            ).stdout.split()
        )
        subprocess.run(["kill", "-9", *pids], check=False)
        crashed.append(node)
        return time.monotonic()

    yield crash
    if crashed:
        result = deploy("slurm.sh", "start", check=False)
        assert result.returncode == 0, result.stderr[-2000:]


def test_a_node_that_fails_ends_its_sessions_and_the_other_nodes_keep_theirs(
    login, crash_node, capsys
):
    alice, bob = login("alice"), login("bob")
    # alice's 4 GPUs fill one node; bob's session then runs on the other
    for client, name, gpus in ((alice, "alice", 4), (bob, "bob", 1)):
        r = client.api("POST", f"/users/{name}/server", json={"profile": "pytorch", "gpus": gpus})
        assert r.status_code in (201, 202), r.text
        client.wait_ready(name)
    try:
        (alice_job, _), *_ = user_jobs("alice")
        (bob_job, _), *_ = user_jobs("bob")
        lost, kept = scontrol_job(alice_job)["BatchHost"], scontrol_job(bob_job)["BatchHost"]
        assert lost != kept

        crashed = crash_node(lost)
        marks = {}
        deadline = crashed + 150
        while time.monotonic() < deadline and len(marks) < 3:
            now = time.monotonic() - crashed
            state = sinfo_nodes()[lost][1]
            if "down" in state and "slurm" not in marks:
                marks["slurm"] = now
            if "job" not in marks and not user_jobs("alice"):
                marks["job"] = now
            if "hub" not in marks and not alice.user_model("alice")["servers"]:
                marks["hub"] = now
            time.sleep(0.5)
        with capsys.disabled():
            print(
                f"\nnode {lost} crashed: Slurm marked it down after {marks.get('slurm', -1):.1f}"
                f" s, the job left the queue after {marks.get('job', -1):.1f} s, the hub"
                f" showed the session stopped after {marks.get('hub', -1):.1f} s"
            )
        assert set(marks) == {"slurm", "job", "hub"}, marks
        # how it ended, from Slurm's accounting, on alice's home page
        home = alice.session.get(alice.url("/hub/home"), timeout=30).text
        assert "NODE_FAIL" in home or "node failure" in home.lower(), home[-3000:]
        # bob's session on the other node still runs and answers
        assert user_jobs("bob") == [[bob_job, "RUNNING"]]
        assert bob.lab_answers("bob")
        # the spawn page counts the lost node's GPUs out at once
        page = alice.session.get(alice.url("/hub/spawn"), timeout=30).text
        assert re.search(rf"Not available in gpu:\s*{lost} \(down", page), page[
            page.find("Free now") : page.find("Free now") + 3000
        ]
    finally:
        for client, name in ((alice, "alice"), (bob, "bob")):
            client.api("DELETE", f"/users/{name}/server")
        for client, name in ((alice, "alice"), (bob, "bob")):
            client.wait_stopped(name)
