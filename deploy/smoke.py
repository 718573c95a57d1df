"""Smoke test of the notebook templates, for site admins after an upgrade.

For each template folder (those sessions copy, ``PREFIX/notebook_templates``),
one short Slurm job, submitted as a demo user exactly as a session is
(``sudo -u USER sbatch``, one GPU's slice of ``[slurm]`` in the settings),
runs papermill on a copy of the template's folder in a scratch folder of that
user's home, through the kernel the notebook names, with a short run's
parameters (one epoch; a few small steps for the benchmark). ``distributed``
runs on two nodes, one GPU's slice and one rank on each (both ranks on one
node, said so, where the partition has only one). The jobs run side by side,
one at a time on the embedded cluster (whose nodes share this machine's few
real cores). As each ends, one line::

    pytorch: test_accuracy=0.8712 images_per_sec=2094.3 device=cpu seconds=47.1
    benchmark: images_per_sec_fp32=8.1 images_per_sec_mixed=0.7 device=cpu seconds=30.2
    distributed: test_accuracy=0.866 images_per_sec=5542.7 device=cpu seconds=38.4 ranks=2 nodes=2
    container: image=pytorch test_accuracy=0.8714 images_per_sec=3648.7 seconds=21.9

``container`` runs a template in a container image, as a session in it runs:
the template of the image's framework (its /etc/portal-image says which;
``pytorch`` for the pytorch image), in a job like the others, through
``ch-run`` with /home and the shared data bound (the image's mount points,
deploy/images.py) and the job's environment passed through. The image is
the first of ``[containers] build`` (in ``[containers] images``), or
``--image NAME``; ``--image ''`` leaves it out.

The exit status is 1 when any template failed; each failure says why and where
its output notebook and job log are (those folders are kept; the others are
removed unless ``--keep``). Run as root, with the hub environment's Python
(``make smoke``)::

    /opt/portal/envs/hub/bin/python deploy/smoke.py [--user alice] [--only pytorch] [--keep]
"""

import argparse
import asyncio
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_DIR))

from portal import settings as portal_settings  # noqa: E402
from portal.core.containers import Binds, Charliecloud, checked_path  # noqa: E402
from portal.core.slice import make_slice  # noqa: E402
from portal.helper.imagecheck import ImageError, read_info, site_image  # noqa: E402
from portal.slurm import commands as slurm  # noqa: E402
from portal.slurm.commands import use_bin_dir  # noqa: E402

JOB_NAME = "portal-smoke"
TIME_LIMIT_MINUTES = 30
POLL_SECONDS = 2
SLURM_TIMEOUT = 60  # seconds sbatch may take to answer
# papermill parameters of a short run, by template folder.
PARAMETERS = {"benchmark": {"steps": 2, "warmup_steps": 1, "batch_size": 4, "image_size": 64}}
DEFAULT_PARAMETERS = {"epochs": 1}
# Templates that train on several nodes, and on how many: one rank per GPU.
MULTI_NODE = {"distributed": 2}
CONTAINER = "container"  # the run of a template in a container image
# What the container binds of the host: homes (the scratch folder is in one)
# and the shared data, where deploy/images.py makes their mount points.
CONTAINER_BINDS = ("/home",)
# What the templates print (see notebook_templates/).
TEST_ACCURACY = re.compile(r"^Test Accuracy ([0-9.]+)$", re.M)
IMAGES_PER_SEC = re.compile(r"^images/sec: ([0-9.]+) on (.+)$", re.M)
BENCHMARK = re.compile(r"^images/sec (fp32|mixed): ([0-9.]+) on (.+)$", re.M)
PLACEMENT = re.compile(r"^Training on (\d+) ranks? across (\d+) nodes? ", re.M)


@dataclass
class Run:
    """One template's smoke job."""

    name: str
    notebook: Path  # the template
    folder: Path  # scratch folder in the user's home
    kernel: str
    parameters: dict
    job_slice: object = None  # the job's resources (portal.core.slice.Slice)
    ranks: int = 0  # of a multi-node template: the ranks and nodes it must run on
    nodes: int = 0
    image: str = ""  # the container image it runs in, and that image's name
    image_name: str = ""
    job_id: str = ""
    figures: dict = field(default_factory=dict)
    seconds: float | None = None
    placement: dict = field(default_factory=dict)  # the ranks and nodes it ran on
    error: str = ""

    @property
    def output(self):
        return self.folder / "output.ipynb"

    @property
    def log(self):
        return self.folder / f"job-{self.job_id or '%j'}.log"

    @property
    def exit_file(self):
        return self.folder / "exit-status"

    def line(self):
        figures = dict(self.figures)
        if self.image_name:
            figures = {"image": self.image_name, **figures}
            figures.pop("device", None)
        words = [f"{k}={shlex.quote(str(v))}" for k, v in figures.items()]
        if self.seconds is not None:
            words.append(f"seconds={self.seconds:.1f}")
        words += [f"{k}={v}" for k, v in self.placement.items()]
        return f"{self.name}: {' '.join(words)}"


def find_templates(templates_dir, only=()):
    """``{folder name: notebook}`` of the templates, one notebook per folder."""
    found = {}
    for folder in sorted(Path(templates_dir).iterdir()):
        notebooks = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
        if notebooks and (not only or folder.name in only):
            found[folder.name] = notebooks[0]
    missing = set(only) - set(found)
    if missing:
        raise SystemExit(
            f"smoke: no template folder {', '.join(sorted(missing))} in {templates_dir}"
        )
    if not found:
        raise SystemExit(f"smoke: no notebook templates in {templates_dir}")
    return found


def default_templates(envs):
    """Where sessions copy the templates from (deploy/hub.sh installs them there)."""
    installed = Path(envs["prefix"], "notebook_templates")
    return installed if installed.is_dir() else REPO_DIR / "notebook_templates"


def kernel_of(notebook):
    return json.loads(notebook.read_text())["metadata"]["kernelspec"]["name"]


def partition_nodes(partition):
    """How many nodes of ``partition`` take jobs (0 when sinfo fails)."""
    try:
        found = asyncio.run(slurm.partitions(SLURM_TIMEOUT)).get(partition)
    except slurm.SlurmError:
        return 0
    return sum(node.available for node in found.nodes) if found else 0


def container_run(images_dir, name, templates, folder, job_slice):
    """The run of ``templates``' template of the image ``name``'s framework
    in that image; None when there is no such template (a message says so)."""
    try:
        image = site_image(images_dir, name)
    except ImageError as e:
        raise SystemExit(f"smoke: --image: {e}") from None
    framework = read_info(image).get("FRAMEWORK", name)
    notebooks = sorted(Path(templates, framework).glob("*.ipynb"))
    if not notebooks:
        print(f"smoke: {CONTAINER}: no template {framework} in {templates}: not run", flush=True)
        return None
    run = Run(CONTAINER, notebooks[0], folder, kernel_of(notebooks[0]), DEFAULT_PARAMETERS,
              job_slice, image=image, image_name=name)  # fmt: skip
    if not os.path.isdir(image):
        run.error = f"no image {image} (make up builds those of [containers] build)"
    return run


def job_script(run, papermill, jupyter_data, binds=()):
    """The batch script: papermill on the copy, its exit status in a file;
    in ``run.image`` with the host's folders ``binds`` bound, if it has one."""
    argv = [
        papermill,
        "--kernel",
        run.kernel,
        "--cwd",
        str(run.folder),
        "--log-output",
        "--no-progress-bar",
    ]
    for key, value in run.parameters.items():
        argv += ["-p", key, str(value)]
    argv += [str(run.folder / run.notebook.name), str(run.output)]
    if run.image:  # the job's environment (JUPYTER_PATH too) goes in with it
        pairs = tuple((checked_path(b, "a folder it binds"),) * 2 for b in binds)
        argv = Charliecloud().exec_argv(run.image, argv, Binds(pairs))
    return "\n".join(
        [
            "#!/bin/bash",
            f"# Smoke test of the notebook template {run.name!r} (deploy/smoke.py).",
            'echo "portal-smoke: job $SLURM_JOB_ID on $(hostname), '
            'GPUs ${CUDA_VISIBLE_DEVICES:-none}, ${SLURM_CPUS_ON_NODE:-?} cores"',
            # the site's kernels, not a same-named one in the user's ~/.local
            f"export JUPYTER_PATH={shlex.quote(jupyter_data)} PYTHONNOUSERSITE=1",
            # a job that Slurm requeues (a node failure) starts afresh
            shlex.join(
                ["rm", "-rf", "--", str(run.folder / "logs"), str(run.output), str(run.exit_file)]
            ),
            shlex.join(argv),
            "status=$?",
            f"echo $status > {shlex.quote(str(run.exit_file))}",
            "exit $status",
            "",
        ]
    )


def as_user(user, argv, **kwargs):
    return subprocess.run(["sudo", "-u", user, "--", *argv], **kwargs)


def prepare(run, user):
    """The scratch folder, with a copy of the template's folder (the notebook
    and the files it uses), both made by the user: root never writes in a
    folder the user controls (a link planted there would have root overwrite
    any file)."""
    as_user(user, ["mkdir", "-p", str(run.folder)], check=True)
    as_user(user, ["cp", "-r", "--", f"{run.notebook.parent}/.", str(run.folder)], check=True)


def submit(run, user, script):
    """Submit the run's job as the user (sudo resets the environment: HOME,
    USER, SHELL and PATH are the user's)."""
    argv = slurm.sbatch_argv(
        run.job_slice, job_name=JOB_NAME, chdir=run.folder, output=run.log,
        time_limit=TIME_LIMIT_MINUTES,
    )  # fmt: skip
    try:
        run.job_id = asyncio.run(slurm.submit(user, script, argv, SLURM_TIMEOUT))
    except slurm.SlurmError as e:
        run.error = str(e)


def queued(job_ids):
    """The jobs among ``job_ids`` that Slurm still lists (pending or running)."""
    if not job_ids:
        return set()
    try:
        return asyncio.run(slurm.listed(job_ids, SLURM_TIMEOUT))
    except slurm.SlurmError:
        return set(job_ids)  # a failed query: assume nothing ended


def job_state(job_id):
    try:
        fields = asyncio.run(slurm.job_fields(job_id, SLURM_TIMEOUT))
    except slurm.SlurmError:
        fields = {}
    return f"{fields.get('JobState', 'gone')}, {fields.get('Reason', '')}".rstrip(", ")


def cancel(job_ids):
    if job_ids:
        try:
            asyncio.run(slurm.cancel_as_root(job_ids, SLURM_TIMEOUT))
        except slurm.SlurmError as e:
            print(f"smoke: scancel failed: {e}", file=sys.stderr)


def stdout_of(notebook):
    """The stdout of all the notebook's cells, and its first error if any."""
    text, error = [], ""
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                text.append("".join(output.get("text", "")))
            elif output.get("output_type") == "error" and not error:
                error = f"{output.get('ename')}: {output.get('evalue')}"
    return "".join(text), error


def collect(run, min_accuracy):
    """Read the run's output notebook into ``run.figures``; set ``run.error``."""
    try:
        notebook = json.loads(run.output.read_text())
    except (OSError, ValueError) as e:
        run.error = run.error or f"no output notebook ({e.__class__.__name__})"
        return
    text, cell_error = stdout_of(notebook)
    run.seconds = notebook.get("metadata", {}).get("papermill", {}).get("duration")
    if run.name == "benchmark":
        found = BENCHMARK.findall(text)
        for precision, value, _ in found:
            run.figures[f"images_per_sec_{precision}"] = float(value)
        if found:
            run.figures["device"] = found[-1][2].strip()
        wanted = ["images_per_sec_fp32", "images_per_sec_mixed"]
    else:
        accuracies = TEST_ACCURACY.findall(text)
        speed = IMAGES_PER_SEC.findall(text)
        if accuracies:
            run.figures["test_accuracy"] = float(accuracies[-1])
        if speed:
            run.figures["images_per_sec"] = float(speed[-1][0])
            run.figures["device"] = speed[-1][1].strip()
        wanted = ["test_accuracy", "images_per_sec"]
    if run.ranks:
        placement = PLACEMENT.findall(text)
        if placement:
            run.placement = {"ranks": int(placement[-1][0]), "nodes": int(placement[-1][1])}
    status = run.exit_file.read_text().strip() if run.exit_file.exists() else None
    if cell_error:
        run.error = f"the notebook failed: {cell_error}"
    elif status is None:
        run.error = run.error or f"the job ended before papermill did ({job_state(run.job_id)})"
    elif status != "0":
        run.error = f"papermill exited with status {status}"
    elif missing := [w for w in wanted if w not in run.figures]:
        run.error = f"the notebook printed no {', '.join(missing)}"
    elif run.figures.get("test_accuracy", 1.0) < min_accuracy:
        run.error = f"test accuracy {run.figures['test_accuracy']} is below {min_accuracy}"
    elif run.ranks and run.placement != {"ranks": run.ranks, "nodes": run.nodes}:
        ran = run.placement or "no ranks"
        run.error = f"it ran on {ran}, not on {run.ranks} ranks across {run.nodes} nodes"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--user", default="alice", help="demo user whose jobs run the templates (alice)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=(),
        metavar="NAME",
        help=f"these template folders only ({CONTAINER}: the container run)",
    )
    parser.add_argument(
        "--image",
        help="the container image of the container run, a folder of [containers] images "
        "(default: the first of [containers] build; '': none)",
    )
    parser.add_argument(
        "--templates",
        help="folder of the templates (default: the copy sessions take them from, "
        "PREFIX/notebook_templates, else this checkout's notebook_templates)",
    )
    parser.add_argument(
        "--gpus", type=int, default=1, help="GPUs per job (1); cores and memory follow [slurm]"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="jobs at once (default: all, or 1 on the embedded one-machine cluster, "
        "whose Slurm hands out more cores than the machine has)",
    )
    parser.add_argument("--out", help="scratch folder (default ~USER/portal-smoke/DATE-TIME)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch folders of passed templates too"
    )
    parser.add_argument(
        "--min-accuracy", type=float, default=0.8, help="least test accuracy after one epoch (0.8)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=45,
        help="minutes to wait for all the jobs, queueing included (45)",
    )
    return parser.parse_args(argv)


def run_jobs(runs, at_once, submit_one, finish_one, timeout_minutes):
    """Submit the runs, at most ``at_once`` in Slurm's queue together, and call
    ``finish_one(run)`` as each job leaves the queue. Whatever is still queued
    when this returns or raises (Ctrl-C, SIGTERM, timeout) is cancelled."""
    waiting, active = list(runs), {}
    deadline = time.monotonic() + timeout_minutes * 60
    try:
        while waiting or active:
            while waiting and len(active) < at_once:
                run = waiting.pop(0)
                submit_one(run)
                if run.job_id:
                    active[run.job_id] = run
                else:
                    finish_one(run)
            time.sleep(POLL_SECONDS)
            still = queued(list(active))
            for job_id in [j for j in active if j not in still]:
                finish_one(active.pop(job_id))
            if time.monotonic() > deadline:
                for run in [*active.values(), *waiting]:
                    state = job_state(run.job_id) if run.job_id else "not submitted"
                    run.error = f"not done after {timeout_minutes:g} min ({state})"
                    finish_one(run)
                return
    finally:
        cancel(sorted(queued(list(active))))


def main(argv=None):
    args = parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("smoke: run as root (it submits jobs as the demo user through sudo)")
    settings = portal_settings.load()
    slurm, envs = settings["slurm"], settings["envs"]
    try:
        use_bin_dir(slurm["bin_dir"], check=True)
    except portal_settings.SettingsError as e:
        raise SystemExit(f"smoke: {e}") from None
    try:
        home = pwd.getpwnam(args.user).pw_dir
    except KeyError:
        raise SystemExit(
            f"smoke: {args.user} is not a Unix user here; see `make accounts`"
        ) from None

    def gpu_slice(gpus, nodes=1):
        """``gpus`` GPUs on each of ``nodes`` nodes, as a session's."""
        return make_slice(
            gpus,
            1,
            partition=slurm["partition"],
            max_gpus=gpus,
            cores_per_gpu=slurm["cores_per_gpu"],
            mem_per_gpu_gb=slurm["mem_per_gpu_gb"],
            max_hours=1,
            nodes=nodes,
            max_nodes=nodes,
        )

    job_slice = gpu_slice(args.gpus)
    papermill = str(Path(envs["jupyter"], "bin", "papermill"))
    jupyter_data = str(Path(envs["jupyter"], "share", "jupyter"))
    templates = Path(args.templates or default_templates(envs))
    out = Path(args.out or Path(home, "portal-smoke", datetime.now().strftime("%Y%m%d-%H%M%S")))

    only = [name for name in args.only if name != CONTAINER]
    runs = []
    if only or not args.only:
        runs = [
            Run(
                name,
                notebook,
                out / name,
                kernel_of(notebook),
                PARAMETERS.get(name, DEFAULT_PARAMETERS),
                job_slice,
            )
            for name, notebook in find_templates(templates, only).items()
        ]
    containers = settings["containers"]
    image = containers["build"][0] if args.image is None and containers["build"] else args.image
    if image and (not args.only or CONTAINER in args.only):
        run = container_run(containers["images"], image, templates, out / CONTAINER, job_slice)
        runs += [run] if run else []
    elif CONTAINER in args.only:
        raise SystemExit("smoke: no container image: [containers] build is empty; name one "
                         "with --image")  # fmt: skip
    shared_data = settings["data"]["shared_data"]
    binds = [*CONTAINER_BINDS, *([shared_data] if shared_data else [])]
    at_once = args.jobs or (1 if settings["cluster"]["embedded"] else len(runs))
    print(
        f"smoke: {len(runs)} template(s) of {templates} as {args.user} in {out}, "
        f"{at_once} job(s) at once, each "
        f"{job_slice.gpus} GPU, {job_slice.cores} cores, {job_slice.mem_gb} GB, "
        f"{TIME_LIMIT_MINUTES} min on partition {job_slice.partition}",
        flush=True,
    )
    for run in runs:
        if run.name not in MULTI_NODE:
            continue
        # one rank per GPU (a task of the job), on each node; all on one if it must
        nodes = MULTI_NODE[run.name]
        available = partition_nodes(job_slice.partition)
        if available >= nodes:
            multi = gpu_slice(args.gpus, nodes)
        else:
            print(
                f"smoke: {run.name}: partition {job_slice.partition} has {available} "
                f"node(s) that take jobs, not {nodes}: its ranks share one node",
                flush=True,
            )
            multi = gpu_slice(args.gpus * nodes)
        run.ranks, run.nodes = multi.total_gpus, multi.nodes
        run.job_slice = multi
        print(
            f"smoke: {run.name} runs {run.ranks} ranks, one per GPU, on {run.nodes} node(s), "
            f"each {multi.gpus} GPU(s), {multi.cores} cores, {multi.mem_gb} GB",
            flush=True,
        )

    def submit_one(run):
        if run.error:  # found before it ran (no image)
            return
        try:
            prepare(run, args.user)
        except (OSError, subprocess.CalledProcessError) as e:
            run.error = f"cannot make the scratch folder {run.folder}: {e}"
            return
        submit(run, args.user, job_script(run, papermill, jupyter_data, binds))
        if run.job_id:
            print(f"smoke: {run.name} is job {run.job_id}", flush=True)

    def finish_one(run):
        if run.job_id and not run.error:
            collect(run, args.min_accuracy)
        print(f"{run.name}: FAILED" if run.error else run.line(), flush=True)

    # SIGTERM (a CI timeout, kill) ends the wait as Ctrl-C does: jobs are cancelled.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        run_jobs(runs, at_once, submit_one, finish_one, args.timeout)
    except KeyboardInterrupt:
        print(
            f"smoke: interrupted; its jobs are cancelled, its folders are in {out}", file=sys.stderr
        )
        return 130

    failed = [run for run in runs if run.error]
    for run in failed:
        print(
            f"smoke: {run.name} failed (job {run.job_id or 'not submitted'}): {run.error}\n"
            f"    notebook: {run.output}\n    job log:  {run.log}",
            file=sys.stderr,
        )
    if not args.keep:
        for run in runs:
            if not run.error:
                shutil.rmtree(run.folder, ignore_errors=True)
        if not failed:
            shutil.rmtree(out, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
