"""Time to first cell: from the spawn request to the template's imports run.

For each framework, a session of its profile with one GPU is requested as
``bench/spawn.py`` does (``POST /hub/api/users/NAME/server``), and from that
request on, through the proxy (HTTPS, the portal's certificate checked):

- ready: the session's server answers (``spawn.spawn_ready``);
- kernel: a new kernel of the framework's kernelspec (the one of the session's
  ``api/kernelspecs`` that ``deploy/kernels.py`` made for its environment),
  started through the server's REST API, answers its ``kernel_info_request``
  on the kernel's websocket, as a notebook's tab asks;
- imports: the template's code cells (``notebook_templates/FW/mnist-FW.ipynb``)
  run in order over that websocket, as *Run All* reaches them, up to the
  first that imports the framework (``import torch``...), answered ``ok``.

The marks are seconds since the spawn request, so each includes the one before.
Whether the framework's files were in the page cache (a first import reads
them from disk) is reported beside them (``cached_mb``); a cold run starts
with the page cache emptied (``drop_caches``), as a site's shared filesystem
serves an environment that no one on the node read lately. The account is new
at each run of the benchmark, so its first session of a framework also pays
what a new user's does (matplotlib's font cache, built once in the home).
"""

import asyncio
import json
import os
import re
import subprocess
import time
from pathlib import Path

import requests

from bench import spawn, train
from bench.hubs import REPO
from tests.support.hubsettings import CA_CERT

# Framework profile (and environment) -> the module its template imports.
FRAMEWORKS = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}
ENVS = "/opt/portal/envs"


def first_cells(framework):
    """The code cells of the framework's template up to the first that imports it."""
    path = REPO / "notebook_templates" / framework / f"mnist-{framework}.ipynb"
    imports = re.compile(rf"^\s*(import|from)\s+{FRAMEWORKS[framework]}\b", re.M)
    code_cells = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            code_cells.append("".join(cell["source"]))
            if imports.search(code_cells[-1]):
                return code_cells
    raise RuntimeError(f"no code cell of {path} imports {FRAMEWORKS[framework]}")


def kernel_name(server_url, token, environment):
    """The name of the session's kernelspec of ``environment``."""
    r = requests.get(
        server_url + "api/kernelspecs",
        headers={"Authorization": f"token {token}"},
        timeout=30,
        verify=CA_CERT,
    )
    r.raise_for_status()
    specs = r.json()["kernelspecs"]
    for name, spec in specs.items():
        if spec["spec"].get("metadata", {}).get("portal", {}).get("environment") == environment:
            return name
    raise RuntimeError(f"no kernelspec of the {environment} environment among {sorted(specs)}")


async def _kernel_and_cells(server_url, token, name, code_cells, timeout):
    """Monotonic times of the new kernel's kernel_info reply and of the cells done."""
    async with train.session_kernel(server_url, token, name) as kernel:
        await kernel.request("kernel_info_request", {}, timeout)
        started = time.monotonic()
        for code in code_cells:
            reply, _ = await kernel.execute(code, timeout)
            if reply["status"] != "ok":
                raise RuntimeError(f"a first cell in the {name} kernel ended {reply['status']}")
        return started, time.monotonic()


def first_cell(hub, client, name, token, framework, timeout=600):
    """``(ready, kernel, imports)``: seconds from the spawn request of ``name``'s
    session of the ``framework`` profile (one GPU) to each mark; ``token`` is
    one of the user's. The session is left running."""
    code_cells = first_cells(framework)
    server_url = f"{hub.url}/user/{name}/"
    start = time.monotonic()  # spawn_ready's own start is a few microseconds later
    ready = spawn.spawn_ready(hub, client, name, {"profile": framework, "gpus": 1})
    kernel = kernel_name(server_url, token, framework)
    started, done = asyncio.run(_kernel_and_cells(server_url, token, kernel, code_cells, timeout))
    return ready, started - start, done - start


def cached_mb(environment):
    """``(cached, size)``: MB of the environment's files in the page cache, and
    their size (util-linux ``fincore``)."""
    paths = [
        os.path.join(folder, f)
        for folder, _, files in os.walk(os.path.join(ENVS, environment))
        for f in files
    ]
    cached = size = 0
    for i in range(0, len(paths), 2000):
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE", *paths[i : i + 2000]],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        for line in out.splitlines():
            res, total = line.split()
            cached, size = cached + int(res), size + int(total)
    return cached / 1e6, size / 1e6


def drop_caches():
    """Empty the kernel's page cache, dentries and inodes (as root, after a
    sync). The demo's compute nodes are network namespaces on this host's
    kernel, so theirs is the same cache: their next reads of an environment
    come from the disk."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
