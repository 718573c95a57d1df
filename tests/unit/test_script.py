import shlex
import subprocess

from spawners.script import render_batch_script


def render(**overrides):
    values = dict(
        username="alice",
        summary="1 GPU, 8 cores, 48 GB, 8 h on partition gpu",
        environment="/opt/portal/envs/jupyter",
        templates="/opt/portal/notebook_templates",
        shared_data="/srv/portal/datasets",
        cmd=["/opt/portal/envs/jupyter/bin/batchspawner-singleuser", "jupyterhub-singleuser"],
    )
    values.update(overrides)
    return render_batch_script(**values)


def test_script_activates_environment_and_execs_command():
    script = render()
    assert script.startswith("#!/bin/bash\n")
    assert "source /opt/portal/envs/jupyter/bin/activate" in script
    assert (
        "exec /opt/portal/envs/jupyter/bin/batchspawner-singleuser jupyterhub-singleuser" in script
    )
    assert "OMP_NUM_THREADS=$threads" in script


def test_every_value_is_quoted():
    evil = "$(touch /tmp/pwned); `id`"
    script = render(
        environment=evil,
        cmd=["x", evil],
        username=evil,
        summary=evil,
        templates=evil,
        shared_data=evil,
    )
    assert shlex.quote(evil + "/bin/activate") in script
    assert "exec x " + shlex.quote(evil) in script
    # the rendered script is valid shell in which the values stay words
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)


def test_missing_value_is_an_error():
    import jinja2
    import pytest

    with pytest.raises(jinja2.UndefinedError):
        render_batch_script(
            username="alice", summary="x", environment="/e", templates="", shared_data=""
        )


def test_landing_copies_templates_without_overwriting(tmp_path):
    """Run the landing part of the script for real in a scratch home."""
    src = tmp_path / "src"
    (src / "pytorch").mkdir(parents=True)
    (src / "pytorch" / "a.ipynb").write_text("v1")
    home = tmp_path / "home"
    home.mkdir()
    script = render(templates=str(src), shared_data=str(tmp_path / "data"))
    landing = script.split("# Landing folder", 1)[1].split("\n", 1)[1].split("source ")[0]
    run = lambda: subprocess.run(["bash", "-ec", landing], env={"HOME": str(home)}, check=True)  # noqa: E731
    run()
    assert (home / "templates" / "pytorch" / "a.ipynb").read_text() == "v1"
    assert (home / "shared-data").resolve() == (tmp_path / "data")
    (home / "templates" / "pytorch" / "a.ipynb").write_text("edited")
    (home / "templates" / "mine.ipynb").write_text("mine")
    (src / "tensorflow").mkdir()
    (src / "tensorflow" / "b.ipynb").write_text("new")
    run()
    assert (home / "templates" / "pytorch" / "a.ipynb").read_text() == "edited"
    assert (home / "templates" / "mine.ipynb").read_text() == "mine"
    assert (home / "templates" / "tensorflow" / "b.ipynb").read_text() == "new"
