"""Container images (deploy/images.py): the commands it runs, what its
check of an image tells the admin, and when ``ensure`` builds an image
again. No image is built here."""

import json

import pytest

from deploy.base import DeployError
from deploy.envs_setup import built_from
from deploy.images import (
    SOURCE_FILE,
    as_user,
    debian_sources,
    harden,
    image_source,
    mmdebstrap_argv,
    mount_points,
    rebuild_reason,
    recorded_source,
    session_envs,
    valid_name,
)
from portal.helper import imagecheck
from portal.helper.imagecheck import ch_run_argv

SETTINGS = {
    "envs": {
        "prefix": "/opt/portal",
        "jupyter": "/opt/portal/envs/jupyter",
        "frameworks": ["pytorch", "tensorflow"],
    },
    "data": {"shared_data": "/srv/portal/datasets"},
}


def test_the_sources_are_the_releases_and_its_updates_not_a_third_party():
    sources = """
deb [signed-by=/usr/share/keyrings/x.gpg] https://packages.example.com/apt stable main
deb http://security.debian.org/debian-security bookworm-security main
# deb http://old.example.org/debian bookworm main
deb http://ftp.fr.debian.org/debian/ bookworm main contrib
deb http://ftp.fr.debian.org/debian/ trixie main
"""
    assert debian_sources(sources) == [
        "deb http://ftp.fr.debian.org/debian bookworm main",
        "deb http://security.debian.org/debian-security bookworm-security main",
    ]
    assert debian_sources(sources, suite="trixie") == [
        "deb http://ftp.fr.debian.org/debian trixie main"
    ]
    assert debian_sources("deb http://m.example/debian bookworm contrib") == []
    assert debian_sources("deb http://s.example/debian-security bookworm-security main") == []


def test_deb822_stanzas_are_read_apart():
    sources = (
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n"
    )
    assert debian_sources(sources) == ["deb http://mirror.example/debian bookworm main"]


def test_mmdebstrap_builds_a_minbase_with_python_from_the_mirror():
    sources = [
        "deb http://m.example/debian bookworm main",
        "deb http://s.example/s bookworm-security main",
    ]
    argv = mmdebstrap_argv("/d/.pt.new", sources)
    assert argv[0] == "mmdebstrap" and "--variant=minbase" in argv
    included = argv[argv.index("bookworm") - 1].removeprefix("--include=").split(",")
    assert {"python3", "slurm-client"} <= set(included)
    assert argv[-3:] == ["/d/.pt.new", *sources]


@pytest.mark.parametrize("name", ["..", "../x", "a/b", "", "-rf", ".hidden", "a b"])
def test_an_image_name_that_is_not_a_plain_folder_name_is_refused(name):
    with pytest.raises(DeployError, match="image name"):
        valid_name(name)


def test_a_framework_outside_the_settings_is_refused_naming_the_choices():
    assert session_envs(SETTINGS, "pytorch")[1].as_posix() == "/opt/portal/envs/pytorch"
    with pytest.raises(DeployError, match="pytorch, tensorflow"):
        session_envs(SETTINGS, "mxnet")


def test_the_build_makes_the_mount_points_that_the_check_looks_for():
    # one list (portal.helper.imagecheck): what the build makes, the check wants
    assert mount_points is imagecheck.mount_points


def test_the_check_runs_as_the_user_with_a_clean_environment_and_user_set():
    argv = as_user("alice", ch_run_argv("/img/pytorch", ["/usr/bin/python3"]))
    assert argv[:4] == ["runuser", "-u", "alice", "--"]
    assert argv[4:6] == ["env", "-i"] and "USER=alice" in argv
    ch_run = argv.index("ch-run")
    assert argv[ch_run + 1 : ch_run + 4] == ["/img/pytorch", "--", "/usr/bin/python3"]


def test_ch_run_writes_only_when_asked():
    assert "-w" not in ch_run_argv("/i", ["true"])
    assert ch_run_argv("/i", ["true"], write=True, binds=["/r:/mnt"])[:4] == [
        "ch-run", "-w", "-b", "/r:/mnt",
    ]  # fmt: skip
    assert as_user("bob", ["id"], home="/u/bob")[-1] == "id"


def stamps(pytorch="eb97 ", jupyter_package="027a"):
    return {
        "/opt/portal/envs/jupyter": {".portal-stamp": "63ba ", ".portal-package": jupyter_package},
        "/opt/portal/envs/pytorch": {".portal-stamp": pytorch, ".portal-build": "cpu"},
    }


BUILT = image_source("pytorch", stamps(), ["/home", "/srv/portal/datasets"], "k1")


def test_an_image_built_from_the_same_environments_is_up_to_date():
    wanted = image_source("pytorch", stamps(), ["/home", "/srv/portal/datasets"], "k1")
    assert rebuild_reason(json.loads(json.dumps(BUILT)), wanted) == ""


@pytest.mark.parametrize(
    "wanted, reason",
    [
        (image_source("pytorch", stamps(pytorch="ffff "), ["/home", "/srv/portal/datasets"], "k1"),
         "/opt/portal/envs/pytorch changed"),
        (image_source("pytorch", stamps(jupyter_package="new"), ["/home", "/srv/portal/datasets"],
                      "k1"),
         "/opt/portal/envs/jupyter changed"),
        (image_source("pytorch", stamps(), ["/home", "/data"], "k1"), "mount points changed"),
        (image_source("pytorch", stamps(), ["/home", "/srv/portal/datasets"], "k2"),
         "the way images are built changed"),
    ],
)  # fmt: skip
def test_a_changed_environment_mount_point_or_recipe_rebuilds_it_saying_why(wanted, reason):
    assert reason in rebuild_reason(BUILT, wanted)


def test_a_framework_rebuilt_for_cuda_or_a_new_recipe_rebuilds_it():
    cuda = stamps()
    cuda["/opt/portal/envs/pytorch"][".portal-build"] = "cuda"
    assert rebuild_reason(BUILT, image_source("pytorch", cuda, BUILT["mount_points"], "k1"))
    assert rebuild_reason({**BUILT, "recipe": 0}, BUILT)


def test_an_image_without_a_record_or_with_a_broken_one_is_rebuilt():
    assert rebuild_reason(None, BUILT) == "it has no record of what it was built from"
    assert rebuild_reason([], BUILT)
    assert rebuild_reason({}, BUILT) == "/opt/portal/envs/jupyter, /opt/portal/envs/pytorch changed"


def test_the_record_is_read_from_the_image(tmp_path):
    assert recorded_source(tmp_path) is None
    (tmp_path / "etc").mkdir()
    (tmp_path / SOURCE_FILE).write_text("{not json")
    assert recorded_source(tmp_path) is None
    (tmp_path / SOURCE_FILE).write_text(json.dumps(BUILT))
    assert recorded_source(tmp_path) == BUILT


def test_an_environments_record_is_its_stamp_files(tmp_path):
    (tmp_path / ".portal-stamp").write_text("abc \n")
    (tmp_path / ".portal-build").write_text("cuda\n")
    (tmp_path / "other").write_text("x")
    assert built_from(tmp_path) == {".portal-stamp": "abc ", ".portal-build": "cuda"}
    assert built_from(tmp_path / "missing") == {}


def test_an_image_keeps_no_setuid_file_and_no_folder_writable_by_all(tmp_path):
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "var/tmp").mkdir(parents=True)
    su = tmp_path / "usr/bin/su"
    su.write_text("")
    su.chmod(0o4755)
    (tmp_path / "var/tmp").chmod(0o1777)
    harden(tmp_path)
    assert su.stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "var/tmp").stat().st_mode & 0o7777 == 0o755


def test_an_image_keeps_no_device_file_nothing_of_another_account_and_no_munge_key(tmp_path):
    """What an attacker's review found in the built images (issue 25):
    mmdebstrap's /dev/console 0666 (the host's console, to any user),
    munge's files of uid 100, /var/mail writable by group mail."""
    import os
    import stat

    (tmp_path / "dev").mkdir()
    os.mknod(tmp_path / "dev/console", 0o666 | stat.S_IFCHR, os.makedev(5, 1))
    (tmp_path / "etc/munge").mkdir(parents=True)
    (tmp_path / "etc/munge/munge.key").write_text("k")
    os.chown(tmp_path / "etc/munge", 100, 101)
    mail = tmp_path / "var/mail"
    mail.mkdir(parents=True)
    mail.chmod(0o2775)
    os.chown(mail, 0, 8)
    (tmp_path / "bin").symlink_to("usr/bin")
    harden(tmp_path)
    assert not (tmp_path / "dev/console").exists() and (tmp_path / "dev").is_dir()
    assert not (tmp_path / "etc/munge/munge.key").exists()
    for path in (tmp_path / "etc/munge", mail):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (0, 0), path
        assert not info.st_mode & 0o022, path
    assert (tmp_path / "bin").is_symlink()
