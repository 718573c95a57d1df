import shlex
import subprocess

from spawners.script import render_batch_script


def render(**overrides):
    values = dict(
        username="alice",
        summary="1 GPU, 8 cores, 48 GB, 8 h on partition gpu",
        environment="/opt/portal/envs/jupyter",
        cmd=["/opt/portal/envs/jupyter/bin/batchspawner-singleuser", "jupyterhub-singleuser"],
    )
    values.update(overrides)
    return render_batch_script(**values)


def test_script_activates_environment_and_execs_command():
    script = render()
    assert script.startswith("#!/bin/bash\n")
    assert "source /opt/portal/envs/jupyter/bin/activate" in script
    assert "exec /opt/portal/envs/jupyter/bin/batchspawner-singleuser jupyterhub-singleuser" in script
    assert "OMP_NUM_THREADS=$threads" in script


def test_every_value_is_quoted():
    evil = "$(touch /tmp/pwned); `id`"
    script = render(environment=evil, cmd=["x", evil], username=evil, summary=evil)
    assert shlex.quote(evil + "/bin/activate") in script
    assert "exec x " + shlex.quote(evil) in script
    # the rendered script is valid shell in which the values stay words
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)


def test_missing_value_is_an_error():
    import jinja2
    import pytest

    with pytest.raises(jinja2.UndefinedError):
        render_batch_script(username="alice", summary="x", environment="/e")
