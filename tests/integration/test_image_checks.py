"""The admin service checks the site's container images before a profile
offers one (issue 25), with the real images `make up` builds into
[containers] images and the real ch-run, run by the service's account: a good
image passes and is offered, an image checked with a framework it lacks is
refused with the check's message and never offered, every check audited."""

from portal import settings as site_settings
from tests.integration.test_profile_service import spawn_page_profiles

IMAGES = site_settings.load()["containers"]["images"]
PROFILE = {"display_name": "PyTorch container", "environment": "pytorch", "partition": "gpu",
           "max_gpus": 1}  # fmt: skip


def test_the_images_page_lists_the_built_images_and_checks_one(portal):
    carol = portal("carol")
    images = {i["name"]: i for i in carol.get("api/images").json()}
    assert {"pytorch", "tensorflow"} <= set(images), images
    assert images["pytorch"]["info"]["FRAMEWORK"] == "pytorch"
    r = carol.send("POST", "api/images/pytorch/check", json={})
    assert r.status_code == 200, r.text
    (check,) = [c for c in r.json() if c["framework"] == "pytorch"]
    assert check["ok"], check["lines"]
    assert check["message"].startswith(f"image {IMAGES}/pytorch works: python3 3.")
    assert "torch" in check["message"] and check["checked_by"] == "carol"
    page = carol.get("images").text
    assert 'id="image-pytorch"' in page and "ok portal.session.launch" in page
    assert portal("bob").get("images").status_code == 403


def test_an_image_profile_is_offered_only_once_its_check_passed(portal, login, restore_profiles):
    carol = portal("carol")
    r = carol.send("POST", "api/profiles", json={**PROFILE, "name": "pt-image", "image": "pytorch"})
    assert r.status_code == 201, r.text
    assert "pt-image" in spawn_page_profiles(login("bob"))
    # the TensorFlow image holds no PyTorch environment: refused, with the check's message
    r = carol.send("POST", "api/profiles",
                   json={**PROFILE, "name": "tf-torch", "image": "tensorflow"})  # fmt: skip
    assert r.status_code == 400 and r.json()["field"] == "image", r.text
    assert "no /opt/portal/envs/pytorch/bin/python in the image" in r.json()["error"]
    assert r.json()["check"]["ok"] is False and r.json()["check"]["lines"]
    assert carol.get("api/profiles/tf-torch").status_code == 404
    # disabled, it is kept; enabling it is refused; it is never offered
    r = carol.send(
        "POST",
        "api/profiles",
        json={**PROFILE, "name": "tf-torch", "image": "tensorflow", "enabled": False},
    )
    assert r.status_code == 201, r.text
    r = carol.put("tf-torch", enabled=True, revision=r.json()["revision"])
    assert r.status_code == 400 and "no /opt/portal/envs/pytorch" in r.json()["error"]
    assert "tf-torch" not in spawn_page_profiles(login("bob"))
    listed = carol.get("profiles").text
    assert "the check of image &#39;tensorflow&#39; with &#39;pytorch&#39; failed" in listed
