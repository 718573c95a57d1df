"""The check an image passes before sessions are offered it
(portal/helper/imagecheck.py): the paths it takes, what its script finds,
what it tells the admin or the user. No image is run here (the integration
test test_containers.py runs real ones)."""

import json
import os
import subprocess
import sys
import time

import pytest

from portal.helper import imagecheck
from portal.helper.imagecheck import (
    CHECK_SCRIPT,
    ImageError,
    check_argv,
    check_result,
    check_steps,
    helper_argv,
    image_stamp,
    in_home,
    mount_points,
    offer_problem,
    plain_path,
    read_info,
    site_image,
    site_images,
)


def test_the_check_runs_the_images_python_with_the_steps_as_one_argument():
    steps = check_steps("/opt/portal/envs/jupyter", "/opt/portal/envs/pytorch", "pytorch")
    argv = check_argv("/img/pytorch", steps)
    assert argv[:5] == ["ch-run", "-t", "/img/pytorch", "--", "/usr/bin/python3"]
    assert json.loads(argv[-1]) == steps


@pytest.mark.parametrize("path", ["relative/x", "/a/../b", "/a/b c", "/a/$(id)", "/a:b", "", None])
def test_a_path_that_is_not_plain_and_absolute_is_refused(path):
    with pytest.raises(ImageError, match="absolute path"):
        plain_path(path)


@pytest.mark.parametrize("name", ["..", "../x", "a/b", "", "-rf", ".hidden", "a b", None])
def test_a_site_image_is_a_plain_name_in_the_folder(name):
    with pytest.raises(ImageError, match="not an image name"):
        site_image("/var/lib/portal/images", name)


def test_a_users_image_must_be_a_folder_in_their_home_after_links(tmp_path):
    home, other = tmp_path / "bob", tmp_path / "alice"
    (home / "img").mkdir(parents=True)
    (other / "img").mkdir(parents=True)
    (home / "file").write_text("")
    os.symlink(other / "img", home / "link")
    assert in_home(str(home / "img"), str(home)) == str(home / "img")
    for path, why in [
        (other / "img", "must be a folder in your home"),
        (home / "link", "must be a folder in your home"),
        (home, "must be a folder in your home"),
        (home / "file", "is not a folder"),
        (home / "missing", "is not a folder"),
    ]:
        with pytest.raises(ImageError, match=why):
            in_home(str(path), str(home))


def test_site_images_are_the_folders_with_image_names(tmp_path):
    for name in ("pytorch", ".pytorch.new", "tensorflow"):
        (tmp_path / name).mkdir()
    (tmp_path / "notes.txt").write_text("")
    assert site_images(str(tmp_path)) == ["pytorch", "tensorflow"]
    assert site_images(str(tmp_path / "missing")) == []


def test_the_stamp_changes_when_the_image_is_rebuilt_and_reads_its_info(tmp_path):
    image = tmp_path / "pt"
    (image / "etc").mkdir(parents=True)
    (image / "etc/portal-image").write_text('NAME=pt\nFRAMEWORK=pytorch\nBASE="Debian x"\n')
    first = image_stamp(str(image))
    assert first and read_info(str(image)) == {
        "NAME": "pt", "FRAMEWORK": "pytorch", "BASE": "Debian x",
    }  # fmt: skip
    os.utime(image / "etc/portal-image", ns=(1, 1))
    assert image_stamp(str(image)) not in ("", first)
    assert image_stamp(str(tmp_path / "gone")) == ""
    assert read_info(str(tmp_path / "gone")) == {}


def test_the_helper_for_a_users_image_refuses_outside_their_home(capsys):
    argv = helper_argv("/etc", "/opt/portal/envs/jupyter", "pytorch", "/opt/portal/envs/pytorch")
    assert imagecheck.main(argv) == 2
    assert "must be a folder in your home" in capsys.readouterr().err
    assert imagecheck.main(["--jupyter", "/opt/x", "--framework", "a b", "--framework-env",
                            "/opt/y", "/img"]) == 2  # fmt: skip


def test_the_installed_helper_imports_only_the_standard_library():
    proc = subprocess.run(
        ["/usr/bin/python3", "-I", "-c",
         f"import runpy; runpy.run_path({imagecheck.__file__!r}, run_name='x')"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def run_check_script(steps):
    """CHECK_SCRIPT run here, by this python (the image's python3 in the check)."""
    proc = subprocess.run([sys.executable, "-c", CHECK_SCRIPT, json.dumps(steps)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def test_the_check_script_passes_when_everything_imports(tmp_path):
    steps = {"imports": [("json", sys.executable, "import json; print(1)")],
             "mount_points": [str(tmp_path)]}  # fmt: skip
    result = check_result("/img/good", *run_check_script(steps))
    assert result.ok, result.message
    assert result.message.startswith("image /img/good works: python3 3.")
    assert "json 1" in result.message


def test_the_check_script_names_the_module_missing_and_the_mount_point(tmp_path):
    steps = {
        "imports": [
            ("jupyter_server", sys.executable, "import no_such_module_here"),
            ("torch", str(tmp_path / "env/bin/python"), "import torch"),
        ],
        "mount_points": [str(tmp_path / "datasets")],
    }
    result = check_result("/img/bad", *run_check_script(steps))
    assert not result.ok
    assert "jupyter_server: ModuleNotFoundError: No module named 'no_such_module_here'" in (
        result.message
    )
    assert f"torch: no {tmp_path}/env/bin/python in the image" in result.message
    assert f"mount point {tmp_path}/datasets: missing" in result.message


def test_an_image_that_does_not_start_says_ch_runs_error():
    result = check_result("/img/x", 1, "ch-run[9]: error: can't stat image: /img/x\n")
    assert not result.ok
    assert result.message == "image /img/x does not run: ch-run[9]: error: can't stat image: /img/x"
    assert check_result("/img/x", 137, "").message == (
        "image /img/x does not run: exit status 137, no output"
    )


def test_an_interrupted_check_is_no_pass():
    assert not check_result("/img/x", 0, "ok python3 3.11.2\nok jupyter_server 2\n").ok


def test_mount_points_are_home_the_shared_data_and_slurms_client_files():
    settings = {"data": {"shared_data": "/srv/portal/datasets"}}
    assert mount_points(settings) == ["/home", "/srv/portal/datasets", "/etc/slurm", "/run/munge"]
    assert "" not in mount_points({"data": {"shared_data": ""}})


def test_an_image_is_offered_only_after_an_ok_check_at_its_current_stamp(tmp_path):
    (tmp_path / "pt" / "etc").mkdir(parents=True)
    stamp = image_stamp(str(tmp_path / "pt"))
    ok = {"ok": True, "stamp": stamp, "message": "image works"}
    images = str(tmp_path)
    assert offer_problem(images, "pt", "pytorch", {("pt", "pytorch"): ok}) == (stamp, "")
    for checks, why in [
        ({}, "image 'pt' has not been checked with 'pytorch' yet"),
        ({("pt", "tensorflow"): ok}, "has not been checked with 'pytorch' yet"),
        ({("pt", "pytorch"): {**ok, "stamp": "1:1"}}, "changed after its check with 'pytorch'"),
        ({("pt", "pytorch"): {**ok, "ok": False, "message": "image x: torch: No module"}},
         "the check of image 'pt' with 'pytorch' failed: image x: torch: No module"),
    ]:  # fmt: skip
        found_stamp, problem = offer_problem(images, "pt", "pytorch", checks)
        assert found_stamp == stamp and why in problem
    assert offer_problem(images, "gone", "pytorch", {("gone", "pytorch"): ok}) == (
        "", f"image 'gone' is not in {images}",
    )  # fmt: skip
    assert "not an image name" in offer_problem(images, "../etc", "pytorch", {})[1]


def test_the_services_runner_reads_the_helpers_answer_through_sudo(tmp_path):
    """sudo replaced by a script that answers as the helper would (the real
    one runs in tests/integration/test_image_checks.py)."""
    fake = tmp_path / "sudo"
    steps = check_steps("/opt/e/jupyter", "/opt/e/pytorch", "pytorch", ["/home"])
    for rc, out, ok, message in [
        (0, "ok python3 3.11\ndone\nimage /img/pt works: python3 3.11", True,
         "image /img/pt works: python3 3.11"),
        (1, "FAIL torch: no /opt/e/pytorch/bin/python in the image\ndone\n"
            "image /img/pt: torch: no /opt/e/pytorch/bin/python in the image", False,
         "image /img/pt: torch: no /opt/e/pytorch/bin/python in the image"),
        (1, "sudo: a password is required", False,
         "image /img/pt: the check did not run as nobody: sudo: a password is required"),
    ]:  # fmt: skip
        fake.write_text(f"#!/bin/sh\nprintf '%s\\n' '{out}'\nexit {rc}\n")
        fake.chmod(0o755)
        result = imagecheck.sudo_runner(sudo=str(fake))("/img/pt", steps)
        assert (result.ok, result.message) == (ok, message)


def confined_with_fake_ch_run(tmp_path):
    """``confined_check``'s answer, as a dict, with the ``ch-run`` of
    ``tmp_path`` first on the PATH (run in a process of its own: the check
    makes its process the subreaper of what it runs)."""
    code = f"""
import json, runpy
check = runpy.run_path({imagecheck.__file__!r})
env = {{"PATH": "{tmp_path}:/usr/bin:/bin", "USER": "x", "HOME": {str(tmp_path)!r}}}
result = check["confined_check"]("/img/x", check["check_steps"]("/j"), env, timeout=30)
print(json.dumps(result.to_dict()))
"""
    proc = subprocess.run(["/usr/bin/python3", "-I", "-c", code], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_an_images_code_leaves_no_process_and_no_flood(tmp_path):
    """The check of a user's image runs that user's code on the hub's host,
    outside Slurm: ch-run replaced (this test only) by a script that writes
    a 2 MB line and leaves a daemon behind. What is kept of its answer is
    short, and the daemon is gone when the check returns. (Run in a process
    of its own: the check makes its process the subreaper of what it runs.)"""
    marker = tmp_path / "daemon.pid"
    fake = tmp_path / "ch-run"
    fake.write_text(
        "#!/bin/sh\n"
        f"setsid sh -c 'echo $$ > {marker}; exec sleep 300' </dev/null >/dev/null 2>&1 &\n"
        "head -c 2000000 /dev/zero | tr '\\0' x; echo\n"
        f"while [ ! -s {marker} ]; do sleep 0.05; done\n"
        "echo 'FAIL torch: no module'; echo done; exit 0\n"
    )
    fake.chmod(0o755)
    result = confined_with_fake_ch_run(tmp_path)
    assert not result["ok"]
    assert all(len(line) <= imagecheck.LINE_CAP for line in result["lines"])
    assert len(result["message"]) <= imagecheck.MESSAGE_CAP
    daemon = int(marker.read_text())
    assert not os.path.exists(f"/proc/{daemon}"), "the check left its daemon running"


def test_a_chain_of_forks_that_outran_the_kills_is_stopped_then_killed(tmp_path):
    """What an attacker's review found (issue 25): an image's code whose
    process forks, exits, and its child does the same for seconds, then
    sleeps, outran a check that killed round after round, and left a
    process of the user's behind on the hub's host. ch-run replaced (this
    test only) by such a chain: nothing of it is left once the check
    returns, nor after the chain would have ended. Each fork writes the
    child's pid to a file: every one of them must be gone."""
    pids = tmp_path / "pids"
    chain = tmp_path / "chain.py"
    chain.write_text(
        "import os, sys, time\n"
        "print('FAIL torch: no module'); print('done'); sys.stdout.flush()\n"
        "os.close(1); os.close(2)\n"
        "end = time.monotonic() + 3\n"
        "while time.monotonic() < end:\n"
        "    if os.fork():\n"
        "        os._exit(0)\n"
        f"    with open({str(pids)!r}, 'a') as f:\n"
        "        f.write(f'{os.getpid()}\\n')\n"
        "os.execvp('sleep', ['sleep', '301'])\n"
    )
    fake = tmp_path / "ch-run"
    fake.write_text(f"#!/bin/sh\nexec /usr/bin/python3 {chain}\n")
    fake.chmod(0o755)
    assert not confined_with_fake_ch_run(tmp_path)["ok"]
    time.sleep(4)  # past the chain's 3 s: a process it left would be sleeping now
    left = [pid for pid in pids.read_text().split() if os.path.exists(f"/proc/{pid}")]
    assert not left, f"the check left {len(left)} process(es) of the chain"
