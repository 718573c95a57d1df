"""The admin service's checks of the site's container images (issue 25).

A site image (a folder of ``[containers] images``) is checked with a
framework (``portal.helper.imagecheck``: the installed helper runs ch-run
of the image as ``nobody``, through the hub account's sudo rule for it, so
an image's code never runs as the hub's account; it starts, its Python, Jupyter Server,
the portal's session launcher and the framework import, the mount points
are there):

- when an admin presses *Check* on the images page (with the image's own
  FRAMEWORK and every profile's environment that names it);
- when a saved, enabled profile names it, unless the store holds an ok check
  of (image, environment) at the image's current stamp; a failed check
  refuses the save (``ImageCheckFailed``);
- at the service's start and every ``RECHECK_SECONDS``, for each (image,
  framework) that an enabled profile names whose latest check is missing or
  was made at another stamp (a rebuilt image).

Checks run one at a time, in a thread (they take 2 to 30 s), never on the
event loop; each is recorded in the store with who asked (an admin, or
``SERVICE_AUTHOR``) and logged. The hub offers a profile of an image only
while its latest check passed at the image's current stamp
(``spawners.hub_config.StoreProfiles``).
"""

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from portal.core.containers import ContainerError, runtime
from portal.core.profiles import ProfileError
from portal.helper.imagecheck import (
    FRAMEWORK_RE,
    ImageError,
    check_steps,
    image_stamp,
    mount_points,
    offer_problem,
    read_info,
    site_image,
    site_images,
    sudo_runner,
)

log = logging.getLogger("portal.service.images")

RECHECK_SECONDS = 60  # between the background re-checks of changed images
SERVICE_AUTHOR = "portal service"  # who asked, for the checks the service makes itself


class ImageCheckFailed(ProfileError):
    """A profile's image failed its check: the save is refused with the
    check's message; ``check`` is the recorded check (its output lines)."""

    def __init__(self, check):
        super().__init__(check["message"], "image")
        self.check = check


class ImageChecks:
    """The site's images and their checks, for the pages, the API and the
    profiles' writes. ``runner(path, steps)`` runs one check and returns a
    ``CheckResult`` (``imagecheck.sudo_runner``'s; tests give another)."""

    def __init__(self, store, settings, runner=None):
        self.store = store
        runner = runner or sudo_runner()
        self.images_dir = settings["containers"]["images"]
        self.runtime_name = settings["containers"]["runtime"]
        self.jupyter_env = settings["envs"]["jupyter"]
        self.prefix = settings["envs"]["prefix"]
        self.points = mount_points(settings)
        self.runner = runner
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="image-check")
        self._lock = asyncio.Lock()  # one check at a time, and no check twice

    # -- what there is --------------------------------------------------------

    def names(self):
        """The site's images: the folders of ``[containers] images``."""
        return site_images(self.images_dir)

    def path(self, name):
        """The folder of image ``name``; ProfileError when it is not one of the site's."""
        try:
            path = site_image(self.images_dir, name)
        except ImageError as e:
            raise ProfileError(str(e), "image") from None
        if not image_stamp(path):
            there = ", ".join(self.names()) or "none"
            raise ProfileError(
                f"image {name!r} is not in {self.images_dir} (the images there: {there})", "image"
            )
        return path

    def runtime(self):
        """The configured runtime: ``{"name", "tested_here", "error"}``."""
        try:
            tested = runtime(self.runtime_name).tested_here
        except ContainerError as e:
            return {"name": self.runtime_name, "tested_here": False, "error": str(e)}
        return {"name": self.runtime_name, "tested_here": tested, "error": ""}

    def problems(self, profiles):
        """{profile name: why it is not offered, "" when it is} for the
        profiles of a site image (``imagecheck.offer_problem``, as the hub)."""
        images = [p for p in profiles if p.image]
        checks = self.store.latest_image_checks() if images else {}
        return {
            p.name: offer_problem(self.images_dir, p.image, p.environment, checks)[1]
            for p in images
        }

    def current(self, check):
        """Whether ``check`` (a dict) was made at its image's present stamp."""
        try:
            return check["stamp"] == image_stamp(site_image(self.images_dir, check["image"]))
        except ImageError:
            return False

    def frameworks(self, name, profiles):
        """What *Check* checks image ``name`` with: its own FRAMEWORK (its
        /etc/portal-image; "" without one: Jupyter and the launcher only),
        then every profile's environment that names it."""
        own = read_info(self.path(name)).get("FRAMEWORK", "")
        own = own if FRAMEWORK_RE.fullmatch(own) else ""
        named = sorted({p.environment for p in profiles if p.image == name})
        return list(dict.fromkeys([own, *named]))

    def overview(self, profiles):
        """Each image of the folder, and each a profile names that is not
        there, with its info, its latest check per framework and the
        profiles that name it; for the images page and ``api/images``."""
        latest = self.store.latest_image_checks()
        problems = self.problems(profiles)
        named = sorted({p.image for p in profiles if p.image} - set(self.names()))
        images = []
        for name in [*self.names(), *named]:
            path = site_image(self.images_dir, name)
            stamp = image_stamp(path)
            checks = [
                {**check, "current": self.current(check)}
                for (image, _), check in sorted(latest.items())
                if image == name
            ]
            users = [
                {"name": p.name, "environment": p.environment, "enabled": p.enabled,
                 "problem": problems[p.name]}
                for p in profiles if p.image == name
            ]  # fmt: skip
            images.append(
                {"name": name, "path": path, "present": bool(stamp), "info": read_info(path),
                 "checks": checks, "profiles": users}
            )  # fmt: skip
        return images

    # -- checks ---------------------------------------------------------------

    def steps(self, framework):
        env = f"{self.prefix}/envs/{framework}" if framework else None
        return check_steps(self.jupyter_env, env, framework or None, self.points)

    async def check(self, name, framework, by):
        """Check image ``name`` with ``framework`` ("": none) now, for ``by``;
        the recorded check (a dict)."""
        async with self._lock:
            return await self._check(name, framework, by)

    async def check_all(self, name, profiles, by):
        """*Check*: image ``name`` with each of its ``frameworks``; the checks."""
        return [await self.check(name, f, by) for f in self.frameworks(name, profiles)]

    async def ensure(self, name, framework, by):
        """The ok check of image ``name`` with ``framework`` at its current
        stamp: the store's, or a new one; ImageCheckFailed when it fails."""
        async with self._lock:
            stamp = image_stamp(self.path(name))
            check = self.store.latest_image_checks().get((name, framework))
            if not (check and check["ok"] and check["stamp"] == stamp):
                check = await self._check(name, framework, by)
        if not check["ok"]:
            raise ImageCheckFailed(check)
        return check

    async def _check(self, name, framework, by):
        path = self.path(name)
        stamp = image_stamp(path)  # before: a rebuild during the check is checked again
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(
            self._executor, self.runner, path, self.steps(framework)
        )
        check = self.store.record_image_check(
            name, framework, stamp, result.ok, result.message, result.lines, by
        )
        level = logging.INFO if result.ok else logging.WARNING
        log.log(level, "image %s checked with %r for %s: %s", name, framework, by, result.message)
        return check

    def stale(self):
        """(image, framework) of the enabled profiles' images (those there)
        whose latest check is missing or made at another stamp."""
        latest = self.store.latest_image_checks()
        wanted = sorted({(p.image, p.environment) for p in self.store.profiles()
                         if p.image and p.enabled})  # fmt: skip
        stale = []
        for image, framework in wanted:
            stamp = image_stamp(site_image(self.images_dir, image))
            check = latest.get((image, framework))
            if stamp and (check is None or check["stamp"] != stamp):
                stale.append((image, framework))
        return stale

    async def recheck(self):
        """Check again, as SERVICE_AUTHOR, what ``stale`` names; the checks."""
        checks = []
        for image, framework in self.stale():
            try:
                checks.append(await self.check(image, framework, SERVICE_AUTHOR))
            except ProfileError as e:  # gone since
                log.warning("image %s not checked again: %s", image, e)
        return checks

    async def watch(self, every=RECHECK_SECONDS):
        """``recheck`` now, then every ``every`` seconds, for ever."""
        while True:
            try:
                await self.recheck()
            except Exception:
                log.exception("the re-check of the site's images failed; next in %s s", every)
            await asyncio.sleep(every)
