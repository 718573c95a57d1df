"""The notebook templates, run as a site admin's `make smoke` runs them: one
Slurm job per template, submitted as alice, in which papermill executes a copy
through the template's own kernel (epochs=1; a few tiny steps for the
benchmark); `distributed` is one job over two nodes, whose notebook trains
with one rank on each through `srun`. On the embedded cluster the jobs run one
after the other (its Slurm hands out more cores than the machine has), and its
GPUs are not real, so everything trains on the CPU."""

import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from portal import settings as portal_settings
from tests.support import REPO
from tests.support.jobs import partition_nodes

pytestmark = pytest.mark.slow

SMOKE = REPO / "deploy" / "smoke.py"
USER = "alice"
FRAMEWORKS = ["pytorch", "tensorflow", "mxnet"]
TEMPLATES = [*FRAMEWORKS, "benchmark", "distributed"]
# The container run: the first image of [containers] build (make test built it).
IMAGES = portal_settings.load()["containers"]["build"]
RUNS = [*TEMPLATES, *(["container"] if IMAGES else [])]
PARTITION = "gpu"
TAGS = {"train/loss", "train/accuracy", "train/images_per_sec", "test/accuracy"}
EVENTS_PYTHON = "/opt/portal/envs/pytorch/bin/python"
# Prints {tag: last value} of the scalars in an event folder, written either
# as TF1-style scalars (torch, tensorboardX) or as TF2 summary tensors.
READ_EVENTS = """
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util.tensor_util import make_ndarray
events = EventAccumulator(sys.argv[1])
events.Reload()
tags = events.Tags()
values = {t: events.Scalars(t)[-1].value for t in tags["scalars"]}
values.update({t: float(make_ndarray(events.Tensors(t)[-1].tensor_proto)) for t in tags["tensors"]})
print(json.dumps(values))
"""


def run_smoke(*args, timeout=900):
    """deploy/smoke.py ARGS as `make smoke` runs it; on timeout it is sent
    SIGTERM, so that it cancels its jobs, as a CI runner would."""
    proc = subprocess.Popen(
        [sys.executable, str(SMOKE), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"smoke.py did not finish within {timeout} s:\n{out}\n{err}")
    return proc.returncode, out, err


def result_lines(out):
    """``{template: {key: value}}`` of the smoke's result lines."""
    results = {}
    for line in out.splitlines():
        name, _, rest = line.partition(": ")
        if "=" in rest and not name.startswith("smoke"):
            results[name] = dict(word.split("=", 1) for word in shlex.split(rest))
    return results


def submitted_jobs(out):
    return re.findall(r"^smoke: \S+ is job (\d+)$", out, re.M)


def still_queued(jobs):
    """The jobs Slurm still lists as pending or running (ended ones may be purged)."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i", "-j", ",".join(jobs)], capture_output=True, text=True
    ).stdout
    return out.split()


def scratch_folder():
    """A fresh folder in the user's home for one test run."""
    return Path(pwd.getpwnam(USER).pw_dir, f"portal-smoke-test-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def smoke(cluster):
    """The smoke run of every template; its folders are removed at the end."""
    out_dir = scratch_folder()
    try:
        rc, out, err = run_smoke(
            "--user", USER, "--templates", str(REPO / "notebook_templates"),
            "--out", str(out_dir), "--keep",
        )  # fmt: skip
        jobs = submitted_jobs(out)
        assert len(jobs) == len(RUNS), out + err
        assert not still_queued(jobs), "smoke jobs outlived the smoke run"
        yield {"rc": rc, "out": out, "err": err, "dir": out_dir, "results": result_lines(out)}
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def last_scalars(run_dir):
    """``{tag: last value}`` of the TensorBoard scalars in ``run_dir``."""
    read = subprocess.run(
        [EVENTS_PYTHON, "-c", READ_EVENTS, str(run_dir)], capture_output=True, text=True, check=True
    )
    return json.loads(read.stdout.splitlines()[-1])


def stdout_of(notebook_path):
    notebook = json.loads(notebook_path.read_text())
    text = "".join(
        "".join(output["text"])
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == "stdout"
    )
    return notebook, text


def has_image(notebook):
    return any(
        "image/png" in output.get("data", {})
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
    )


def test_every_template_passes_as_a_job_of_the_demo_user(smoke):
    assert smoke["rc"] == 0, f"{smoke['out']}\n{smoke['err']}"
    assert set(smoke["results"]) == set(RUNS), smoke["out"]
    for name in RUNS:
        folder = smoke["dir"] / name
        # made by alice's job: the output is hers, and the job had a GPU slice
        assert folder.joinpath("output.ipynb").stat().st_uid == pwd.getpwnam(USER).pw_uid
        log = next(folder.glob("job-*.log")).read_text()
        assert re.search(r"^portal-smoke: job \d+ on \S+, GPUs \d+, 8 cores$", log, re.M), log


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_framework_template_trains_logs_and_plots(smoke, framework):
    result = smoke["results"].get(framework)
    assert result, f"no result line for {framework}:\n{smoke['out']}\n{smoke['err']}"
    assert float(result["test_accuracy"]) >= 0.80
    assert float(result["images_per_sec"]) > 0
    assert (
        result["device"] == "cpu"
    )  # the cluster's GPUs are fake: detected by the framework, not by CUDA_VISIBLE_DEVICES
    assert float(result["seconds"]) < 180

    folder = smoke["dir"] / framework
    notebook, text = stdout_of(folder / "output.ipynb")
    assert notebook["metadata"]["kernelspec"]["name"] == framework
    assert notebook["metadata"]["papermill"]["parameters"]["epochs"] == 1
    assert re.search(r"^Epoch 1 Global Step 100, Training Accuracy 0\.\d+$", text, re.M), text
    accuracies = re.findall(r"^Test Accuracy (0\.\d+)$", text, re.M)
    assert [float(a) for a in accuracies] == [float(result["test_accuracy"])], text  # one per epoch
    assert re.search(r"^images/sec: \d+\.\d on cpu$", text, re.M), text
    assert has_image(notebook), "the notebook plotted no test images"

    runs = list((folder / "logs" / framework).iterdir())
    assert len(runs) == 1 and re.fullmatch(r"\d{8}-\d{6}", runs[0].name), runs
    scalars = last_scalars(runs[0])
    assert TAGS <= set(scalars), f"TensorBoard reads {sorted(scalars)} in {runs[0]}"
    assert scalars["test/accuracy"] == pytest.approx(float(result["test_accuracy"]), abs=1e-4)
    assert scalars["train/images_per_sec"] > 0


@pytest.mark.skipif(not IMAGES, reason="[containers] build is empty: no image to run in")
def test_the_pytorch_template_trains_in_the_first_image(smoke):
    result = smoke["results"].get("container")
    assert result, f"no result line for the container:\n{smoke['out']}\n{smoke['err']}"
    assert list(result) == ["image", "test_accuracy", "images_per_sec", "seconds"]
    assert result["image"] == IMAGES[0]
    assert float(result["test_accuracy"]) >= 0.80
    assert float(result["images_per_sec"]) > 0
    notebook, text = stdout_of(smoke["dir"] / "container" / "output.ipynb")
    assert notebook["metadata"]["kernelspec"]["name"] == IMAGES[0]
    assert re.search(r"^images/sec: \d+\.\d on cpu$", text, re.M), text


def test_benchmark_reports_fp32_and_mixed_throughput(smoke):
    result = smoke["results"].get("benchmark")
    assert result, f"no result line for the benchmark:\n{smoke['out']}\n{smoke['err']}"
    assert float(result["images_per_sec_fp32"]) > 0
    assert float(result["images_per_sec_mixed"]) > 0
    assert result["device"] == "cpu"
    assert float(result["seconds"]) < 120

    notebook, text = stdout_of(smoke["dir"] / "benchmark" / "output.ipynb")
    assert notebook["metadata"]["kernelspec"]["name"] == "pytorch"
    assert re.search(r"^images/sec fp32: \d+\.\d on cpu$", text, re.M), text
    assert re.search(r"^images/sec mixed: \d+\.\d on cpu$", text, re.M), text
    assert "ResNet-50: 25,557,032 parameters" in text  # torchvision's resnet50, layer for layer


def test_distributed_template_trains_one_rank_on_each_of_two_nodes(smoke):
    nodes = partition_nodes(PARTITION)
    if len(nodes) < 2:
        pytest.skip(
            f"partition {PARTITION} has {len(nodes)} node(s) ({', '.join(nodes)}): the "
            "2-node run needs the embedded cluster's compute nodes ([cluster] nodes >= 2)"
        )
    result = smoke["results"].get("distributed")
    assert result, f"no result line for distributed:\n{smoke['out']}\n{smoke['err']}"
    assert (result["ranks"], result["nodes"]) == ("2", "2"), smoke["out"]
    assert float(result["test_accuracy"]) >= 0.80
    assert float(result["images_per_sec"]) > 0
    assert result["device"] == "cpu"
    assert float(result["seconds"]) < 180

    folder = smoke["dir"] / "distributed"
    notebook, text = stdout_of(folder / "output.ipynb")
    assert notebook["metadata"]["kernelspec"]["name"] == "pytorch"
    # rank 0 names the node of every rank: two, and both of the partition's
    placement = re.search(
        r"^Training on 2 ranks across 2 nodes \((\S+), (\S+)\) with gloo", text, re.M
    )
    assert placement, text
    assert len(set(placement.groups())) == 2 and set(placement.groups()) <= set(nodes), text
    # 60,000 images, 64 per step on each of 2 ranks: 468 steps, a line every 100
    steps = re.findall(r"^Epoch 1 Global Step (\d+), Training Accuracy 0\.\d+$", text, re.M)
    assert steps == ["100", "200", "300", "400"], text
    accuracies = re.findall(r"^Test Accuracy (0\.\d+)$", text, re.M)
    assert [float(a) for a in accuracies] == [float(result["test_accuracy"])], text
    per_rank = float(re.search(r"^images/sec per rank: (\d+\.\d)$", text, re.M)[1])
    assert per_rank * 2 == pytest.approx(float(result["images_per_sec"]), abs=0.2)
    assert has_image(notebook), "the notebook plotted no test images with the trained model"

    # the training was one srun step of the job: 2 tasks over both its nodes
    job = re.search(
        r"^portal-smoke: job (\d+) on ", next(folder.glob("job-*.log")).read_text(), re.M
    )[1]
    sacct = subprocess.run(
        ["sacct", "-j", f"{job}.0", "-n", "-P", "-o", "NNodes,NTasks,NodeList"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert sacct and sacct[0].split("|")[:2] == ["2", "2"], sacct

    [run_dir] = (folder / "logs" / "distributed").iterdir()
    assert (run_dir / "model.pt").stat().st_size > 0
    scalars = last_scalars(run_dir)
    assert TAGS <= set(scalars), f"TensorBoard reads {sorted(scalars)} in {run_dir}"
    assert scalars["test/accuracy"] == pytest.approx(float(result["test_accuracy"]), abs=1e-4)


def test_a_failing_template_fails_the_smoke_and_says_where_to_look(cluster):
    # the user copies the template herself: it must be readable by her, as
    # the repository's are (pytest's own tmp_path is root's alone)
    tmp_path = Path(tempfile.mkdtemp(prefix="portal-smoke-"))
    broken = tmp_path / "templates" / "broken"
    broken.mkdir(parents=True)
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "boom",
                "metadata": {},
                "outputs": [],
                "source": "raise RuntimeError('no GPU driver')",
            }
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (broken / "broken.ipynb").write_text(json.dumps(notebook))
    os.chmod(tmp_path, 0o755)
    out_dir = scratch_folder()
    try:
        rc, out, err = run_smoke(
            "--user",
            USER,
            "--templates",
            str(tmp_path / "templates"),
            "--out",
            str(out_dir),
            timeout=300,
        )
        assert rc == 1, out + err
        assert "broken: FAILED" in out
        assert "RuntimeError: no GPU driver" in err
        assert f"notebook: {out_dir}/broken/output.ipynb" in err
        assert (out_dir / "broken" / "output.ipynb").exists()  # kept for the admin to read
        jobs = submitted_jobs(out)
        assert len(jobs) == 1 and not still_queued(jobs)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.rmtree(tmp_path, ignore_errors=True)
