"""Time to first cell of a notebook job (issue 27): from the submission to
the template's imports run, as ``bench/firstcell.py`` measures a session's.

The PyTorch template is copied into the account's home (as the account)
and handed to the admin service (``POST /services/portal/api/jobs``,
through the proxy, one GPU, a short run: ``max_steps``); papermill records
when each cell ended (``metadata.papermill.end_time`` of the executed
notebook). The mark is the end of the first cell that imports the
framework, in seconds since the request: a session's ``first_cell_s`` is
the same mark from its spawn request (the server's start, a kernel, the
same cells).
"""

import json
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path

from bench.hubs import REPO
from tests.support.hubclient import Portal

TEMPLATE = REPO / "notebook_templates" / "pytorch" / "mnist-pytorch.ipynb"
FOLDER = "bench-batch"


def as_user(name, *argv, stdin=None):
    return subprocess.run(
        ["sudo", "-u", name, "--", *argv], input=stdin, text=True, capture_output=True,
        check=True, env={"PATH": "/usr/bin:/bin"}, timeout=60,
    ).stdout  # fmt: skip


def first_import_end(executed, module="torch"):
    """When the first code cell that imports ``module`` ended (aware), from
    papermill's metadata of the executed notebook."""
    imports = re.compile(rf"^\s*(import|from)\s+{module}\b", re.M)
    for cell in executed["cells"]:
        if cell["cell_type"] == "code" and imports.search("".join(cell["source"])):
            return datetime.fromisoformat(cell["metadata"]["papermill"]["end_time"])
    raise RuntimeError(f"no cell of the executed notebook imports {module}")


def batch_first_cell(portal, client, name, steps=20, timeout=600):
    """Seconds from the job's submission to its first import cell's end."""
    home = Path(as_user(name, "sh", "-c", "echo $HOME").strip())
    as_user(name, "mkdir", "-p", str(home / FOLDER))
    as_user(name, "cp", str(TEMPLATE), str(home / FOLDER / TEMPLATE.name))
    service = Portal(client)
    body = {"notebook": f"{FOLDER}/{TEMPLATE.name}", "profile": "pytorch", "gpus": 1,
            "hours": 1, "parameters": {"max_steps": steps}}  # fmt: skip
    asked = time.time()
    r = service.send("POST", "api/jobs", json=body)
    if r.status_code != 201:
        raise RuntimeError(f"the notebook job was refused: {r.status_code} {r.text[:300]}")
    job_id = r.json()["id"]
    deadline = time.monotonic() + timeout
    while True:
        job = service.get(f"api/jobs/{job_id}").json()
        if job["ended"]:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"notebook job {job_id} did not end within {timeout} s")
        time.sleep(1)
    if job["state"] != "COMPLETED":
        raise RuntimeError(f"notebook job {job_id} ended {job['state']}: see ~{name}/{job['log']}")
    executed = json.loads((home / job["output"]).read_text())
    return first_import_end(executed).timestamp() - asked
