"""Which log folders a TensorBoard may show, and their ids."""

import os

import pytest

from portal.session.tensorboard.logdir import (
    ID_LENGTH,
    LogdirError,
    relative_logdir,
    resolve_logdir,
    tensorboard_id,
)


@pytest.fixture
def home(tmp_path):
    """A home with logs/run1, a file, a link out and a neighbour's home."""
    home = tmp_path / "alice"
    (home / "logs" / "run1").mkdir(parents=True)
    (home / "notes.txt").write_text("x")
    (tmp_path / "bob" / "logs").mkdir(parents=True)
    (home / "bobs-logs").symlink_to(tmp_path / "bob" / "logs")
    (home / "my-logs").symlink_to(home / "logs")
    return home


@pytest.mark.parametrize("logdir", ["logs", "logs/", "./logs", "logs//"])
def test_relative_folders_resolve_inside_home(home, logdir):
    assert resolve_logdir(str(home), logdir) == str(home / "logs")


def test_absolute_folder_inside_home(home):
    assert resolve_logdir(str(home), str(home / "logs" / "run1")) == str(home / "logs" / "run1")


def test_empty_is_the_home_itself(home):
    assert resolve_logdir(str(home), "") == str(home)
    assert relative_logdir(str(home), str(home)) == ""


def test_link_inside_home_resolves_to_its_target(home):
    assert resolve_logdir(str(home), "my-logs") == str(home / "logs")


@pytest.mark.parametrize(
    "logdir, message",
    [
        ("/etc", "/etc is outside your home folder"),
        ("/", "/ is outside your home folder"),
        ("bobs-logs", "bobs-logs is outside your home folder"),
        ("../bob", "may not contain '..'"),
        ("logs/../../bob", "may not contain '..'"),
        ("..", "may not contain '..'"),
        ("missing", "No such folder: missing"),
        ("notes.txt", "Not a folder: notes.txt"),
        ("a\0b", "NUL"),
        (42, "must be a folder name"),
        (None, "must be a folder name"),
        (["logs"], "must be a folder name"),
    ],
)
def test_refused_folders_say_why(home, logdir, message):
    with pytest.raises(LogdirError, match=message.replace("(", r"\(")):
        resolve_logdir(str(home), logdir)


def test_outside_is_said_before_missing(home, tmp_path):
    # nothing is told about what exists outside the home
    with pytest.raises(LogdirError, match="outside"):
        resolve_logdir(str(home), str(tmp_path / "no-such-folder"))


def test_neighbour_with_common_prefix_is_outside(home, tmp_path):
    (tmp_path / "alice2").mkdir()
    with pytest.raises(LogdirError, match="outside"):
        resolve_logdir(str(home), str(tmp_path / "alice2"))


def test_home_reached_through_a_link_is_the_same_home(home, tmp_path):
    link = tmp_path / "home-link"
    link.symlink_to(home)
    assert resolve_logdir(str(link), "logs") == str(home / "logs")
    assert resolve_logdir(str(link), str(home / "logs")) == str(home / "logs")
    assert relative_logdir(str(link), str(home / "logs" / "run1")) == os.path.join("logs", "run1")


def test_ids_are_short_stable_and_distinct():
    a = tensorboard_id("/home/alice/logs")
    assert a == tensorboard_id("/home/alice/logs")
    assert len(a) == ID_LENGTH and int(a, 16) >= 0
    assert a != tensorboard_id("/home/alice/logs/run1")
    assert a != tensorboard_id("/home/bob/logs")
