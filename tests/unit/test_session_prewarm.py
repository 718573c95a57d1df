"""The session's pre-warmed kernel (portal/session/prewarm.py): the pool
hands a kernel out once, forgets one that ended, ends what is left; the
imports and the handover leave no trace in the user's namespace; the hub
tells each session the imports of its profile's environment.

The kernel manager that adopts the kernel (portal/session/kernelpool.py,
jupyter_server's) is tested against a real session in
tests/integration/test_prewarm.py.
"""

import json
import os
import subprocess
import sys

import pytest
from batchspawner import SlurmSpawner

from portal import settings
from portal.core.profiles import SLICE_FIELDS, profile_from_dict
from portal.session import prewarm
from portal.session.prewarm import Pool, WarmKernel
from spawners.spawner import PortalSpawner
from tests.unit.test_spawner_lifecycle import spawner


def warm_kernel(tmp_path, name="pytorch", argv=("sleep", "60")):
    """A WarmKernel whose process is a real one (``sleep``), in a process
    group of its own as jupyter_client starts kernels, with its files."""
    process = subprocess.Popen(list(argv), start_new_session=True)
    connection_file = tmp_path / f"kernel-{name}.json"
    info = {"transport": "ipc", "ip": str(tmp_path / f"kernel-{name}-ipc"), "shell_port": 1}
    connection_file.write_text(json.dumps(info))
    (tmp_path / f"kernel-{name}-ipc-1").write_text("")
    return WarmKernel(name, process, str(connection_file), info, {}, str(tmp_path))


def test_the_pool_hands_a_kernel_out_once_and_to_its_kernelspec_only(tmp_path):
    pool = Pool()
    kernel = warm_kernel(tmp_path)
    pool.put(kernel)
    try:
        assert pool.take("tensorflow") is None
        assert pool.take("pytorch") is kernel
        assert pool.take("pytorch") is None  # the next one starts fresh
        pool.give_back(kernel)  # taken, not adopted
        assert pool.names() == ["pytorch"]
        assert pool.take("pytorch") is kernel
    finally:
        prewarm.stop(kernel)


def test_a_kernel_that_ended_is_not_handed_out(tmp_path, capsys):
    pool = Pool()
    kernel = warm_kernel(tmp_path, argv=("true",))
    kernel.process.wait()
    pool.put(kernel)
    assert pool.take("pytorch") is None
    assert "had ended" in capsys.readouterr().err
    assert not os.path.exists(kernel.connection_file)
    assert not (tmp_path / "kernel-pytorch-ipc-1").exists()


def test_closing_the_pool_ends_its_kernels_and_removes_their_files(tmp_path):
    pool = Pool()
    kernel = warm_kernel(tmp_path)
    pool.put(kernel)
    pool.close(timeout=5)
    assert kernel.process.poll() is not None
    assert pool.names() == []
    assert not os.path.exists(kernel.connection_file)


def test_the_imports_bind_no_name_and_report_a_failure(tmp_path):
    argv = prewarm.prewarm_argv([sys.executable, "{connection_file}"], "cf", ["json", "no_such"])
    line = argv[-1].removeprefix("--IPKernelApp.exec_lines=")
    check = (
        "print([k for k in globals() if k[0] != '_'], 'json' in __import__('sys').modules,"
        " __import__('gc').isenabled(), __import__('gc').get_freeze_count() > 0)"
    )
    run = subprocess.run(
        [sys.executable, "-c", f"{line}\n{check}"], capture_output=True, text=True, check=True
    )
    # the collector is on again after them, what they made kept out of its passes
    assert run.stdout.split("\n")[0] == "[] True True True"
    assert "could not import no_such" in run.stderr
    assert argv[1] == "cf"


def test_the_handover_gives_the_folder_and_environment_of_a_new_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTAL_UNIT_OLD", "x")
    monkeypatch.chdir("/")
    started_with = {"PORTAL_UNIT_OLD": "x", "PATH": "/bin", "JPY_PARENT_PID": "1"}
    wanted = {"PATH": "/bin", "PORTAL_UNIT_NEW": "y", "JPY_SESSION_NAME": str(tmp_path / "a.ipynb")}
    changed, removed = prewarm.env_changes(started_with, wanted)
    assert removed == ["PORTAL_UNIT_OLD"]
    user_ns = {"_dh": ["/"]}
    namespace = {"get_ipython": lambda: type("Shell", (), {"user_ns": user_ns})}
    exec(prewarm.handover_code(tmp_path, changed, removed), namespace)
    try:
        assert os.getcwd() == str(tmp_path)
        assert "PORTAL_UNIT_OLD" not in os.environ
        assert os.environ["PORTAL_UNIT_NEW"] == "y"
        assert user_ns == {"_dh": [str(tmp_path)], "__session__": str(tmp_path / "a.ipynb")}
        assert set(namespace) == {"get_ipython", "__builtins__"}  # nothing bound
    finally:
        os.environ.pop("PORTAL_UNIT_NEW", None)
        os.environ.pop("JPY_SESSION_NAME", None)


def test_a_session_without_imports_or_environment_starts_no_kernel():
    pool = Pool()
    assert prewarm.start_from_environ({"PORTAL_ENVIRONMENT": "pytorch"}, pool) is None
    assert prewarm.start_from_environ({"PORTAL_PREWARM": "torch"}, pool) is None
    assert (
        prewarm.start_from_environ({"PORTAL_PREWARM": "rm -rf", "PORTAL_ENVIRONMENT": "x"}, pool)
        is None
    )
    assert pool.names() == []


def test_the_site_settings_are_checked(tmp_path, monkeypatch):
    site = tmp_path / "portal.toml"
    monkeypatch.setenv("PORTAL_CONFIG", str(site))
    site.write_text('[session]\nprewarm_imports = { jax = ["jax", "jax.numpy"] }\n')
    assert settings.prewarm_imports(settings.load()) == {"jax": ["jax", "jax.numpy"]}
    site.write_text("[session]\nprewarm_kernel = false\n")
    assert settings.prewarm_imports(settings.load()) == {}
    site.write_text('[session]\nprewarm_imports = { jax = ["jax; import os"] }\n')
    with pytest.raises(settings.SettingsError, match="must be a list of module names"):
        settings.prewarm_imports(settings.load())


def test_the_hub_tells_the_session_its_environments_imports(monkeypatch):
    monkeypatch.setattr(SlurmSpawner, "get_env", lambda self: {})
    s = spawner("unit-prewarm")
    slurm = settings.defaults()["slurm"]
    s.profile = profile_from_dict(
        {"name": "vision", "display_name": "Vision", "environment": "pytorch"},
        {k: slurm[k] for k in SLICE_FIELDS},
    )
    env = PortalSpawner.get_env(s)
    assert env["PORTAL_PREWARM"].split(",")[0] == "torch"
    s.prewarm_imports = {}
    assert "PORTAL_PREWARM" not in PortalSpawner.get_env(s)


def kernelspec(folder, name, argv, language="python", env=None):
    spec = folder / name
    spec.mkdir(parents=True)
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": name, "language": language, "env": env or {}})
    )
    return spec


def test_a_kernel_starts_as_jupyter_client_would_start_it_without_importing_it(tmp_path):
    """The kernelspec of the first folder that has it (the user's before the
    environment's), the connection file jupyter_client's reader takes (mode
    0600), the process in a session of its own with the spec's environment."""
    out = tmp_path / "seen.json"
    record = (
        "import json, os, sys; "
        f"json.dump({{'argv': sys.argv, 'sid': os.getsid(0), 'pid': os.getpid(), "
        f"'env': dict(os.environ)}}, open({str(out)!r}, 'w'))"
    )
    mine, envs = tmp_path / "home-kernels", tmp_path / "env-kernels"
    kernelspec(mine, "PyTorch", [sys.executable, "-c", record, "{connection_file}"],
               env={"TAG": "mine:${HOME}"})  # fmt: skip
    kernelspec(envs, "pytorch", ["false"])
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    environ = {"HOME": "/home/a", "PATH": os.environ["PATH"], "PYTHONEXECUTABLE": "x"}
    kernel = prewarm.start("pytorch", ["json"], str(runtime), environ, str(tmp_path),
                           dirs=[str(tmp_path / "none"), str(mine), str(envs)])  # fmt: skip
    assert kernel.process.wait(10) == 0
    seen = json.loads(out.read_text())
    assert seen["argv"][1] == kernel.connection_file
    assert seen["argv"][2].startswith("--IPKernelApp.exec_lines=exec(")
    assert seen["sid"] == seen["pid"]  # its own session, as jupyter_client's launch_kernel
    assert seen["env"]["TAG"] == "mine:/home/a" and "PYTHONEXECUTABLE" not in seen["env"]
    assert seen["env"]["JPY_PARENT_PID"] == str(os.getpid())
    assert os.stat(kernel.connection_file).st_mode & 0o777 == 0o600
    from jupyter_client.connect import ConnectionFileMixin

    reader = ConnectionFileMixin(connection_file=kernel.connection_file)
    reader.load_connection_file()  # jupyter_client's own reader takes it
    assert (reader.transport, reader.ip, reader.shell_port) == (
        "ipc",
        kernel.connection_info["ip"],
        1,
    )
    assert reader.session.key == kernel.connection_info["key"]
    assert kernel.kernel_id in kernel.connection_file


def test_no_kernel_for_a_missing_or_non_python_kernelspec(tmp_path):
    kernelspec(tmp_path, "ir", ["R"], language="R")
    assert prewarm.start("ir", ["x"], str(tmp_path), {}, dirs=[str(tmp_path)]) is None
    with pytest.raises(LookupError, match="no kernelspec 'gone'"):
        prewarm.start("gone", ["x"], str(tmp_path), {}, dirs=[str(tmp_path)])
