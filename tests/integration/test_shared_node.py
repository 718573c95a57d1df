"""A node shared by several users: what one user's processes there can reach
of another's session. alice's kernels (every kernel of the session: Python,
the frameworks, R) talk to her server over Unix sockets in a folder of hers
alone, so no TCP port of hers listens on the node but her Jupyter server on
the node's address, and bob, with a job of his own on the same node, hears
nothing of her kernels: he subscribes to every TCP port on the node's
loopback and to her kernels' sockets while she runs a cell."""

import asyncio
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest
import requests

from tests.support.hubsettings import CA_CERT
from tests.support.jobs import scontrol_job, user_jobs
from tests.support.kernelcells import run_in_kernel, run_in_session
from tests.support.measure import figure

JUPYTER_PYTHON = "/opt/portal/envs/jupyter/bin/python"
PROBE_NAME = f"portal-probe-{uuid.uuid4().hex[:8]}"

# bob's probe: SUB sockets on every TCP port of the node's loopback and on
# each socket path given; counts what arrives in SECONDS.
PROBE = r"""
import json, sys, time
import zmq
seconds, ports, paths = float(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
ctx = zmq.Context()
subs = []
for endpoint in [f"tcp://127.0.0.1:{p}" for p in ports] + [f"ipc://{p}" for p in paths]:
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(endpoint)
    except zmq.ZMQError as e:
        print("refused", endpoint, e, flush=True)
        continue
    subs.append(s)
print("listening", len(subs), flush=True)
poller = zmq.Poller()
for s in subs:
    poller.register(s, zmq.POLLIN)
got, end = [], time.monotonic() + seconds
while time.monotonic() < end:
    for s, _ in poller.poll(200):
        got.append(b"".join(s.recv_multipart()).decode(errors="replace"))
print(json.dumps({"endpoints": len(subs), "messages": got}))
"""


def in_node(node, *argv):
    return subprocess.run(
        ["nsenter", f"--net=/var/run/netns/{node}", *argv],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def tcp_listeners(node):
    """``[(address, port, uid)]`` of every TCP socket listening on ``node``."""
    rows = []
    for line in in_node(node, "ss", "-ltnHe").splitlines():
        fields = line.split()
        local = fields[3]
        uid = re.search(r"\buid:(\d+)", line)
        address, _, port = local.rpartition(":")
        rows.append((address.strip("[]"), int(port), int(uid.group(1)) if uid else 0))
    return rows


def kernel_sockets(node):
    """The paths of the kernels' ipc sockets listening on ``node``."""
    out = in_node(node, "ss", "-xlHp")
    return sorted({m for m in re.findall(r"(\S*kernel-[0-9a-f-]+-ipc-\d+)", out)})


@pytest.fixture
def bobs_folder(cluster):
    # in bob's home, shared by the nodes as on a cluster: a job's /tmp is its own
    folder = tempfile.mkdtemp(prefix="portal-probe-", dir=pwd.getpwnam("bob").pw_dir)
    shutil.chown(folder, "bob", "portal-users")
    yield folder
    subprocess.run(["scancel", "-n", PROBE_NAME], check=False)
    shutil.rmtree(folder, ignore_errors=True)


def start_kernels(server_url, token):
    """One kernel of every kernelspec of the session, each shown to run a cell."""
    headers = {"Authorization": f"token {token}"}
    specs = requests.get(server_url + "api/kernelspecs", headers=headers, verify=CA_CERT,
                         timeout=60).json()["kernelspecs"]  # fmt: skip
    kernels = {}
    for name in specs:
        r = requests.post(server_url + "api/kernels", json={"name": name}, headers=headers,
                          verify=CA_CERT, timeout=120)  # fmt: skip
        assert r.status_code == 201, (name, r.text)
        kernels[name] = r.json()["id"]
    for name, kernel in kernels.items():
        code = 'cat("ran", "\\n")' if name == "ir" else 'print("ran")'
        status, printed = asyncio.run(run_in_kernel(server_url, token, kernel, code, 180))
        assert status == "ok" and "ran" in printed, (name, status, printed)
    return kernels


@pytest.mark.slow
def test_bob_on_alices_node_hears_nothing_of_her_kernels(session, bobs_folder, capsys):
    alice = session("alice", profile="pytorch", gpus=1)
    [(job_id, _)] = user_jobs("alice")
    node = scontrol_job(job_id)["NodeList"]
    uid = pwd.getpwnam("alice").pw_uid
    r = alice.api("POST", "/users/alice/tokens",
                  json={"scopes": ["access:servers!user=alice"], "expires_in": 600})  # fmt: skip
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    server_url = alice.url("/user/alice/")
    kernels = start_kernels(server_url, token)
    assert {"python3", "ir"} <= set(kernels), kernels

    # no TCP port of hers but the server's, on the node's address
    hers = [(a, p) for a, p, u in tcp_listeners(node) if u == uid]
    sockets = kernel_sockets(node)
    figure(capsys, f"shared node: alice's TCP listeners on {node}: {hers}; "
                   f"{len(sockets)} kernel sockets for {len(kernels)} kernels")  # fmt: skip
    assert len(hers) == 1, hers
    address, _ = hers[0]
    assert not address.startswith("127.") and address not in ("*", "0.0.0.0", "::"), hers
    assert len(sockets) >= 5 * len(kernels), sockets  # shell, iopub, stdin, control, hb

    # bob's job on her node subscribes to every loopback port and to her sockets
    loopback = sorted({p for a, p, _ in tcp_listeners(node) if a.startswith("127.")})
    probe = os.path.join(bobs_folder, "probe.py")
    with open(probe, "w") as f:
        f.write(PROBE)
    out = os.path.join(bobs_folder, "probe.out")
    submit = subprocess.run(
        ["sudo", "-u", "bob", "sbatch", "--parsable", "-J", PROBE_NAME, "-w", node,
         "--gres=gpu:1", "-c", "1", "--mem=512M", "-t", "5", f"--chdir={bobs_folder}",
         f"--output={out}", "--wrap",
         f"{JUPYTER_PYTHON} {probe} 12 '{json.dumps(loopback)}' '{json.dumps(sockets)}'"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    probe_job = submit.stdout.strip()
    deadline = time.monotonic() + 60
    while "listening" not in (open(out).read() if os.path.exists(out) else ""):
        assert time.monotonic() < deadline, f"bob's probe job {probe_job} did not start"
        time.sleep(0.3)
    secret = f"SECRET-{uuid.uuid4().hex}"
    for _ in range(3):
        status, printed = asyncio.run(run_in_session(server_url, token, f"print('{secret}')"))
        assert status == "ok" and secret in printed, printed
    while subprocess.run(["squeue", "-h", "-j", probe_job], capture_output=True,
                         text=True).stdout.strip():  # fmt: skip
        assert time.monotonic() < deadline + 60, "bob's probe did not end"
        time.sleep(0.5)
    heard = json.loads(open(out).read().strip().splitlines()[-1])
    figure(capsys, f"shared node: bob subscribed to {heard['endpoints']} endpoints "
                   f"({len(loopback)} loopback ports, {len(sockets)} kernel sockets) "
                   f"while alice ran 3 cells: {len(heard['messages'])} messages")  # fmt: skip
    assert not heard["messages"], heard["messages"][:5]
