"""A session in a container image (issue 25): which image, the runtime's
command line the batch script runs the session's launcher under, and a
user's own image, checked as them before the job is submitted.

A profile's ``image`` is a folder of the site's ``[containers] images``,
checked by the admin service before the profile is offered
(``spawners.hub_config.StoreProfiles`` holds back a profile whose image has
not passed at its current stamp). A profile with ``user_images`` also takes
the path of an image in the user's home (the ``image`` option, from the form
or the REST API): the same check (``portal.helper.imagecheck``) runs as the
user, through the hub's sudoers rule for exactly that helper, and the spawn
is refused with its message unless it passes. Nothing is submitted before.
"""

import asyncio
import os

from tornado import web

from portal.core.containers import Binds, ContainerError, runtime
from portal.helper import imagecheck

from . import metrics


def framework_env(envs_prefix, environment):
    """A framework environment's path: PREFIX/envs/NAME, on the host and in
    its image alike.

    >>> framework_env("/opt/portal", "pytorch")
    '/opt/portal/envs/pytorch'
    """
    return os.path.join(envs_prefix, "envs", environment)


def session_binds(home, shared_data):
    """What a session's container binds: the folder of the users' homes
    (``home``'s parent), the shared data, Slurm's client files."""
    return Binds.for_session(os.path.dirname(home.rstrip("/")) or "/", shared_data)


def image_argv(user_image, home, shared_data, envs_prefix, jupyter_env, environment):
    """The installed helper's command line that checks ``user_image`` as its
    user (after ``sudo -n -u USER``).

    >>> image_argv("/home/bob/pt", "/home/bob", "/srv/d", "/opt/portal",
    ...            "/opt/portal/envs/jupyter", "pytorch")[:4]
    ['/usr/local/libexec/portal/portal-image-check', '--jupyter', '/opt/portal/envs/jupyter', \
'--framework']
    """
    points = session_binds(home, shared_data).guests()
    env = framework_env(envs_prefix, environment)
    return [imagecheck.INSTALLED_AT,
            *imagecheck.helper_argv(user_image, jupyter_env, environment, env, points)]  # fmt: skip


def refused_message(returncode, output, user_image):
    """The user's message for a check of their image that did not pass.

    >>> refused_message(1, "ok python3 3.11\\nimage /h/b/x: torch: no module\\n", "/h/b/x")
    'Your image was refused: image /h/b/x: torch: no module'
    >>> refused_message(2, "portal-image-check: your image must be a folder in your home\\n", "/x")
    'Your image was refused: your image must be a folder in your home'
    """
    lines = [line for line in output.splitlines() if line.strip()]
    last = lines[-1] if lines else f"its check ended with status {returncode}"
    return f"Your image was refused: {last.removeprefix('portal-image-check: ')}"[:1000]


class ContainerSession:
    """The spawner's part for sessions in an image (``PortalSpawner``'s mixin)."""

    def session_image(self):
        """The image this session runs in ("" for none): the user's own, as
        their kept options name it, or the profile's site image."""
        own = (self.last_options or {}).get("image")
        if own:
            return own
        if self.profile and self.profile.image:
            return imagecheck.site_image(self.images_dir, self.profile.image)
        return ""

    def container_exec(self, home):
        """(the runtime's command line before the launcher's, the prefix of
        the variables it takes the environment in): ([], "") for a session
        outside any image."""
        image = self.session_image()
        if not image:
            return [], ""
        try:
            run = runtime(self.container_runtime)
            argv = run.exec_argv(image, [], session_binds(home, self.shared_data), cwd=home)
        except (ContainerError, imagecheck.ImageError) as e:
            raise web.HTTPError(500, f"The session's image cannot be run: {e}") from None
        return argv, run.env_prefix

    async def check_user_image(self):
        """Check the user's own image as them (HTTP 400 with the check's
        message unless it passes); nothing for a site image."""
        image = (self.last_options or {}).get("image")
        if not image:
            return
        home = self.account().pw_dir
        if not image.startswith(home.rstrip("/") + "/"):
            raise web.HTTPError(400, f"Your image must be a folder in your home ({home}): {image}")
        argv = image_argv(image, home, self.shared_data, self.envs_prefix, self.python_env,
                          self.profile.environment)  # fmt: skip
        self.log.info("Checking %s's own image %s", self.user.name, image)
        proc = await asyncio.create_subprocess_exec(
            "sudo", "-n", "-u", self.user.name, *argv,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )  # fmt: skip
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), imagecheck.CHECK_TIMEOUT + 10)
        except TimeoutError:
            proc.kill()
            raise web.HTTPError(400, f"Your image {image} took too long to check") from None
        output = out.decode(errors="replace")
        if proc.returncode:
            message = refused_message(proc.returncode, output, image)
            self.log.warning("%s's image refused: %s", self.user.name, message)
            metrics.refused("image")
            raise web.HTTPError(400, message)
        self.log.info("%s's image passed: %s", self.user.name, output.splitlines()[-1:])
