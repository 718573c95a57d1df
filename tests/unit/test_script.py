import shlex
import subprocess
from pathlib import Path

import pytest

from portal.core.script import render_batch_script


def render(**overrides):
    values = dict(
        env={"JUPYTERHUB_API_TOKEN": "t0ken", "PORTAL_PROFILE": "pytorch"},
        tls=None,
        log_dir="/home/alice/.portal/logs",
        environment="/opt/portal/envs/jupyter",
        templates="/opt/portal/notebook_templates",
        shared_data="/srv/portal/datasets",
        cmd=["/opt/portal/envs/jupyter/bin/portal-session", "jupyterhub-singleuser"],
        container=[],
        container_env_prefix="",
        image="",
    )
    values.update(overrides)
    return render_batch_script(**values)


def test_script_activates_environment_and_execs_command():
    script = render()
    assert script.startswith("#!/bin/bash\n")
    assert "source /opt/portal/envs/jupyter/bin/activate" in script
    assert "exec /opt/portal/envs/jupyter/bin/portal-session jupyterhub-singleuser" in script
    assert "OMP_NUM_THREADS=$threads" in script


def test_every_value_is_quoted():
    evil = "$(touch /tmp/pwned); `id`"
    script = render(
        environment=evil,
        cmd=["x", evil],
        env={"PORTAL_PROFILE": evil},
        tls={"key": evil, "cert": evil, "ca": evil},
        log_dir=evil,
        templates=evil,
        shared_data=evil,
        container=["ch-run", f"--bind={evil}", evil, "--"],
        image=evil,
    )
    assert shlex.quote(evil + "/bin/activate") in script
    assert f"exec ch-run {shlex.quote('--bind=' + evil)} {shlex.quote(evil)} -- x " in script
    assert "export PORTAL_IMAGE=" + shlex.quote(evil) in script
    assert "printf '%s' " + shlex.quote(evil) + ' >"$tls_dir/session.key"' in script
    assert " -- x " + shlex.quote(evil) in script
    assert "export PORTAL_PROFILE=" + shlex.quote(evil) in script
    # the rendered script is valid shell in which the values stay words
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)


def test_missing_value_is_an_error():
    import jinja2
    import pytest

    with pytest.raises(jinja2.UndefinedError):
        render_batch_script(env={}, environment="/e", templates="", shared_data="")


def test_no_value_goes_into_a_comment():
    """A newline in a value must never end a comment and start a command:
    comments hold no substituted value at all."""
    evil = "x\nid > /tmp/pwned #"
    script = render(env={"PORTAL_PROFILE": evil}, log_dir=evil, environment=evil)
    for line in script.splitlines():
        if line.lstrip().startswith("#"):
            assert "pwned" not in line and "x" != line.strip("# ")
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)


def test_session_environment_is_exported_and_log_opened(tmp_path):
    """The script exports the hub's variables itself and writes its own log
    (sbatch runs with a reset environment and --output=/dev/null)."""
    log_dir = tmp_path / "logs"
    script = render(env={"JUPYTERHUB_API_TOKEN": "it's $secret"}, log_dir=str(log_dir))
    head = script.split("# Thread pools", 1)[0] + 'echo "token=$JUPYTERHUB_API_TOKEN"\n'
    subprocess.run(["bash", "-c", head], env={"SLURM_JOB_ID": "42"}, check=True)
    lines = (log_dir / "jupyter-42.log").read_text().splitlines()
    assert [line for line in lines if not line.startswith("portal: timeline ")] == [
        "token=it's $secret"
    ]
    assert oct(log_dir.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("gpus", [1, 2])
def test_thread_pools_take_every_core_of_the_node(gpus):
    """One task per GPU, each with its cores: Jupyter (on the first node) has
    them all, not one task's share."""
    script = render()
    threads = "# Thread pools" + script.split("# Thread pools", 1)[1].split("\n\n", 1)[0]
    env = {"SLURM_CPUS_PER_TASK": "8", "SLURM_CPUS_ON_NODE": str(8 * gpus)}
    out = subprocess.run(
        ["bash", "-ec", threads + '\necho "$OMP_NUM_THREADS $TF_NUM_INTRAOP_THREADS"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == [str(8 * gpus)] * 2


def test_landing_copies_templates_without_overwriting(tmp_path):
    """Run the landing part of the script for real in a scratch home."""
    src = tmp_path / "src"
    (src / "pytorch").mkdir(parents=True)
    (src / "pytorch" / "a.ipynb").write_text("v1")
    home = tmp_path / "home"
    home.mkdir()
    script = render(templates=str(src), shared_data=str(tmp_path / "data"))
    landing = script.split("# Landing folder", 1)[1].split("\n", 1)[1].split("source ")[0]
    landing += "\nwait\n"  # the copy runs in the background, beside Jupyter's start
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


def test_a_failed_landing_copy_is_logged_and_the_session_goes_on(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.ipynb").write_text("v1")
    home = tmp_path / "home"
    home.mkdir()
    (home / "templates").write_text("a file where the folder should be")
    script = render(templates=str(src), shared_data="")
    landing = script.split("# Landing folder", 1)[1].split("\n", 1)[1].split("source ")[0]
    result = subprocess.run(
        ["bash", "-ec", landing + "\nwait\necho went on\n"],
        env={"HOME": str(home)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0
    assert result.stdout.strip().endswith("went on")
    assert f"portal: copying the templates into {home}/templates failed" in result.stderr


TLS = {
    "key": "-----BEGIN PRIVATE KEY-----\nk3y'$(id)\n-----END PRIVATE KEY-----\n",
    "cert": "-----BEGIN CERTIFICATE-----\nc3rt\n-----END CERTIFICATE-----\n",
    "ca": "-----BEGIN CERTIFICATE-----\nhub\n-----END CERTIFICATE-----\n"
    "-----BEGIN CERTIFICATE-----\nproxy\n-----END CERTIFICATE-----\n",
}


def test_the_sessions_tls_files_are_the_users_alone_in_the_jobs_tmp(tmp_path):
    """With the hub's internal_ssl, the script writes the session's key,
    certificate and CA bundle, exactly, into a new 0700 folder in the job's
    /tmp, exports their paths as JupyterHub's singleuser server reads them,
    and the server's URL is https."""
    script = render(tls=TLS)
    part = "# Jupyter's runtime folder" + script.split("# Jupyter's runtime folder", 1)[1]
    part = part.split("# Landing folder", 1)[0].replace(
        "node=${SLURMD_NODENAME:-$(hostname -s)}", GETENT + "node=n1"
    )
    show = 'echo "$JUPYTERHUB_SSL_KEYFILE $JUPYTERHUB_SSL_CERTFILE $JUPYTERHUB_SSL_CLIENT_CA"'
    out = subprocess.run(
        ["bash", "-ec", part + show + '\necho "$JUPYTERHUB_SERVICE_URL"'],
        env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin", "JUPYTERHUB_SERVICE_PREFIX": "/u/"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    key, cert, ca = map(Path, out[0].split())
    assert key.read_text() == TLS["key"] and cert.read_text() == TLS["cert"]
    assert ca.read_text() == TLS["ca"]
    folder = key.parent
    assert folder.parent == tmp_path and folder.name.startswith("portal-tls-")
    assert cert.parent == ca.parent == folder
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert {oct(f.stat().st_mode & 0o777) for f in (key, cert, ca)} == {"0o600"}
    assert out[1].startswith("https://") and out[1].endswith(":0/u/")


# getent as a Debian node answers for its own name: /etc/hosts's 127.0.1.1
# line first, then the cluster address (DNS or a later line).
GETENT = """getent() {
    printf '%s\\n' "127.0.1.1       STREAM n1" "127.0.1.1       DGRAM" "10.200.0.2      STREAM"
}
"""


def address_part(script):
    return script.split("node=${SLURMD_NODENAME:-$(hostname -s)}\n", 1)[1].split("\nexport ")[0]


def test_the_server_listens_on_the_cluster_address_not_debians_127_0_1_1():
    part = address_part(render(tls=None))
    out = subprocess.run(["bash", "-ec", GETENT + "node=n1\n" + part + '\necho "$address"'],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out == "10.200.0.2\n"
    # a name that resolves to loopback alone: the job says so and ends
    only_loopback = "getent() { echo '127.0.1.1 STREAM n1'; }\n"
    done = subprocess.run(["bash", "-ec", only_loopback + "node=n1\n" + part],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1
    assert "n1 does not resolve to an IPv4 address other than loopback" in done.stderr


def test_without_internal_tls_no_file_and_plain_http():
    script = render(tls=None)
    assert "JUPYTERHUB_SSL_" not in script and "tls_dir" not in script
    assert 'JUPYTERHUB_SERVICE_URL="http://' in script


def test_a_container_session_execs_the_launcher_under_the_runtime():
    container = ["ch-run", "--bind=/home:/home", "--cd=/home/alice", "/img/pytorch", "--"]
    script = render(container=container, image="/img/pytorch")
    assert script.rstrip().endswith(
        "exec ch-run --bind=/home:/home --cd=/home/alice /img/pytorch -- "
        "/opt/portal/envs/jupyter/bin/portal-session jupyterhub-singleuser"
    )
    assert "export PORTAL_IMAGE=/img/pytorch" in script and "APPTAINERENV_" not in script
    assert "PORTAL_IMAGE" not in render()


def test_a_runtime_that_cleans_the_environment_gets_it_again_by_prefix():
    script = render(container=["apptainer", "exec", "/i.sif"], image="/i.sif",
                    container_env_prefix="APPTAINERENV_")  # fmt: skip
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)
    loop = script[script.index("while IFS= read -r name") :]
    demo = "export A_B=1; " + loop[: loop.index("echo")] + "echo $APPTAINERENV_A_B"
    out = subprocess.run(["bash", "-c", demo], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_the_runtimes_command_line_reaches_the_session_as_words():
    container = ["ch-run", "--bind=/home:/home", "/img/it's $(id)", "--"]
    script = render(container=container, image="/img/it's $(id)")
    line = next(x for x in script.splitlines() if x.startswith("export PORTAL_CONTAINER_RUN="))
    out = subprocess.run(["bash", "-c", f'{line}; printf %s "$PORTAL_CONTAINER_RUN"'],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert shlex.split(out.stdout) == container
