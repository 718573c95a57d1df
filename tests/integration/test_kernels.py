"""The environments and their kernels, as a session sees them.

Everything runs as the demo user alice (sessions run as their user, who can
read neither /root nor this checkout), from the files that deploy/envs.sh and
deploy/data.sh installed. No hub and no Slurm job: the single-user server is
started directly, as the batch script would after activating the jupyter env.
"""

import asyncio
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests
from tornado.websocket import websocket_connect

from portal import settings as portal_settings
from tests.support.kernelcells import RUN_CELLS

USER = "alice"
SETTINGS = portal_settings.load()
PREFIX = Path(SETTINGS["envs"]["prefix"])
JUPYTER = Path(SETTINGS["envs"]["jupyter"])
FRAMEWORKS = SETTINGS["envs"]["frameworks"]
SHARED_DATA = Path(SETTINGS["data"]["shared_data"])

# Framework environment -> (how its kernel names it, the module it imports).
KNOWN = {
    "pytorch": ("PyTorch", "torch"),
    "tensorflow": ("TensorFlow", "tensorflow"),
    "mxnet": ("MXNet", "mxnet"),
}
THREADS = "3"  # what the batch script exports from SLURM_CPUS_ON_NODE


def env_of(framework):
    return PREFIX / "envs" / framework


@pytest.fixture(scope="module")
def workdir():
    """A folder of alice's, outside her home: connection files, server root."""
    path = Path(tempfile.mkdtemp(prefix="portal-kernels-"))
    shutil.chown(path, user=USER)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_user(*cmd, env=None, timeout=60, check=True):
    """Run ``cmd`` as alice in /tmp with a session's environment."""
    session_env = {
        "PATH": f"{JUPYTER}/bin:/usr/bin:/bin",
        "SHELL": "/bin/bash",
        "OMP_NUM_THREADS": THREADS,
        **(env or {}),
    }
    result = subprocess.run(
        ["sudo", "-u", USER, "env", *(f"{k}={v}" for k, v in session_env.items()), *cmd],
        cwd="/tmp",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert result.returncode == 0, f"{cmd} failed as {USER}:\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def kernelspecs():
    out = as_user(f"{JUPYTER}/bin/jupyter", "kernelspec", "list", "--json").stdout
    return json.loads(out)["kernelspecs"]


def short_version(version):
    return ".".join(version.split("+")[0].split(".")[:2])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_framework_imports_and_its_kernel_names_its_version(framework, kernelspecs):
    label, module = KNOWN.get(framework, (framework, framework))
    python = env_of(framework) / "bin" / "python"
    version = as_user(
        str(python), "-c", f"import {module}; print({module}.__version__)"
    ).stdout.strip()
    assert version

    spec = kernelspecs[framework]["spec"]
    assert spec["argv"] == [
        str(python),
        "-m",
        "portal_kernel_launcher",  # ipykernel's, with no TCP socket over ipc
        "-f",
        "{connection_file}",
        "--ext=portal_tensorboard_magic",  # the portal's %tensorboard
    ]
    assert spec["display_name"] == f"Python 3 ({label} {short_version(version)})"
    assert spec["language"] == "python"


def test_plain_python_and_r_kernels_are_listed(kernelspecs):
    python3 = kernelspecs["python3"]["spec"]
    assert python3["argv"][0] == str(JUPYTER / "bin" / "python")
    assert python3["display_name"] == "Python 3"
    ir = kernelspecs["ir"]["spec"]
    assert ir["language"] == "R"
    assert "IRkernel::main()" in ir["argv"]
    assert as_user("Rscript", "-e", "library(IRkernel)").returncode == 0


def test_kernelspecs_leave_thread_settings_to_the_allocation(kernelspecs):
    for name, kernel in kernelspecs.items():
        overridden = [k for k in kernel["spec"].get("env", {}) if "THREADS" in k]
        assert not overridden, f"kernel {name} sets {overridden}"


def kernel_cases():
    """(kernel, a cell showing its interpreter and threads, what it shows, what 1+1 shows)"""
    python_probe = "import os, sys; print(sys.executable, os.environ['OMP_NUM_THREADS'])"
    pythons = {name: env_of(name) for name in FRAMEWORKS} | {"python3": JUPYTER}
    cases = [
        pytest.param(name, python_probe, f"{env}/bin/python {THREADS}", "2", id=name)
        for name, env in pythons.items()
    ]
    r_probe = 'cat(Sys.getenv("OMP_NUM_THREADS"))'
    cases.append(pytest.param("ir", r_probe, THREADS, "[1] 2", id="ir"))
    return cases


@pytest.mark.parametrize("kernel, probe, expected, two", kernel_cases())
def test_kernel_starts_and_runs_code_as_the_user(kernel, probe, expected, two, workdir):
    start = time.monotonic()
    result = as_user(
        f"{JUPYTER}/bin/python",
        "-c",
        RUN_CELLS,
        "text/plain",
        kernel,
        "1+1",
        probe,
        env={"JUPYTER_RUNTIME_DIR": str(workdir)},
        timeout=120,
    )
    elapsed = time.monotonic() - start
    assert json.loads(result.stdout.splitlines()[-1]) == [["ok", two], ["ok", expected]]
    print(f"kernel {kernel}: started, ran 2 cells and stopped in {elapsed:.1f} s")


# Starts KERNEL over ipc in the private runtime folder, runs a cell whose
# forked child prints (ipykernel's IOPub pipe), and lists the kernel's TCP
# listening sockets (ss shows a user the processes of their own sockets).
IPC_KERNEL = """
import json, os, subprocess, sys, uuid
from jupyter_client.manager import KernelManager
# as the server's kernels: the connection file, and so the sockets, in the runtime folder
runtime = os.environ["JUPYTER_RUNTIME_DIR"]
km = KernelManager(kernel_name=sys.argv[1], transport="ipc",
                   connection_file=os.path.join(runtime, f"kernel-{uuid.uuid4()}.json"))
km.start_kernel()
kc = km.client()
kc.start_channels()
try:
    kc.wait_for_ready(timeout=60)
    out = []
    code = ("import os\\nif os.fork() == 0:\\n"
            "    print('from a fork', flush=True)\\n    os._exit(0)\\nos.wait()")
    kc.execute_interactive(code, timeout=60,
                           output_hook=lambda m: out.append(m["content"].get("text", "")))
    # JupyterLab's debugger asks the kernel to start debugpy, which listens on TCP
    request = kc.session.msg("debug_request", {"type": "request", "seq": 1,
        "command": "initialize", "arguments": {"adapterID": "", "clientID": "x"}})
    kc.control_channel.send(request)
    debug = kc.control_channel.get_msg(timeout=30)["content"]
    pid = km.provisioner.pid
    ss = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    tcp = [line.split()[3] for line in ss.splitlines() if f"pid={pid}," in line]
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print(json.dumps({"printed": "".join(out), "tcp": tcp, "debug": debug}))
"""


@pytest.mark.parametrize("kernel", [*FRAMEWORKS, "python3"])
def test_a_kernel_over_ipc_listens_on_no_tcp_port_even_when_debugged(kernel, workdir):
    """The sessions' kernels speak ipc (deploy/jupyter_server_config.py); the
    portal's launcher moves ipykernel's last TCP socket, the pipe of forked
    processes' output, to ipc as well: nothing of the kernel listens on the
    node's loopback, which every user of the node reaches."""
    assert oct(workdir.stat().st_mode & 0o777) == "0o700"
    result = as_user(f"{JUPYTER}/bin/python", "-c", IPC_KERNEL, kernel,
                     env={"JUPYTER_RUNTIME_DIR": str(workdir)}, timeout=120)  # fmt: skip
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["tcp"] == [], seen
    assert "from a fork" in seen["printed"], seen
    assert seen["debug"].get("success") is not True, seen  # no debugger to start


DEFAULT_KERNEL = """
import sys
from traitlets.config.loader import PyFileConfigLoader
config = PyFileConfigLoader(sys.argv[1]).load_config()
print(config.MappingKernelManager.default_kernel_name)
"""


@pytest.mark.parametrize(
    "environment, default",
    [
        ("tensorflow", "tensorflow"),
        ("pytorch", "pytorch"),
        ("", "python3"),
        ("nosuchenv", "python3"),
    ],
)
def test_default_kernel_is_the_environments(environment, default):
    config = JUPYTER / "etc" / "jupyter" / "jupyter_server_config.py"
    result = as_user(
        f"{JUPYTER}/bin/python",
        "-c",
        DEFAULT_KERNEL,
        str(config),
        env={"PORTAL_ENVIRONMENT": environment},
    )
    assert result.stdout.strip() == default


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def auth(token):
    return {"Authorization": f"token {token}"}


@pytest.fixture(scope="module")
def server(workdir):
    """jupyter server as alice in a 'tensorflow' session, as the batch script
    starts it (jupyter env on PATH, stdout not a terminal)."""
    port, token = free_port(), secrets.token_hex(16)
    cmd = [
        "sudo",
        "-u",
        USER,
        "env",
        f"PATH={JUPYTER}/bin:/usr/bin:/bin",
        "SHELL=/bin/bash",
        "PORTAL_ENVIRONMENT=tensorflow",
        f"JUPYTER_RUNTIME_DIR={workdir}",
        f"{JUPYTER}/bin/jupyter",
        "server",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={workdir}",
    ]
    log = open(workdir / "server.log", "w")
    proc = subprocess.Popen(cmd, cwd="/tmp", stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    headers = auth(token)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (workdir / "server.log").read_text()
            try:
                if requests.get(f"{url}/api/status", headers=headers, timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "jupyter server did not answer in 60 s"
            time.sleep(0.2)
        yield url, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_server_lists_the_kernels_with_the_sessions_default(server):
    url, token = server
    r = requests.get(f"{url}/api/kernelspecs", headers=auth(token), timeout=10)
    assert r.status_code == 200
    body = r.json()
    assert body["default"] == "tensorflow"
    assert {"python3", "ir", *FRAMEWORKS} <= set(body["kernelspecs"])


async def test_terminal_is_a_login_bash_of_the_user_in_the_sessions_environment(server):
    url, token = server
    r = requests.post(f"{url}/api/terminals", headers=auth(token), timeout=10)
    assert r.status_code == 200, r.text
    name = r.json()["name"]
    ws_url = url.replace("http", "ws", 1) + f"/terminals/websocket/{name}?token={token}"
    ws = await websocket_connect(ws_url)
    try:
        # The echoed command shows "$(id -un)", the output shows the answer.
        await ws.write_message(
            json.dumps(
                [
                    "stdin",
                    'echo "RESULT:$(id -un):$0:$(shopt -q login_shell && echo login)'
                    ':$(command -v python)"\r',
                ]
            )
        )
        want = re.compile(r"RESULT:([^:\s]*):([^:\s]*):([^:\s]*):([^:\s]*)\r?\n")
        seen = ""
        while not want.search(seen):
            try:
                message = await asyncio.wait_for(ws.read_message(), 20)
            except TimeoutError:
                pytest.fail(f"the terminal did not answer in 20 s: {seen!r}")
            assert message is not None, f"the terminal closed: {seen!r}"
            kind, *payload = json.loads(message)
            if kind == "stdout":
                seen += payload[0]
        user, shell, login, python = want.search(seen).groups()
    finally:
        ws.close()
        requests.delete(f"{url}/api/terminals/{name}", headers=auth(token), timeout=10)
    assert user == USER
    assert shell.endswith("bash")
    assert login == "login"
    # /etc/profile resets PATH; /etc/profile.d/portal.sh loads the session's
    # environment again.
    assert python == str(env_of("tensorflow") / "bin" / "python")


def test_shared_data_has_fashion_mnist_readable_by_the_user():
    folder = SHARED_DATA / "fashion-mnist"
    files = as_user("ls", str(folder) + "/").stdout.split()
    assert "train-labels-idx1-ubyte.gz" in files
    # The IDX files are gzipped (Debian's dataset-fashion-mnist): the labels'
    # header, read by alice, says IDX of unsigned bytes, 60000 items.
    header = as_user(
        "/usr/bin/python3",
        "-c",
        f"import gzip; print(gzip.open('{folder}/train-labels-idx1-ubyte.gz').read(8).hex())",
    ).stdout.strip()
    assert header == "00000801" + (60000).to_bytes(4, "big").hex()
    assert os.stat(SHARED_DATA).st_mode & 0o005 == 0o005
