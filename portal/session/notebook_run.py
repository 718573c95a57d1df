"""``python -m portal.session.notebook_run``: one notebook job's run, in its
Slurm job (portal/core/templates/notebook-job.sh.j2 starts it in the
session's Jupyter environment, as the user).

papermill executes the notebook with its own kernel (its kernelspec's name)
and the parameters of this job, read from a file of the user's (never a
command line, which every user of the node reads), in the notebook's own
folder (its relative paths, its TensorBoard logs, are as in a session),
saving the executed notebook after each cell; nbconvert then renders it as
HTML beside it, failed or not.

The kernel speaks ZMQ over ipc, Unix sockets in the job's private runtime
folder, as a session's kernels do (``deploy/jupyter_server_config.py``):
never TCP on the node's loopback, which every user of the node reaches.
"""

import argparse
import json
import os
import sys
import threading
import time
import uuid
from datetime import UTC, datetime

from jupyter_client.manager import AsyncKernelManager

PREFIX = "portal: "
GPU_SECONDS = 15.0  # between two samples of the job's GPUs


def sample_gpus(path, stop, read=None, every=GPU_SECONDS):
    """Until ``stop`` is set, write the job's GPUs' use (``portal.session.nvml``)
    to ``path`` every ``every`` seconds, as JSON: the portal's pages show it
    ("no GPU data" and why, where NVML reads none)."""
    if read is None:
        from portal.session.nvml import NVMLReader

        read = NVMLReader().read
    samples, busy = 0, 0.0
    while True:
        try:
            now = read()
        except Exception as e:  # noqa: BLE001 (said in the file: the job goes on)
            now = {"gpus": [], "reason": f"NVML failed: {e}"}
        known = [g["utilization"] for g in now["gpus"] if g.get("utilization") is not None]
        if known:
            samples, busy = samples + 1, busy + sum(known) / len(known)
        data = {**now, "time": datetime.now(UTC).isoformat(timespec="seconds"),
                "mean_utilization": round(busy / samples, 1) if samples else None}  # fmt: skip
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
        if stop.wait(every):
            return


def private_ipc_manager(runtime_dir):
    """A kernel manager class whose kernels' connection file and ipc sockets
    are in ``runtime_dir`` (the job's, mode 0700)."""

    class PrivateIpcKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            name = f"kernel-{uuid.uuid4()}"
            kwargs.setdefault("transport", "ipc")
            kwargs.setdefault("connection_file", os.path.join(runtime_dir, f"{name}.json"))
            kwargs.setdefault("ip", os.path.join(runtime_dir, f"{name}-ipc"))
            super().__init__(**kwargs)

    return PrivateIpcKernelManager


def render_html(notebook_path, html_path):
    """The executed notebook as one HTML page (nbconvert's lab template)."""
    import nbconvert
    import nbformat

    body, _ = nbconvert.HTMLExporter(template_name="lab").from_notebook_node(
        nbformat.read(notebook_path, as_version=4)
    )
    tmp = f"{html_path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
    os.replace(tmp, html_path)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="portal.session.notebook_run")
    parser.add_argument("--notebook", required=True, help="the notebook, relative to $HOME")
    parser.add_argument("--output", required=True)
    parser.add_argument("--html", required=True)
    parser.add_argument("--parameters", required=True, help="a JSON file of {name: value}")
    parser.add_argument("--gpus", default="", help="where the GPUs' use is written")
    args = parser.parse_args(argv)
    stop = threading.Event()
    if args.gpus:
        threading.Thread(target=sample_gpus, args=(args.gpus, stop), daemon=True).start()
    import papermill

    with open(args.parameters, encoding="utf-8") as f:
        parameters = json.load(f)
    notebook = os.path.join(os.path.expanduser("~"), args.notebook)
    # papermill formats both paths with the parameters ("{name}"): never here
    input_path, output_path = (p.replace("{", "{{").replace("}", "}}") for p in (
        notebook, args.output))  # fmt: skip
    runtime = os.environ.get("JUPYTER_RUNTIME_DIR") or os.path.dirname(args.parameters)
    print(f"{PREFIX}running {args.notebook} with {json.dumps(parameters)}", flush=True)
    began = time.time()
    status = 0
    try:
        papermill.execute_notebook(
            input_path,
            output_path,
            parameters=parameters,
            cwd=os.path.dirname(notebook),
            log_output=True,
            progress_bar=False,
            kernel_manager_class=private_ipc_manager(runtime),
        )
    except papermill.PapermillExecutionError as e:
        print(f"{PREFIX}the notebook failed in cell {e.exec_count}: {e.ename}: {e.evalue}")
        status = 1
    finally:
        stop.set()
        try:
            if os.path.exists(args.output):
                render_html(args.output, args.html)
        except Exception as e:  # the log says why; the notebook itself is kept
            print(f"{PREFIX}the HTML rendering failed: {type(e).__name__}: {e}", file=sys.stderr)
    print(f"{PREFIX}done in {time.time() - began:.1f} s, status {status}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
