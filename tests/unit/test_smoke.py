"""`make smoke` (deploy/smoke.py) without Slurm: the batch script of a
template's job, in a container image or not, and the line it prints."""

import json
import shlex

import pytest

from deploy.smoke import CONTAINER, DEFAULT_PARAMETERS, Run, container_run, job_script

PAPERMILL = "/opt/portal/envs/jupyter/bin/papermill"
JUPYTER_DATA = "/opt/portal/envs/jupyter/share/jupyter"
BINDS = ["/home", "/srv/portal/datasets"]


def notebook(folder, kernel="pytorch"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mnist.ipynb"
    path.write_text(json.dumps({"metadata": {"kernelspec": {"name": kernel}}, "cells": []}))
    return path


def command_line(script):
    """The words of the script's papermill line (whatever runs it)."""
    line = next(line for line in script.splitlines() if PAPERMILL in line)
    return shlex.split(line)


def test_a_templates_job_runs_papermill_on_its_copy_outside_any_image(tmp_path):
    run = Run("pytorch", tmp_path / "t.ipynb", tmp_path / "my run", "pytorch", {"epochs": 1})
    words = command_line(job_script(run, PAPERMILL, JUPYTER_DATA, BINDS))
    assert words[0] == PAPERMILL and "ch-run" not in words
    assert words[-2:] == [f"{tmp_path}/my run/t.ipynb", f"{tmp_path}/my run/output.ipynb"]
    assert words[words.index("-p") : words.index("-p") + 3] == ["-p", "epochs", "1"]


def test_the_container_job_runs_papermill_in_the_image_with_homes_and_data_bound(tmp_path):
    run = Run(CONTAINER, tmp_path / "t.ipynb", tmp_path / "my run", "pytorch", {"epochs": 1},
              image="/var/lib/portal/images/pytorch", image_name="pytorch")  # fmt: skip
    script = job_script(run, PAPERMILL, JUPYTER_DATA, BINDS)
    words = command_line(script)
    separator = words.index("--")
    assert words[:separator] == [
        "ch-run",
        "--bind=/home:/home",
        "--bind=/srv/portal/datasets:/srv/portal/datasets",
        "/var/lib/portal/images/pytorch",
    ]
    assert words[separator + 1] == PAPERMILL
    assert words[-1] == f"{tmp_path}/my run/output.ipynb"
    # the kernels' folder is in the job's environment, which ch-run passes in
    lines = script.splitlines()
    exports = [i for i, line in enumerate(lines) if line.startswith("export JUPYTER_PATH=")]
    assert exports and exports[0] < lines.index(shlex.join(words))
    # its exit status is papermill's, through ch-run
    assert lines[lines.index(shlex.join(words)) + 1] == "status=$?"


def test_a_bind_that_is_not_a_plain_path_is_refused(tmp_path):
    run = Run(CONTAINER, tmp_path / "t.ipynb", tmp_path, "pytorch", {}, image="/img/pytorch",
              image_name="pytorch")  # fmt: skip
    with pytest.raises(ValueError, match="absolute path"):
        job_script(run, PAPERMILL, JUPYTER_DATA, ["/home", "/data;rm -rf ~"])


def test_the_container_line_names_the_image_and_its_figures():
    run = Run(CONTAINER, None, None, "pytorch", {}, image="/i/pytorch", image_name="pytorch")
    run.figures = {"test_accuracy": 0.8714, "images_per_sec": 3648.7, "device": "cpu"}
    run.seconds = 21.94
    assert run.line() == (
        "container: image=pytorch test_accuracy=0.8714 images_per_sec=3648.7 seconds=21.9"
    )
    plain = Run("pytorch", None, None, "pytorch", {})
    plain.figures, plain.seconds = dict(run.figures), 21.94
    assert (
        plain.line()
        == "pytorch: test_accuracy=0.8714 images_per_sec=3648.7 device=cpu seconds=21.9"
    )


def test_the_container_run_takes_the_template_of_the_images_framework(tmp_path):
    images, templates = tmp_path / "images", tmp_path / "templates"
    (images / "torch-nightly" / "etc").mkdir(parents=True)
    (images / "torch-nightly" / "etc" / "portal-image").write_text("NAME=x\nFRAMEWORK=pytorch\n")
    template = notebook(templates / "pytorch")
    run = container_run(str(images), "torch-nightly", templates, tmp_path / "out", None)
    assert (run.name, run.notebook, run.kernel) == (CONTAINER, template, "pytorch")
    assert run.image == f"{images}/torch-nightly" and run.image_name == "torch-nightly"
    assert run.parameters == DEFAULT_PARAMETERS and not run.error


def test_a_missing_image_fails_the_container_run_before_any_job(tmp_path):
    notebook(tmp_path / "templates" / "pytorch")
    run = container_run(str(tmp_path / "images"), "pytorch", tmp_path / "templates", tmp_path, None)
    assert run.error.startswith(f"no image {tmp_path}/images/pytorch (make up builds")


def test_no_template_of_the_framework_no_container_run(tmp_path, capsys):
    notebook(tmp_path / "templates" / "broken")
    assert container_run(str(tmp_path), "pytorch", tmp_path / "templates", tmp_path, None) is None
    assert "container: no template pytorch in" in capsys.readouterr().out


def test_an_image_name_that_is_a_path_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not an image name"):
        container_run(str(tmp_path), "../etc", tmp_path, tmp_path, None)
