"""The TensorBoards of one Jupyter server: one process per log folder.

What runs: ``python -P -m portal.session.tensorboard.serve`` from the server's own
environment (``sys.executable``), as the user. How it is reached: a Unix
socket in a folder only the user can enter, never a TCP port. When it is
ready: when the socket accepts a connection. When it stops: after
``idle_timeout`` seconds without a proxied request, on DELETE, and with the
server.
"""

import asyncio
import atexit
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from datetime import UTC, datetime

from tornado.ioloop import PeriodicCallback
from traitlets import Float, Integer, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from .logdir import relative_logdir, tensorboard_id
from .proxy import unix_socket_client

# Longest socket folder path: a Unix socket path has at most 107 bytes.
MAX_SOCKET_DIR = 80
# Credentials of the server that TensorBoard has no use for.
SECRET_ENV = ("JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN", "JUPYTER_TOKEN")


class TensorBoardStartError(Exception):
    """TensorBoard did not start; ``str()`` says why, with its output's end."""

    def __init__(self, message, status=504):
        super().__init__(message)
        self.status = status


def isoformat(timestamp):
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def private_dir(path):
    """Whether ``path`` is a folder of this user's that nobody else can enter."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def output_tail(path, size=2000):
    """The last lines of a TensorBoard's output (stdout and stderr)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = text.splitlines()
    return "\n".join(lines[1:] if len(lines) > 1 and len(text) >= size else lines).strip()


class TensorBoard:
    """One running TensorBoard."""

    def __init__(self, tb_id, path, logdir, url, socket_path, log_path):
        self.id = tb_id
        self.path = path
        self.logdir = logdir
        self.url = url
        self.socket_path = socket_path
        self.log_path = log_path
        self.process = None
        self.client = None
        self.ready = None
        self.started = self.last_activity = time.time()

    @property
    def exited(self):
        return self.process is not None and self.process.returncode is not None

    def touch(self):
        self.last_activity = time.time()

    def model(self):
        return {
            "id": self.id,
            "logdir": self.logdir,
            "url": self.url,
            "started": isoformat(self.started),
            "last_activity": isoformat(self.last_activity),
        }


class TensorBoardManager(LoggingConfigurable):
    """Starts, finds and stops the user's TensorBoards."""

    idle_timeout = Integer(
        3600,
        help="""Seconds a TensorBoard may go without a request through the
        server before it is stopped (an open TensorBoard tab reloads every
        30 s, so it counts as a request). 0: never stopped for idleness.
        Default 3600. Example: ``c.TensorBoardManager.idle_timeout = 600``.""",
    ).tag(config=True)

    cull_interval = Float(
        help="""Seconds between checks for idle or exited TensorBoards.
        Default: a quarter of ``idle_timeout``, at least 1 and at most 60.""",
    ).tag(config=True)

    start_timeout = Float(
        60,
        help="""Seconds TensorBoard may take to answer on its socket after it
        is started (it reads the log folder first) before the start fails
        with HTTP 504 and its output. Default 60.""",
    ).tag(config=True)

    request_timeout = Float(
        300,
        help="""Seconds one proxied request may take. Default 300.""",
    ).tag(config=True)

    runtime_dir = Unicode(
        help="""Folder in which the private folder of the sockets is made
        (mode 0700, removed when the server stops). Default:
        ``$XDG_RUNTIME_DIR`` when it is a private folder of the user, else the
        temporary folder (``$TMPDIR`` or ``/tmp``). Example: ``/run/user/1001``.""",
    ).tag(config=True)

    root_dir = Unicode(help="""The server's root folder: log folders must be inside it.""")
    base_url = Unicode("/", help="""The server's base URL, e.g. ``/user/alice/``.""")

    @default("cull_interval")
    def _cull_interval_default(self):
        return min(60.0, max(1.0, self.idle_timeout / 4))

    @default("runtime_dir")
    def _runtime_dir_default(self):
        xdg = os.environ.get("XDG_RUNTIME_DIR", "")
        if xdg and private_dir(xdg) and len(xdg) < MAX_SOCKET_DIR - 30:
            return xdg
        return tempfile.gettempdir()

    @validate("idle_timeout")
    def _idle_timeout_valid(self, proposal):
        if proposal.value < 0:
            raise ValueError("TensorBoardManager.idle_timeout must be 0 (never) or more seconds")
        return proposal.value

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tensorboards = {}
        self._socket_dir = None
        self._culler = None
        self._atexit = False

    # -- finding -------------------------------------------------------

    def list(self):
        return [tb for tb in self.tensorboards.values() if not tb.exited]

    def get(self, tb_id):
        return self.tensorboards.get(tb_id)

    def url_of(self, tb_id):
        return self.base_url.rstrip("/") + f"/portal/tensorboard/{tb_id}/"

    # -- starting ------------------------------------------------------

    async def start(self, path):
        """The TensorBoard of the real folder ``path``, started if needed.

        Returns ``(tensorboard, created)``; raises TensorBoardStartError.
        """
        tb_id = tensorboard_id(path)
        tb = self.tensorboards.get(tb_id)
        if tb is not None and not tb.exited:
            await self._ready(tb)  # shared by concurrent requests for the same folder
            return tb, False
        if tb is not None:
            self.log.warning("TensorBoard %s for %s had exited; starting it again", tb_id, tb.path)
            await self.stop(tb_id)
        socket_dir = self._private_socket_dir()
        tb = TensorBoard(
            tb_id,
            path,
            relative_logdir(self.root_dir, path),
            self.url_of(tb_id),
            os.path.join(socket_dir, f"{tb_id}.sock"),
            os.path.join(socket_dir, f"{tb_id}.log"),
        )
        self.tensorboards[tb_id] = tb
        tb.ready = asyncio.ensure_future(self._launch(tb))
        try:
            await self._ready(tb)
        except TensorBoardStartError:
            if self.tensorboards.get(tb_id) is tb:
                del self.tensorboards[tb_id]
            await self._end(tb)
            raise
        self._start_culler()
        return tb, True

    async def _ready(self, tb):
        name = tb.logdir or "~"
        try:
            await asyncio.shield(tb.ready)
        except TensorBoardStartError:
            raise
        except asyncio.CancelledError:
            raise TensorBoardStartError(
                f"TensorBoard for {name} was stopped while it started", status=409
            ) from None
        except Exception as e:
            self.log.exception("TensorBoard %s for %s did not start", tb.id, tb.path)
            raise TensorBoardStartError(
                f"TensorBoard for {name} could not start: {e}", status=500
            ) from e

    def _private_socket_dir(self):
        if self._socket_dir is None or not private_dir(self._socket_dir):
            base = self.runtime_dir
            if len(base) > MAX_SOCKET_DIR - 30:
                base = "/tmp"
            try:
                # mkdtemp makes it 0700, owned by the user
                self._socket_dir = tempfile.mkdtemp(prefix="portal-tensorboard-", dir=base)
            except OSError as e:
                raise TensorBoardStartError(
                    f"No folder for TensorBoard's socket in {base} "
                    f"(TensorBoardManager.runtime_dir): {e.strerror}",
                    status=500,
                ) from e
        if not self._atexit:
            atexit.register(self.kill_all)
            self._atexit = True
        return self._socket_dir

    def command(self, tb):
        """What runs for ``tb``: the launcher, from this server's environment.

        ``-P``: ``python -m`` would otherwise put its working folder, the log
        folder, first on ``sys.path``, and a run folder named like a module
        would be imported as one: the ``tensorflow/`` of ``logs/tensorflow/DATE``
        becomes an empty ``tensorflow`` package, which TensorBoard then takes
        for TensorFlow, and it loads no run.
        """
        return [
            sys.executable, "-P", "-m", "portal.session.tensorboard.serve",
            "--logdir", tb.path,
            "--socket", tb.socket_path,
            "--path_prefix", tb.url.rstrip("/"),
            "--parent_pid", str(os.getpid()),
        ]  # fmt: skip

    async def _launch(self, tb):
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        self.log.info("Starting TensorBoard %s for %s", tb.id, tb.path)
        with open(tb.log_path, "wb") as log:
            tb.process = await asyncio.create_subprocess_exec(
                *self.command(tb),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                cwd=tb.path,
                env=env,
            )
        deadline = time.monotonic() + self.start_timeout
        while True:
            if tb.process.returncode is not None:
                raise TensorBoardStartError(
                    f"TensorBoard for {tb.logdir or '~'} exited ({tb.process.returncode}):\n"
                    + output_tail(tb.log_path),
                    status=502,
                )
            if await self._answers(tb.socket_path):
                break
            if time.monotonic() > deadline:
                raise TensorBoardStartError(
                    f"TensorBoard for {tb.logdir or '~'} did not answer within "
                    f"{self.start_timeout:g} s (TensorBoardManager.start_timeout):\n"
                    + output_tail(tb.log_path)
                )
            await asyncio.sleep(0.2)
        tb.client = unix_socket_client(tb.socket_path)
        tb.touch()
        self.log.info("TensorBoard %s for %s is ready (pid %s)", tb.id, tb.path, tb.process.pid)

    @staticmethod
    async def _answers(socket_path):
        try:
            _, writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            return False
        writer.close()
        return True

    # -- stopping ------------------------------------------------------

    async def stop(self, tb_id):
        """Stop a TensorBoard; False if there is none of that id."""
        tb = self.tensorboards.pop(tb_id, None)
        if tb is None:
            return False
        await self._end(tb)
        return True

    async def _end(self, tb):
        if tb.ready is not None and not tb.ready.done():
            tb.ready.cancel()
        if tb.client is not None:
            tb.client.close()
        process = tb.process
        if process is not None and process.returncode is None:
            self.log.info("Stopping TensorBoard %s for %s", tb.id, tb.path)
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 5)
            except TimeoutError:
                process.kill()
                await process.wait()
        for path in (tb.socket_path, tb.log_path):
            try:
                os.unlink(path)
            except OSError:
                pass

    async def stop_all(self):
        """Stop every TensorBoard and remove the socket folder (the server stops)."""
        if self._culler is not None:
            self._culler.stop()
            self._culler = None
        await asyncio.gather(*(self.stop(tb_id) for tb_id in list(self.tensorboards)))
        self._remove_socket_dir()

    def kill_all(self):
        """At interpreter exit: what ``stop_all`` did not get to."""
        for tb in self.tensorboards.values():
            if tb.process is not None and tb.process.returncode is None:
                try:
                    os.kill(tb.process.pid, signal.SIGTERM)
                except OSError:
                    pass
        self.tensorboards.clear()
        self._remove_socket_dir()

    def _remove_socket_dir(self):
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    # -- culling -------------------------------------------------------

    def _start_culler(self):
        if self._culler is None:
            self._culler = PeriodicCallback(self.cull, self.cull_interval * 1000)
            self._culler.start()

    async def cull(self):
        """Stop the TensorBoards idle for ``idle_timeout`` and forget exited ones."""
        now = time.time()
        for tb in list(self.tensorboards.values()):
            if tb.ready is None or not tb.ready.done():
                continue
            if tb.exited:
                self.log.warning(
                    "TensorBoard %s for %s exited (%s):\n%s",
                    tb.id, tb.path, tb.process.returncode, output_tail(tb.log_path),
                )  # fmt: skip
                await self.stop(tb.id)
            elif self.idle_timeout and now - tb.last_activity > self.idle_timeout:
                self.log.info(
                    "TensorBoard %s for %s idle for %d s: stopping it",
                    tb.id, tb.path, now - tb.last_activity,
                )  # fmt: skip
                await self.stop(tb.id)
