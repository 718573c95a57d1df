"""The session's pre-warmed kernel, in a real session through the test hub.

alice's PyTorch session (a Slurm job, as alice) starts a kernel of its
environment with torch imported as the job starts ([session]
prewarm_imports, portal/session/prewarm.py). It is not among the session's
kernels until asked for; the first notebook that opens a PyTorch kernel gets
it, with torch already in sys.modules but no name bound, in the notebook's
folder and with the notebook's JPY_SESSION_NAME; the next kernel is a fresh
process without torch; the kernels' list and a restart behave as for any
kernel.
"""

import asyncio
import json
import os
import pwd
import re
import subprocess
import time
from pathlib import Path

import requests

from tests.support.hubsettings import CA_CERT
from tests.support.jobs import user_jobs
from tests.support.kernelcells import _execute, _reply

USER = "alice"
HOME = pwd.getpwnam(USER).pw_dir
FOLDER = "prewarm-test"  # in alice's home: the notebook's folder
PROBE = (
    "import json, os, sys; print(json.dumps({'torch': 'torch' in sys.modules,"
    " 'bound': 'torch' in dir(), 'pid': os.getpid(), 'cwd': os.getcwd(),"
    " 'session': globals().get('__session__'), 'jpy': os.environ.get('JPY_SESSION_NAME'),"
    " 'tensorboard_api': os.environ.get('PORTAL_TENSORBOARD_API'),"
    " 'count': get_ipython().execution_count}))"
)


def probe(server_url, headers, kernel):
    async def run():
        ws, msg_id = await _execute(server_url, headers, kernel, PROBE)
        try:
            return await _reply(ws, msg_id, 180)
        finally:
            ws.close()

    status, printed = asyncio.run(run())
    assert status == "ok", printed
    return json.loads(printed.strip().splitlines()[-1])


def prewarmed_pid(job_id, timeout=60):
    """The pre-warmed kernel's pid, as the session's launcher logged it."""
    log = Path(HOME, ".portal/logs", f"jupyter-{job_id}.log")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"portal: pre-warmed kernel pytorch \(pid (\d+)\)", log.read_text())
        if found:
            return int(found.group(1))
        time.sleep(0.5)
    raise AssertionError(f"no pre-warmed kernel in {log}:\n{log.read_text()[-3000:]}")


def test_the_first_kernel_of_the_framework_is_the_prewarmed_one(session):
    subprocess.run(["sudo", "-u", USER, "mkdir", "-p", f"{HOME}/{FOLDER}"], check=True)
    alice = session(USER, profile="pytorch", gpus=1)
    [(job_id, _)] = user_jobs(USER)
    pid = prewarmed_pid(job_id)
    r = alice.api(
        "POST", f"/users/{USER}/tokens",
        json={"scopes": [f"access:servers!user={USER}"], "note": "prewarm", "expires_in": 600},
    )  # fmt: skip
    headers = {"Authorization": f"token {r.json()['token']}"}
    server_url = alice.url(f"/user/{USER}/")

    def api(method, path, **kwargs):
        r = requests.request(
            method, server_url + path, headers=headers, verify=CA_CERT, timeout=180, **kwargs
        )
        r.raise_for_status()
        return r.json() if r.text else None

    # not listed before it is asked for (nor counted as the session's activity)
    assert api("GET", "api/kernels") == []

    # a notebook of alice's opens a PyTorch kernel: the pre-warmed one
    notebook = f"{FOLDER}/first.ipynb"
    model = {"path": notebook, "name": "first.ipynb", "type": "notebook"}
    first = api("POST", "api/sessions", json={**model, "kernel": {"name": "pytorch"}})
    first = first["kernel"]["id"]
    seen = probe(server_url, headers, first)
    assert seen["pid"] == pid
    assert seen["torch"] and not seen["bound"], seen
    assert seen["count"] == 1, seen  # the imports spent no execution count
    assert seen["cwd"] == f"{HOME}/{FOLDER}", seen
    assert seen["session"] == seen["jpy"] == f"{HOME}/{notebook}", seen
    # what the server tells its kernels (its TensorBoard API), in the process's
    # own environment too (what tools that read /proc see); its connection
    # file is named after its id, as any kernel's
    assert seen["tensorboard_api"].endswith(f"/user/{USER}/portal/api/tensorboards"), seen
    with open(f"/proc/{pid}/environ") as f:
        environ = dict(kv.split("=", 1) for kv in f.read().split("\0") if "=" in kv)
    assert environ["PORTAL_TENSORBOARD_API"] == seen["tensorboard_api"]
    with open(f"/proc/{pid}/cmdline") as f:
        assert f"kernel-{first}.json" in f.read()

    # the next PyTorch kernel is a fresh one
    second = api("POST", "api/kernels", json={"name": "pytorch"})["id"]
    fresh = probe(server_url, headers, second)
    assert fresh["pid"] != pid
    assert not fresh["torch"], fresh
    assert fresh["cwd"] == HOME, fresh
    assert {k["id"] for k in api("GET", "api/kernels")} == {first, second}

    # a restart of the handed-over kernel is a fresh process, in the same folder
    api("POST", f"api/kernels/{first}/restart")
    restarted = probe(server_url, headers, first)
    assert restarted["pid"] not in (pid, fresh["pid"])
    assert not restarted["torch"] and restarted["cwd"] == f"{HOME}/{FOLDER}", restarted

    for kernel in (first, second):
        api("DELETE", f"api/kernels/{kernel}")
    assert not os.path.exists(f"/proc/{pid}")
