"""The PyTorch template in a portal session and plainly; TensorBoard through the proxy.

In the session: the template's code cells, run one by one in a ``pytorch``
kernel that the session's Jupyter server starts (its REST API and kernel
websocket, through the hub's proxy), as a user's *Run All* does. Plainly: the
same cells as one script, run by the same user with the same environment's
Python and the session's thread settings (``SLURM_CPUS_ON_NODE``,
``OMP_NUM_THREADS``...), outside Slurm and Jupyter. Both print the template's
``images/sec: N on DEVICE``.

Through the proxy is HTTPS, with the portal's certificate checked against its
CA; the session's own server (the proxy's route target) is reached with the
hub's internal certificate (mutual TLS inside the cluster, ``[tls] internal``).
"""

import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import uuid
from datetime import UTC, datetime

import aiohttp
import requests

from bench.hubs import REPO, ssl_context
from tests.support.hubsettings import CA_CERT
from tests.support.measure import curl_seconds

TEMPLATE = REPO / "notebook_templates" / "pytorch" / "mnist-pytorch.ipynb"
PYTHON = "/opt/portal/envs/pytorch/bin/python"
IMAGES_PER_SEC = re.compile(r"^images/sec: ([0-9.]+) on (.+)$", re.M)
FOLDER = "bench-train"  # in the user's home; TensorBoard's logs go to FOLDER/logs


def cells(max_steps, log_every):
    """The template's code cells, with a short run's parameters and our working folder."""
    nb = json.loads(TEMPLATE.read_text())
    out = [
        "import os\n"
        f"os.makedirs(os.path.expanduser('~/{FOLDER}'), exist_ok=True)\n"
        f"os.chdir(os.path.expanduser('~/{FOLDER}'))"
    ]
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        out.append("".join(cell["source"]))
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            out.append(f"epochs = 1\nmax_steps = {max_steps}\nlog_every = {log_every}")
    return out


def images_per_sec(text):
    match = IMAGES_PER_SEC.search(text)
    if not match:
        raise RuntimeError(f"no 'images/sec' in the output: {text[-1000:]}")
    return float(match.group(1))


# -- in the session --------------------------------------------------------


def _message(msg_type, content, session):
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "username": "bench",
            "session": session,
            "msg_type": msg_type,
            "version": "5.3",
            "date": datetime.now(UTC).isoformat(),
        },
        "parent_header": {},
        "metadata": {},
        "content": content,
        "channel": "shell",
        "buffers": [],
    }


class KernelSocket:
    """The websocket of a kernel of a session: requests on its shell channel,
    as a notebook's tab sends them (``bench/firstcell.py`` times them too)."""

    def __init__(self, ws):
        self.ws = ws
        self.session = uuid.uuid4().hex

    async def request(self, msg_type, content, timeout):
        """Send the shell request ``msg_type``: its reply's content and what it
        printed meanwhile; an error it shows raises ``RuntimeError``."""
        msg = _message(msg_type, content, self.session)
        await self.ws.send_json(msg)
        msg_id = msg["header"]["msg_id"]
        printed = []
        while True:
            reply = await asyncio.wait_for(self.ws.receive_json(), timeout)
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, body = reply["msg_type"], reply["content"]
            if kind == "stream":
                printed.append(body["text"])
            elif kind == "error":
                raise RuntimeError(f"{body['ename']}: {body['evalue']}")
            elif kind == msg_type.replace("_request", "_reply"):
                return body, "".join(printed)

    async def execute(self, code, timeout):
        """Run ``code``: its execute_reply's content and what it printed."""
        content = {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        return await self.request("execute_request", content, timeout)


@contextlib.asynccontextmanager
async def session_kernel(server_url, token, kernel_name):
    """A new ``kernel_name`` kernel of the session at ``server_url``
    (``https://HOST:PORT/user/NAME/``), started through the server's REST API as
    the holder of ``token``, as a ``KernelSocket``; shut down on exit."""
    headers = {"Authorization": f"token {token}"}
    connector = aiohttp.TCPConnector(ssl=ssl_context())
    async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
        async with http.post(server_url + "api/kernels", json={"name": kernel_name}) as r:
            r.raise_for_status()
            kernel = await r.json()
        ws_url = server_url.replace("http", "ws", 1) + f"api/kernels/{kernel['id']}/channels"
        try:
            async with http.ws_connect(ws_url, max_msg_size=0) as ws:
                yield KernelSocket(ws)
        finally:
            async with http.delete(server_url + f"api/kernels/{kernel['id']}"):
                pass


async def _run_in_kernel(server_url, token, code_cells, timeout):
    output = []
    async with session_kernel(server_url, token, "pytorch") as kernel:
        for code in code_cells:
            _, printed = await kernel.execute(code, timeout)
            output.append(printed)
    return "".join(output)


def in_session(server_url, token, code_cells, timeout=600):
    """The cells' output, run in a new ``pytorch`` kernel of the session at ``server_url``."""
    return asyncio.run(_run_in_kernel(server_url, token, code_cells, timeout))


# -- plainly ------------------------------------------------------------------


def plainly(user, code_cells, threads, timeout=600):
    """The cells as one script, run by ``user`` outside Slurm with ``threads`` as in the job."""
    script = "\n\n".join(code_cells) + "\n"
    home = os.path.expanduser(f"~{user}")
    path = f"{home}/{FOLDER}/plain.py"
    subprocess.run(["sudo", "-u", user, "mkdir", "-p", f"{home}/{FOLDER}"], check=True)
    subprocess.run(
        ["sudo", "-u", user, "tee", path], input=script, text=True, check=True, capture_output=True
    )
    env = {
        "SLURM_CPUS_ON_NODE": str(threads),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "OPENBLAS_NUM_THREADS": str(threads),
        "MPLBACKEND": "Agg",
    }
    result = subprocess.run(
        ["sudo", "-u", user, "env", *(f"{k}={v}" for k, v in env.items()), PYTHON, path],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the plain run failed: {result.stderr[-2000:]}")
    return result.stdout


# -- TensorBoard ----------------------------------------------------------------


def start_tensorboard(server_url, token):
    """The session's TensorBoard of ``FOLDER/logs``, started through its API: its model."""
    r = requests.post(
        server_url + "portal/api/tensorboards",
        json={"logdir": f"{FOLDER}/logs"},
        headers={"Authorization": f"token {token}"},
        timeout=120,
        verify=CA_CERT,
    )
    r.raise_for_status()
    return r.json()


def stop_tensorboard(server_url, token, tb):
    requests.delete(
        server_url + f"portal/api/tensorboards/{tb['id']}",
        headers={"Authorization": f"token {token}"},
        timeout=30,
        verify=CA_CERT,
    )


def session_tensorboard(user):
    """``(pid, argv)`` of the user's one TensorBoard (``portal.session.tensorboard.serve``).
    Its socket (``--socket``) is in its job's own ``/tmp``: reached in the
    process's mount namespace (``in_job``)."""
    pids = subprocess.run(
        ["pgrep", "-u", user, "-f", "portal.session.tensorboard.serve"],
        capture_output=True,
        text=True,
    ).stdout.split()
    if len(pids) != 1:
        raise RuntimeError(f"{user} runs {len(pids)} TensorBoards of the portal, not one")
    with open(f"/proc/{pids[0]}/cmdline", "rb") as f:
        return int(pids[0]), f.read().decode().rstrip("\0").split("\0")


def in_job(pid):
    """The command prefix that runs a command, as root, in the mount namespace of
    the job's process ``pid``: its own ``/tmp`` (Slurm's ``job_container/tmpfs``),
    where the session's TensorBoard socket is; the rest of the files are the
    host's. Only the benchmark does this; the portal reaches the socket from
    inside the job, through the session's server."""
    return ("nsenter", f"--mount=/proc/{pid}/ns/mnt", "--")


def tensorboard_times(server_url, target, user, token, tb, target_tls=(), requests_count=20):
    """Median seconds of one scalars request to the TensorBoard ``tb``: through the
    proxy, to the session's server (``target``, the proxy's route: no proxy hop;
    ``target_tls``: curl's options for it, the hub's internal certificate),
    direct on TensorBoard's socket (in its job's ``/tmp``: ``in_job``); and,
    for where the time goes, of the server's smallest authenticated answer
    (``api/status``, no TensorBoard), through the proxy and to the server."""
    headers = {"Authorization": f"token {token}"}
    base = server_url.split("/user/")[0]
    url = base + tb["url"]
    tags = requests.get(
        url + "data/plugin/scalars/tags", headers=headers, timeout=60, verify=CA_CERT
    )
    tags.raise_for_status()
    run = sorted(run for run, run_tags in tags.json().items() if "train/loss" in run_tags)[-1]
    query = f"data/plugin/scalars/scalars?run={run}&tag=train/loss"
    pid, argv = session_tensorboard(user)
    job = in_job(pid)
    socket_path = argv[argv.index("--socket") + 1]
    auth = ("-H", f"Authorization: token {token}")
    proxy = ("--cacert", CA_CERT, *auth)  # the proxy's HTTPS, checked
    status = server_url[len(base) :] + "api/status"  # /user/NAME/api/status
    proxied, server, direct, status_proxied, status_server = [], [], [], [], []
    for _ in range(requests_count):  # interleaved, so all see the same machine
        proxied.append(curl_seconds(*proxy, url + query))
        server.append(curl_seconds(*target_tls, *auth, target + tb["url"] + query))
        direct.append(
            curl_seconds(
                "--unix-socket", socket_path, f"http://tensorboard{tb['url']}{query}", prefix=job
            )
        )
        status_proxied.append(curl_seconds(*proxy, base + status))
        status_server.append(curl_seconds(*target_tls, *auth, target + status))
    return tuple(
        statistics.median(t) for t in (proxied, server, direct, status_proxied, status_server)
    )
