"""Sessions in a container image, without Slurm or an image (the runner
replaced as in test_spawner_lifecycle; the check of a user's image, which
runs through sudo as the user, replaced where said): which image, the
options that name one, the refusals, and the batch script's exec line.
tests/integration/test_containers.py runs real images."""

import asyncio
import os
import pwd

import pytest
from tornado import web

from portal.core.profiles import ProfileError
from spawners import container
from tests.unit.test_spawner_lifecycle import ME, runner, spawner  # noqa: F401 (a fixture)

HOME = pwd.getpwnam(ME).pw_dir


def image_spawner(**profile):
    s = spawner("unit-container")
    s.default_profile = {"name": "pt-image", "display_name": "PT image",
                         "environment": "pytorch", **profile}  # fmt: skip
    s.images_dir = "/var/lib/portal/images"
    s.shared_data = "/srv/portal/datasets"
    return s


async def submitted_script(s, options, runner):  # noqa: F811
    s.load_user_options(options)
    await s.submit_batch_script()
    return runner.script


async def test_a_site_image_runs_the_launcher_under_ch_run_with_the_binds(runner):  # noqa: F811
    s = image_spawner(image="pytorch")
    script = await submitted_script(s, {"gpus": "1"}, runner)
    exec_line = script.rstrip().splitlines()[-1]
    home_root = os.path.dirname(HOME.rstrip("/")) or "/"
    assert exec_line.startswith(f"exec ch-run --bind={home_root}:{home_root} ")
    for bind in ("/srv/portal/datasets", "/etc/slurm", "/run/munge"):
        assert f"--bind={bind}:{bind}" in exec_line
    assert f" --cd={HOME} /var/lib/portal/images/pytorch -- " in exec_line
    assert exec_line.endswith(" ".join(s.cmd_formatted_for_batch()))
    assert "export PORTAL_IMAGE=/var/lib/portal/images/pytorch" in script
    assert s.session_image() == "/var/lib/portal/images/pytorch"


async def test_an_environment_profile_runs_no_runtime(runner):  # noqa: F811
    s = image_spawner()
    script = await submitted_script(s, {"gpus": "1"}, runner)
    assert "ch-run" not in script and "PORTAL_IMAGE" not in script
    assert s.session_image() == ""


@pytest.mark.parametrize(
    "profile, image, message",
    [
        ({"image": "pytorch"}, f"{HOME}/img", "does not run images of your own"),
        ({"user_images": True}, "", "runs your own image: give its folder in your home"),
        ({"user_images": True}, f"{HOME}/../etc", "without '..'"),
        ({"user_images": True}, "img/relative", "must be an absolute path"),
        ({"user_images": True}, f"{HOME}/a b", "must be an absolute path"),
        ({"user_images": True}, ["/x"], "must be the path of a folder in your home"),
    ],
)
def test_an_image_option_the_profile_does_not_take_is_refused(profile, image, message):
    s = image_spawner(**profile)
    with pytest.raises(ProfileError, match=message):
        s.resolve_options({"gpus": 1, "image": image})
    with pytest.raises(web.HTTPError, match=message):
        s.load_user_options({"gpus": 1, "image": image})


class FakeCheck:
    """The sudo'd helper's process: its exit status and output (this unit's only fake)."""

    def __init__(self, returncode, output):
        self.returncode, self.output, self.argv = returncode, output, None

    async def __call__(self, *argv, **kwargs):
        self.argv = argv
        return self

    async def communicate(self):
        return self.output.encode(), b""


async def test_a_users_image_is_checked_as_them_before_anything_is_submitted(
    runner,  # noqa: F811
    monkeypatch,
):
    check = FakeCheck(1, "ok python3 3.11.2\nimage /x: jupyter_server: no /opt/j/bin/python\n")
    monkeypatch.setattr(asyncio, "create_subprocess_exec", check)
    s = image_spawner(image="pytorch", user_images=True)
    s.load_user_options({"gpus": "1", "image": f"{HOME}/images/mine"})
    with pytest.raises(web.HTTPError) as refused:
        await s.submit_batch_script()
    assert refused.value.status_code == 400
    assert refused.value.log_message == (
        "Your image was refused: image /x: jupyter_server: no /opt/j/bin/python"
    )
    assert runner.script is None  # nothing submitted
    assert check.argv[:4] == ("sudo", "-n", "-u", ME)
    assert check.argv[4] == "/usr/local/libexec/portal/portal-image-check"
    assert check.argv[-2:] == ("--in-home", f"{HOME}/images/mine")
    assert ("--framework", "pytorch") == check.argv[7:9]

    passed = FakeCheck(0, "ok python3 3.11.2\ndone\nimage works\n")
    monkeypatch.setattr(asyncio, "create_subprocess_exec", passed)
    script = await s.submit_batch_script() and runner.script
    assert f" {HOME}/images/mine -- " in script.rstrip().splitlines()[-1]
    assert s.last_options["image"] == f"{HOME}/images/mine"
    assert s.session_info is not None


async def test_a_users_image_outside_their_home_is_refused_before_the_check(
    runner,  # noqa: F811
    monkeypatch,
):
    check = FakeCheck(0, "done\n")
    monkeypatch.setattr(asyncio, "create_subprocess_exec", check)
    s = image_spawner(user_images=True)
    s.load_user_options({"gpus": "1", "image": "/var/lib/portal/images/pytorch"})
    with pytest.raises(web.HTTPError, match="must be a folder in your home"):
        await s.submit_batch_script()
    assert check.argv is None and runner.script is None


def test_the_refusal_says_the_checks_last_line():
    assert container.refused_message(137, "", "/h/x") == (
        "Your image was refused: its check ended with status 137"
    )
