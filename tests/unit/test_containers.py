"""The container runtimes' command lines (portal/core/containers.py): what a
session's container binds, and that no value becomes an option or a
second path. Charliecloud's runs for real in tests/integration; Apptainer's
is checked here only (no Apptainer package reaches these machines)."""

import pytest

from portal.core.containers import Apptainer, Binds, Charliecloud, ContainerError, runtime


def test_a_session_binds_the_homes_the_shared_data_and_slurms_client_only():
    binds = Binds.for_session("/home", "/srv/portal-data")
    assert binds.pairs == (
        ("/home", "/home"), ("/srv/portal-data", "/srv/portal-data"),
        ("/etc/slurm", "/etc/slurm"), ("/run/munge", "/run/munge"),
    )  # fmt: skip
    assert Binds.for_session("/home", slurm=()).pairs == (("/home", "/home"),)


@pytest.mark.parametrize(
    "path",
    ["home/bob", "/home/bob,/etc", "/home/bob:/etc", "/home/../etc", "/home/$USER", "/home/b b",
     "", None, "/home/bob\n"],
)  # fmt: skip
def test_a_path_that_could_become_another_option_is_refused(path):
    with pytest.raises(ContainerError, match="must be an absolute path"):
        Binds.for_session(path)
    with pytest.raises(ContainerError):
        Charliecloud().exec_argv(path, ["true"], Binds())


def test_charliecloud_runs_the_command_after_the_image_and_the_separator():
    argv = Charliecloud().exec_argv(
        "/img/pytorch", ["--help", "-b", "/"], Binds.for_session("/h"), cwd="/h/a"
    )
    assert "--cd=/h/a" in argv
    assert argv[argv.index("--") - 1] == "/img/pytorch"
    assert argv[argv.index("--") + 1 :] == ["--help", "-b", "/"]
    env = Charliecloud().exec_argv("/img/p", ["true"], Binds(), env_file="/tmp/x/env")
    assert env == ["ch-run", "--set-env=/tmp/x/env", "/img/p", "--", "true"]


def test_apptainer_passes_the_environment_in_a_file_never_on_the_command_line():
    argv = Apptainer().exec_argv(
        "/img/p.sif", ["jupyter"], Binds.for_session("/h"), env_file="/tmp/j/env"
    )
    assert argv[:4] == ["apptainer", "exec", "--nv", "--cleanenv"]
    assert "--env-file=/tmp/j/env" in argv and not any("TOKEN" in a for a in argv)


def test_runtimes_by_name():
    assert runtime("charliecloud").name == "charliecloud"
    with pytest.raises(ContainerError, match="use one of apptainer, charliecloud"):
        runtime("docker")
