"""The admin service's container images (issue 25), its handlers driven over
HTTP on a scratch store, fake image folders and a fake check (no image is
run, no hub is asked: the user comes from a test header): the images page and
its Check button, the profile form's and the API's image fields, a save
refused by its image's check, the background re-check of rebuilt images, and
the runtime the editor names."""

import asyncio
import copy
import dataclasses
import json
import os
import threading
import time
from urllib.parse import urlencode

import pytest
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from portal import settings as site_settings
from portal.helper.imagecheck import check_result, image_stamp
from portal.roles import ADMIN_SCOPE
from portal.service.app import create_application
from portal.service.cluster import ClusterView
from portal.service.handlers import BaseHandler
from portal.slurm.model import Node, Partition
from portal.store import ProfileStore

PREFIX = "/services/portal/"
NODE = Node("n1", ("gpu",), 4, 0, 32, 0, 196608, 0, "idle")
USERS = {
    "carol": {"name": "carol", "scopes": [ADMIN_SCOPE, "access:services"]},
    "bob": {"name": "bob", "scopes": ["access:services"]},
}
PROFILES = [
    {"name": "pytorch", "display_name": "PyTorch", "environment": "pytorch", "partition": "gpu"},
    {"name": "pt-image", "display_name": "PyTorch container", "environment": "pytorch",
     "partition": "gpu", "image": "pytorch", "user_images": True},
]  # fmt: skip


class FakeCheck:
    """The check's runner: what the image's python would print, without
    ch-run. An image with a file BROKEN lacks the modules it names."""

    def __init__(self, delay=0.0):
        self.calls = []
        self.delay = delay
        self.threads = set()  # where it ran
        self.running = self.most = 0  # how many ran at once
        self.hold = None  # a threading.Event each check waits for, when set

    def __call__(self, path, steps):
        self.calls.append((os.path.basename(path), [what for what, _, _ in steps["imports"]]))
        self.threads.add(threading.get_ident())
        self.running += 1
        self.most = max(self.most, self.running)
        time.sleep(self.delay)
        if self.hold is not None:
            self.hold.wait(30)
        self.running -= 1
        broken = open(os.path.join(path, "BROKEN")).read().split() if (
            os.path.exists(os.path.join(path, "BROKEN"))) else []  # fmt: skip
        lines = ["ok python3 3.11.2", "ok image"]
        for what, python, _ in steps["imports"]:
            if what in broken:
                lines.append(f"FAIL {what}: ModuleNotFoundError: No module named {what!r} "
                             f"({python})")  # fmt: skip
            else:
                lines.append(f"ok {what} 1.0")
        return check_result(path, 0, "\n".join([*lines, "done"]))

    def frameworks(self):
        return [(image, imports[2:]) for image, imports in self.calls]


def fake_image(images, name, framework="", broken=()):
    root = images / name
    (root / "etc").mkdir(parents=True, exist_ok=True)
    info = f'NAME={name}\nBUILT=2026-11-25T03:50:00Z\nBASE="Debian bookworm"\n'
    (root / "etc/portal-image").write_text(info + (f"FRAMEWORK={framework}\n" if framework else ""))
    if broken:
        (root / "BROKEN").write_text(" ".join(broken))
    elif (root / "BROKEN").exists():
        (root / "BROKEN").unlink()
    return str(root)


def rebuilt(path, when):
    os.utime(os.path.join(path, "etc/portal-image"), ns=(when, when))


class Service:
    """The service's application on a free port, as ``user``."""

    def __init__(self, tmp_path, monkeypatch, runtime="charliecloud", delay=0.0):
        settings = copy.deepcopy(site_settings.load())
        prefix = tmp_path / "opt"
        for env in ("jupyter", "pytorch", "tensorflow"):
            (prefix / "envs" / env / "bin").mkdir(parents=True)
            (prefix / "envs" / env / "bin" / "python").write_text("")
        settings["envs"].update(prefix=str(prefix), jupyter=str(prefix / "envs/jupyter"))
        settings["containers"].update(images=str(tmp_path / "images"), runtime=runtime)
        settings["portal"]["db_url"] = f"sqlite:///{tmp_path}/portal.sqlite"
        self.images = tmp_path / "images"
        self.images.mkdir()
        self.store = ProfileStore(settings["portal"]["db_url"])
        self.store.upgrade()
        self.store.seed(PROFILES)
        self.check = FakeCheck(delay)
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "unused")
        monkeypatch.setattr(BaseHandler, "get_current_user",
                            lambda h: USERS.get(h.request.headers.get("X-Test-User")))  # fmt: skip
        self.app = create_application(settings, self.store, image_runner=self.check)
        self.ops = self.app.settings["operations"]

        class Cluster:
            async def view(self):
                return ClusterView(partitions={"gpu": Partition("gpu", (NODE,), "7-00:00:00")})

        self.ops.cluster = Cluster()
        self.server = None

    async def fetch(self, path, method="GET", user="carol", body=None, form=None):
        if self.server is None:  # on the test's event loop
            sock, self.port = bind_unused_port()
            self.server = HTTPServer(self.app)
            self.server.add_sockets([sock])
            self.client = AsyncHTTPClient()
        headers = {"X-Test-User": user}
        if form is not None:
            body = urlencode(form, doseq=True)
        elif body is not None:
            body = json.dumps(body)
        response = await self.client.fetch(
            f"http://127.0.0.1:{self.port}{PREFIX}{path}", method=method, headers=headers,
            body=body, follow_redirects=False, raise_error=False, request_timeout=30,
        )  # fmt: skip
        response.text = response.body.decode() if response.body else ""
        return response

    async def json(self, path, method="GET", user="carol", body=None):
        response = await self.fetch(path, method, user, body)
        return response.code, json.loads(response.text) if response.text else None

    def close(self):
        if self.server is not None:
            self.server.stop()


@pytest.fixture
def service(tmp_path, monkeypatch):
    s = Service(tmp_path, monkeypatch)
    yield s
    s.close()


def form_of(profile, **change):
    """The profile form's fields for ``profile`` (a dict), as a browser sends them."""
    data = {**profile, **change}
    lists = ("groups", "partitions", "gpu_types", "choose", "features")
    form = {k: str(v) for k, v in data.items() if k not in (*lists, "enabled", "user_images")}
    for key in lists:
        form[key] = ", ".join(data.get(key, []))
    for key in ("enabled", "user_images"):
        if data[key]:
            form[key] = "on"
    return form


async def test_the_images_page_lists_the_images_and_checks_one_with_the_check_button(service):
    fake_image(service.images, "pytorch", "pytorch")
    fake_image(service.images, "bare")
    page = await service.fetch("images")
    assert page.code == 200
    assert 'id="image-pytorch"' in page.text and 'id="image-bare"' in page.text
    assert "framework <code>pytorch</code>" in page.text and "Never checked." in page.text
    assert page.text.count('class="btn btn-sm btn-outline-primary check-image"') == 2
    assert f'action="{PREFIX}images/pytorch/check"' in page.text

    r = await service.fetch("images/pytorch/check", "POST", form={})
    assert r.code == 302
    assert "Checked+image+pytorch%3A+pytorch%3A+ok" in r.headers["Location"]
    # its own FRAMEWORK, which is also the one environment profiles name it with
    assert service.check.frameworks() == [("pytorch", ["torch"])]
    (check,) = service.store.image_checks("pytorch")
    assert (check["framework"], check["ok"], check["checked_by"]) == ("pytorch", True, "carol")
    page = await service.fetch("images")
    assert 'data-framework="pytorch" data-ok="true"' in page.text
    assert "ok torch 1.0" in page.text  # the output, in full
    assert 'class="checked-by">carol<' in page.text

    # an image without a framework: Jupyter and the launcher only
    await service.fetch("images/bare/check", "POST", form={})
    assert service.check.calls[-1] == ("bare", ["jupyter_server", "portal.session.launch"])


async def test_check_also_checks_every_profiles_environment_that_names_the_image(service):
    fake_image(service.images, "pytorch", "tensorflow")
    code, checks = await service.json("api/images/pytorch/check", "POST", body={})
    assert code == 200
    assert [(c["framework"], c["ok"]) for c in checks] == [("tensorflow", True), ("pytorch", True)]
    assert service.check.frameworks() == [("pytorch", ["tensorflow"]), ("pytorch", ["torch"])]
    code, images = await service.json("api/images")
    (image,) = images
    assert image["name"] == "pytorch" and image["info"]["FRAMEWORK"] == "tensorflow"
    assert [(c["framework"], c["current"]) for c in image["checks"]] == [
        ("pytorch", True), ("tensorflow", True),
    ]  # fmt: skip
    assert image["profiles"] == [
        {"name": "pt-image", "environment": "pytorch", "enabled": True, "problem": ""}
    ]


async def test_only_admins_see_or_check_images(service):
    fake_image(service.images, "pytorch", "pytorch")
    page = await service.fetch("images", user="bob")
    assert page.code == 403 and "Only portal admins may see the site&#39;s images" in page.text
    r = await service.fetch("images/pytorch/check", "POST", user="bob", form={})
    assert r.code == 403 and "Only portal admins may check images" in r.text
    code, body = await service.json("api/images/pytorch/check", "POST", user="bob", body={})
    assert code == 403 and body["error"] == "Only portal admins may check images"
    assert service.check.calls == [] and service.store.image_checks() == []
    assert 'id="nav-images"' not in (await service.fetch("profiles", user="bob")).text


async def test_checking_an_image_that_is_not_there_says_so(service):
    code, body = await service.json("api/images/gone/check", "POST", body={})
    assert code == 404 and "image 'gone' is not in" in body["error"]
    r = await service.fetch("images/gone/check", "POST", form={})
    assert r.code == 302 and "Not+done" in r.headers["Location"]
    assert service.check.calls == []


async def test_a_save_naming_an_image_runs_its_check_once_per_build(service):
    path = fake_image(service.images, "pytorch", "pytorch")
    code, p = await service.json("api/profiles/pt-image")
    assert (p["image"], p["user_images"]) == ("pytorch", True)
    code, saved = await service.json(
        "api/profiles/pt-image", "PUT", body={"max_gpus": 2, "revision": p["revision"]}
    )
    assert code == 200 and saved["max_gpus"] == 2, saved
    assert service.check.frameworks() == [("pytorch", ["torch"])]
    assert service.store.image_checks()[0]["checked_by"] == "carol"
    # an ok check at the image's present stamp: not run again
    code, saved = await service.json(
        "api/profiles/pt-image", "PUT", body={"max_gpus": 3, "revision": saved["revision"]}
    )
    assert code == 200 and len(service.check.calls) == 1
    page = (await service.fetch("profiles/pt-image")).text
    assert 'id="image-check" data-ok="true"' in page and 'id="image-check-old"' not in page
    rebuilt(path, 10**18)
    assert 'id="image-check-old"' in (await service.fetch("profiles/pt-image")).text
    code, saved = await service.json(
        "api/profiles/pt-image", "PUT", body={"max_gpus": 4, "revision": saved["revision"]}
    )
    assert code == 200 and len(service.check.calls) == 2
    assert service.store.image_checks()[0]["stamp"] == image_stamp(path)


async def test_a_failed_check_refuses_the_save_and_changes_nothing(service):
    fake_image(service.images, "pytorch", "pytorch", broken=["torch"])
    before = service.store.get("pt-image")
    code, body = await service.json(
        "api/profiles/pt-image", "PUT", body={"max_gpus": 2, "revision": before.revision}
    )
    assert code == 400 and body["field"] == "image"
    assert body["error"].startswith(f"image {service.images}/pytorch: torch: ModuleNotFoundError")
    assert body["check"]["ok"] is False and "FAIL torch" in body["check"]["lines"][-2]
    assert service.store.get("pt-image") == before
    # recorded: the audit has every check
    (check,) = service.store.image_checks("pytorch")
    assert (check["ok"], check["checked_by"]) == (False, "carol")

    # the form: the check's message and its output, what was typed kept
    form = form_of(service.store.get("pt-image").to_dict(), max_gpus=3)
    page = await service.fetch("profiles/pt-image", "POST", form=form)
    assert page.code == 400
    assert 'id="form-error" role="alert" data-field="image"' in page.text
    assert "torch: ModuleNotFoundError: No module named &#39;torch&#39;" in page.text
    assert 'id="image-check" data-ok="false"' in page.text and "FAIL torch" in page.text
    assert 'id="max_gpus" name="max_gpus" value="3"' in page.text
    assert service.store.get("pt-image") == before
    # a failed check is run again at the next save (the image may be fixed)
    fake_image(service.images, "pytorch", "pytorch")
    page = await service.fetch("profiles/pt-image", "POST", form=form)
    assert page.code == 302 and service.store.get("pt-image").max_gpus == 3


async def test_a_new_profile_of_a_missing_or_failing_image_is_refused(service):
    fake_image(service.images, "tf", "tensorflow", broken=["tensorflow"])
    new = {"name": "tf-image", "display_name": "TF", "environment": "tensorflow",
           "partition": "gpu", "image": "tf"}  # fmt: skip
    code, body = await service.json("api/profiles", "POST", body=new)
    assert code == 400 and "tensorflow: ModuleNotFoundError" in body["error"]
    code, body = await service.json("api/profiles", "POST", body={**new, "image": "gone"})
    assert code == 400 and body["field"] == "image"
    assert body["error"] == f"image 'gone' is not in {service.images} (the images there: tf)"
    code, body = await service.json("api/profiles", "POST", body={**new, "image": "../etc"})
    assert code == 400 and body["field"] == "image" and "not allowed" in body["error"]
    assert [p.name for p in service.store.profiles()] == ["pytorch", "pt-image"]
    fake_image(service.images, "tf", "tensorflow")
    code, body = await service.json("api/profiles", "POST", body={**new, "user_images": True})
    assert code == 201 and (body["image"], body["user_images"]) == ("tf", True)


async def test_a_disabled_profile_is_saved_unchecked_and_checked_when_enabled(service):
    fake_image(service.images, "pytorch", "pytorch", broken=["torch"])
    p = service.store.get("pt-image")
    r = await service.fetch(f"profiles/pt-image/disable?revision={p.revision}", "POST", form={})
    assert r.code == 302 and "disabled" in r.headers["Location"]
    assert service.check.calls == [] and not service.store.get("pt-image").enabled
    p = service.store.get("pt-image")
    r = await service.fetch(f"profiles/pt-image/enable?revision={p.revision}", "POST", form={})
    assert r.code == 302 and "Not+done" in r.headers["Location"]
    assert "ModuleNotFoundError" in r.headers["Location"]
    assert not service.store.get("pt-image").enabled and len(service.check.calls) == 1


async def test_the_profiles_list_says_which_image_profiles_are_offered_and_why_not(service):
    path = fake_image(service.images, "pytorch", "pytorch")
    page = (await service.fetch("profiles")).text
    assert 'data-image="pytorch"' in page and 'data-offered="false"' in page
    assert "image &#39;pytorch&#39; has not been checked with &#39;pytorch&#39; yet" in page
    assert "or the user's own image" in page
    assert f'href="{PREFIX}images"' in page
    await service.fetch("images/pytorch/check", "POST", form={})
    page = (await service.fetch("profiles")).text
    assert 'data-offered="true"' in page and 'data-offered="false"' not in page
    rebuilt(path, 10**18)
    page = (await service.fetch("profiles", user="bob")).text
    assert "changed after its check with &#39;pytorch&#39;" in page


async def test_the_editor_names_the_runtime_and_says_apptainer_never_ran_here(
    service, tmp_path, monkeypatch
):
    for path in ("profiles", "profiles/pt-image", "profiles/new", "images"):
        page = (await service.fetch(path)).text
        assert 'data-runtime="charliecloud" data-tested-here="true"' in page, path
        assert "the Apptainer runtime" in page and "never run here" in page
    other = Service(tmp_path / "other", monkeypatch, runtime="apptainer")
    try:
        page = (await other.fetch("profiles")).text
        assert 'class="alert alert-warning" id="container-runtime"' in page
        assert 'data-runtime="apptainer" data-tested-here="false"' in page
    finally:
        other.close()


async def test_the_form_offers_the_sites_images_and_the_user_images_checkbox(service):
    fake_image(service.images, "pytorch", "pytorch")
    fake_image(service.images, "tf", "tensorflow")
    page = (await service.fetch("profiles/pt-image")).text
    assert '<option value="pytorch" selected>pytorch</option>' in page
    assert '<option value="tf" >tf</option>' in page
    assert 'id="user_images" name="user_images" checked' in page
    page = (await service.fetch("profiles/pytorch")).text
    assert '<option value="" selected>none' in page
    assert 'id="user_images" name="user_images" >' in page
    # the form's fields reach the store: no image, no user images
    form = form_of(service.store.get("pt-image").to_dict(), image="", user_images=False)
    r = await service.fetch("profiles/pt-image", "POST", form=form)
    assert r.code == 302
    p = service.store.get("pt-image")
    assert (p.image, p.user_images) == ("", False) and service.check.calls == []
    assert service.store.history("pt-image")[0]["changes"] == {
        "image": ("pytorch", ""), "user_images": (True, False),
    }  # fmt: skip


async def test_the_live_check_names_an_unchecked_image_without_running_it(service):
    fake_image(service.images, "pytorch", "pytorch")
    data = {**PROFILES[1], "name": "x"}
    code, verdict = await service.json("api/check", "POST", body=data)
    assert code == 200 and verdict["error"] is None
    assert verdict["image"] == "image 'pytorch' has not been checked with 'pytorch' yet"
    assert service.check.calls == []


async def test_changed_images_are_checked_again_in_the_background_one_at_a_time(
    tmp_path, monkeypatch
):
    service = Service(tmp_path, monkeypatch, delay=0.3)
    try:
        path = fake_image(service.images, "pytorch", "pytorch")
        images = service.ops.images
        assert images.stale() == [("pytorch", "pytorch")]
        # never on the event loop: a page answers while a check runs (held
        # until the page has answered, however loaded the machine)
        service.check.hold = threading.Event()
        task = asyncio.ensure_future(images.recheck())
        for _ in range(3000):
            if service.check.running:
                break
            await asyncio.sleep(0.01)
        page = await service.fetch("profiles")
        assert page.code == 200 and not task.done()
        service.check.hold.set()
        (check,) = await task
        assert (check["ok"], check["checked_by"]) == (True, "portal service")
        assert images.stale() == [] and await images.recheck() == []
        assert threading.get_ident() not in service.check.threads
        rebuilt(path, 10**18)
        assert images.stale() == [("pytorch", "pytorch")]
        # saves at once: one check at a time; a second of the same finds the first's
        first, second, other = await asyncio.gather(
            images.ensure("pytorch", "pytorch", "carol"),
            images.ensure("pytorch", "pytorch", "dave"),
            images.ensure("pytorch", "tensorflow", "dave"),
        )
        assert first == second and other["framework"] == "tensorflow"
        assert len(service.check.calls) == 3 and service.check.most == 1
        # a disabled profile's image is not checked again
        p = service.store.get("pt-image")
        service.store.update(dataclasses.replace(p, enabled=False), p.revision, "carol")
        rebuilt(path, 2 * 10**18)
        assert images.stale() == []
    finally:
        service.close()


async def test_the_service_watches_for_rebuilt_images_from_its_start(service):
    path = fake_image(service.images, "pytorch", "pytorch")
    watch = asyncio.ensure_future(service.ops.images.watch(every=0.05))
    try:  # each wait is for the check's record, which follows its call (a loaded
        # CI machine, make test, showed the call before the record): up to 20 s
        for _ in range(1000):
            await asyncio.sleep(0.02)
            if service.store.image_checks():
                break
        assert len(service.check.calls) == 1
        assert service.store.image_checks()[0]["checked_by"] == "portal service"
        rebuilt(path, 10**18)
        for _ in range(1000):
            await asyncio.sleep(0.02)
            if service.store.image_checks()[0]["stamp"] == image_stamp(path):
                break
        assert len(service.check.calls) == 2
        assert service.store.image_checks()[0]["stamp"] == image_stamp(path)
        await asyncio.sleep(0.2)
        assert len(service.check.calls) == 2  # nothing changed since: nothing checked
    finally:
        watch.cancel()
