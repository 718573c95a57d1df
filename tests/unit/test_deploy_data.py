"""The shared data folder (deploy/data_setup.py): the demo data sets as
world-readable copies, which a container session can read through the one
folder it is bound; a site's own entries untouched; and what ``make purge``
takes back (deploy/purge.py), which is the copy alone."""

import os
import stat

import pytest

from deploy import data_setup
from deploy.data_setup import action, is_copy_of


@pytest.fixture
def source(tmp_path):
    """A data set as Debian installs it, root's and 0644 (here 0600, to
    see the copy made world-readable)."""
    folder = tmp_path / "usr-share" / "fashion-mnist"
    folder.mkdir(parents=True)
    for name, data in {"train.gz": b"\x1f\x8b train", "t10k.gz": b"\x1f\x8b test"}.items():
        (folder / name).write_bytes(data)
        (folder / name).chmod(0o600)
    return folder


@pytest.fixture
def ensure(tmp_path, source, monkeypatch):
    monkeypatch.setattr(data_setup, "DEMO_DATA", {"fashion-mnist": source})
    data = tmp_path / "datasets"
    settings = {"data": {"shared_data": str(data)}}
    return data, lambda: data_setup.cmd_ensure(settings)


def test_a_free_name_is_copied_and_only_a_link_to_exactly_the_data_set_replaced(tmp_path, source):
    dest = tmp_path / "fashion-mnist"
    assert action(dest, source) == "copy"
    dest.symlink_to(source)
    assert action(dest, source) == "replace"
    dest.unlink()
    dest.symlink_to(f"{source}/")
    assert action(dest, source) == "keep"
    dest.unlink()
    dest.symlink_to(tmp_path / "nowhere")
    assert action(dest, source) == "keep"
    dest.unlink()
    dest.mkdir()
    assert action(dest, source) == "keep"


def test_the_copy_is_real_files_readable_by_everyone(ensure, source):
    data, run = ensure
    run()
    copy = data / "fashion-mnist"
    assert not copy.is_symlink() and copy.is_dir()
    assert stat.S_IMODE(data.stat().st_mode) == 0o755
    assert stat.S_IMODE(copy.stat().st_mode) & 0o555 == 0o555
    for name in ("train.gz", "t10k.gz"):
        assert (copy / name).read_bytes() == (source / name).read_bytes()
        assert not (copy / name).is_symlink()
        assert stat.S_IMODE((copy / name).stat().st_mode) & 0o444 == 0o444
    assert sorted(os.listdir(data)) == ["fashion-mnist"]  # no work folder left
    assert is_copy_of(copy, source)


def test_an_earlier_versions_link_becomes_a_copy(ensure, source):
    data, run = ensure
    data.mkdir()
    (data / "fashion-mnist").symlink_to(source)
    run()
    assert not (data / "fashion-mnist").is_symlink()
    assert is_copy_of(data / "fashion-mnist", source)


@pytest.mark.parametrize("kind", ["folder", "link", "dangling link", "file"])
def test_a_sites_entry_of_the_same_name_is_kept(ensure, source, tmp_path, kind):
    data, run = ensure
    data.mkdir()
    entry = data / "fashion-mnist"
    if kind == "folder":
        entry.mkdir()
        (entry / "site.csv").write_text("site's own\n")
    elif kind == "file":
        entry.write_text("site's own\n")
    else:
        elsewhere = tmp_path / ("missing" if kind == "dangling link" else "")
        entry.symlink_to(elsewhere)
    before = os.readlink(entry) if entry.is_symlink() else sorted(os.listdir(data))
    run()
    after = os.readlink(entry) if entry.is_symlink() else sorted(os.listdir(data))
    assert after == before
    if kind == "folder":
        assert os.listdir(entry) == ["site.csv"]


def test_purge_takes_the_copy_only_when_it_is_the_data_set_unchanged(ensure, source):
    data, run = ensure
    run()
    copy = data / "fashion-mnist"
    assert is_copy_of(copy, source)
    (copy / "notes.txt").write_text("a user's file")
    assert not is_copy_of(copy, source)
    (copy / "notes.txt").unlink()
    (copy / "train.gz").write_bytes(b"\x1f\x8b edited")
    assert not is_copy_of(copy, source)
    assert not is_copy_of(data / "missing", source)
    link = data / "link"
    link.symlink_to(source)
    assert not is_copy_of(link, source)


def test_no_shared_data_folder_is_made_when_the_setting_is_empty(tmp_path, capsys):
    data_setup.cmd_ensure({"data": {"shared_data": ""}})
    assert "[data] shared_data is empty" in capsys.readouterr().err
