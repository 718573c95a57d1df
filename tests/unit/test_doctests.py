"""Every doctest of the product runs here (so in ``make unit``): each module
under portal/, spawners/, deploy/ and bench/ whose source holds an example.
A session module that needs jupyter_server (absent from the hub's
environment) runs in the jupyter environment, where the session runs."""

import doctest
import importlib
import subprocess
from pathlib import Path

import pytest

from portal import settings

REPO = Path(__file__).resolve().parents[2]
JUPYTER_PYTHON = Path(settings.load()["envs"]["jupyter"]) / "bin" / "python"


def modules_with_examples():
    for top in ("portal", "spawners", "deploy", "bench"):
        for path in sorted((REPO / top).rglob("*.py")):
            if ">>> " in path.read_text():
                parts = list(path.relative_to(REPO).with_suffix("").parts)
                yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def run_in_jupyter_env(name):
    code = (
        f"import doctest, importlib; r = doctest.testmod(importlib.import_module({name!r}))\n"
        "print(r.failed, r.attempted)"
    )
    run = subprocess.run(
        [str(JUPYTER_PYTHON), "-c", code], capture_output=True, text=True, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    failed, attempted = map(int, run.stdout.split()[-2:])
    return doctest.TestResults(failed, attempted), run.stdout


@pytest.mark.parametrize("name", list(modules_with_examples()))
def test_the_examples_hold(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name.split(".")[0] != "jupyter_server" or not name.startswith("portal.session"):
            raise
        result, output = run_in_jupyter_env(name)
    else:
        result, output = doctest.testmod(module), ""
    assert result.failed == 0, output
    assert result.attempted > 0


def test_every_module_with_examples_is_found():
    assert {"portal.settings", "portal.slurm.parse", "spawners.jupyterhub_patches"} <= set(
        modules_with_examples()
    )
