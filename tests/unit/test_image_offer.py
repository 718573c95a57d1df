"""The hub offers a profile of a container image only while the latest
check of that image with the profile's environment passed at the image's
current stamp (``spawners.hub_config.StoreProfiles``), on a scratch store and
scratch image folders; no image is run."""

import copy
import dataclasses
import logging
import os

import pytest

from portal import settings as site_settings
from portal.helper.imagecheck import image_stamp
from spawners import hub_config

PROFILES = [
    {"name": "pytorch", "display_name": "PyTorch", "environment": "pytorch", "partition": "gpu"},
    {"name": "pt-image", "display_name": "PyTorch container", "environment": "pytorch",
     "partition": "gpu", "image": "pytorch"},
    {"name": "tf-image", "display_name": "TensorFlow container", "environment": "tensorflow",
     "partition": "gpu", "image": "tensorflow"},
    {"name": "own", "display_name": "Your image", "environment": "pytorch", "partition": "gpu",
     "user_images": True},
]  # fmt: skip


def fake_image(images, name, framework):
    """A folder that looks like a built image to the service and the hub."""
    root = images / name
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/portal-image").write_text(f"NAME={name}\nFRAMEWORK={framework}\n")
    return str(root)


@pytest.fixture
def source(tmp_path, monkeypatch):
    settings = copy.deepcopy(site_settings.load())
    settings["portal"]["db_url"] = f"sqlite:///{tmp_path}/portal.sqlite"
    settings["containers"]["images"] = str(tmp_path / "images")
    monkeypatch.setattr(hub_config, "settings_profiles", lambda: copy.deepcopy(PROFILES))
    return hub_config.StoreProfiles(settings)


def offered(source):
    return [p.name for p in source()]


def test_an_image_never_checked_or_missing_is_not_offered(source, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, "portal"):
        assert offered(source) == ["pytorch", "own"]
        assert offered(source) == ["pytorch", "own"]
    held = [r.getMessage() for r in caplog.records]
    # once each, with why
    assert held == [
        f"Profile pt-image is not offered: image 'pytorch' is not in {tmp_path}/images "
        "(its image's checks: /services/portal/images)",
        f"Profile tf-image is not offered: image 'tensorflow' is not in {tmp_path}/images "
        "(its image's checks: /services/portal/images)",
    ]
    fake_image(tmp_path / "images", "pytorch", "pytorch")
    caplog.clear()
    with caplog.at_level(logging.WARNING, "portal"):
        assert offered(source) == ["pytorch", "own"]
    assert "has not been checked with 'pytorch' yet" in caplog.records[0].getMessage()


def test_an_image_is_offered_after_an_ok_check_and_held_back_once_rebuilt(source, tmp_path, caplog):
    image = fake_image(tmp_path / "images", "pytorch", "pytorch")
    store = source.store
    stamp = image_stamp(image)
    store.record_image_check("pytorch", "pytorch", stamp, True, "works", ["done"], "carol")
    assert offered(source) == ["pytorch", "pt-image", "own"]
    # a check with another framework says nothing of this profile's
    store.record_image_check("pytorch", "tensorflow", stamp, False, "no tf", [], "carol")
    assert offered(source) == ["pytorch", "pt-image", "own"]
    # rebuilt: not offered until checked again at the new stamp
    os.utime(os.path.join(image, "etc/portal-image"), ns=(10**18, 10**18))
    with caplog.at_level(logging.WARNING, "portal"):
        assert offered(source) == ["pytorch", "own"]
    assert "changed after its check with 'pytorch'" in caplog.text
    store.record_image_check("pytorch", "pytorch", image_stamp(image), True, "works", [],
                             "portal service")  # fmt: skip
    assert offered(source) == ["pytorch", "pt-image", "own"]


def test_an_image_whose_latest_check_failed_is_not_offered(source, tmp_path, caplog):
    image = fake_image(tmp_path / "images", "tensorflow", "tensorflow")
    store = source.store
    store.record_image_check("tensorflow", "tensorflow", image_stamp(image), True, "works", [],
                             "carol")  # fmt: skip
    assert "tf-image" in offered(source)
    store.record_image_check("tensorflow", "tensorflow", image_stamp(image), False,
                             "image x: tensorflow: ModuleNotFoundError", [], "carol")  # fmt: skip
    with caplog.at_level(logging.WARNING, "portal"):
        assert "tf-image" not in offered(source)
        offered(source)
    assert [r.getMessage() for r in caplog.records if "tf-image" in r.getMessage()] == [
        "Profile tf-image is not offered: the check of image 'tensorflow' with 'tensorflow' "
        "failed: image x: tensorflow: ModuleNotFoundError "
        "(its image's checks: /services/portal/images)"
    ]


def test_a_disabled_profile_held_back_is_not_logged(source, caplog):
    store = source.store
    for name in ("pt-image", "tf-image"):
        p = store.get(name)
        store.update(dataclasses.replace(p, enabled=False), p.revision, "carol")
    with caplog.at_level(logging.WARNING, "portal"):
        assert offered(source) == ["pytorch", "own"]
    assert caplog.records == []
