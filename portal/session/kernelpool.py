"""The server's side of the pre-warmed kernel (``portal.session.prewarm``).

- ``PrewarmedProvisioner``: jupyter_client's ``LocalProvisioner``, which,
  when the kernel manager below offers it a pre-warmed kernel for this start,
  adopts that kernel's process instead of launching one. Its connection
  becomes the kernel manager's (jupyter_client's
  ``_reconcile_connection_info`` rewrites the connection file), so a restart,
  an interrupt or a shutdown act on it as on any kernel. Every kernel of the
  session goes through it (``KernelProvisionerFactory.default_provisioner_name``,
  the entry point ``portal-prewarmed`` in setup.cfg); without an offer it is
  ``LocalProvisioner``.
- ``PrewarmingKernelManager``: jupyter_server's ``AsyncMappingKernelManager``
  (``ServerApp.kernel_manager_class``), whose ``start_kernel`` offers the
  pool's kernel of the asked kernelspec to a start without an existing
  kernel (``POST /api/kernels``, a notebook's session), then runs the handover
  code in it: the folder of the notebook and the environment this start
  would have given. A handover that fails ends that kernel and starts a
  fresh one. Its shutdown of all kernels ends the pool's too.

Both are set when the server links its extensions (``portal.session``'s
second extension point, this module's ``_link_jupyter_server_extension``),
before it makes its kernel manager: the extension's JSON file in
``jupyter_server_config.d`` only enables extensions.
"""

import asyncio
import contextvars
import os

from jupyter_client.provisioning import LocalProvisioner
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from traitlets import Float
from traitlets.config import Config

from portal.session.prewarm import POOL, env_changes, handover_code, remove_files

# The pre-warmed kernel offered to the start under way (a list: the
# provisioner empties it when it adopts the kernel). A restart, in another
# context, is never offered one.
_OFFER = contextvars.ContextVar("portal_prewarm_offer", default=None)


class PrewarmedProvisioner(LocalProvisioner):
    """A ``LocalProvisioner`` that adopts the pre-warmed kernel offered to it."""

    warm = None  # the adopted WarmKernel
    handover = None  # (cwd, changed, removed) for the kernel manager

    async def launch_kernel(self, cmd, **kwargs):
        offer = _OFFER.get()
        km = self.parent
        if (
            not offer
            or self.warm is not None
            or getattr(km, "curve_publickey", None)  # an encrypted transport: not the warm one's
            or offer[0].kernel_name != getattr(km, "kernel_name", None)
        ):
            return await super().launch_kernel(cmd, **kwargs)
        warm = offer.pop()
        if not warm.alive():
            POOL.give_back(warm)  # forgotten by the pool's next take
            return await super().launch_kernel(cmd, **kwargs)
        self.warm, self.process = warm, warm.process
        self.pid = warm.process.pid
        try:
            self.pgid = os.getpgid(self.pid)
        except OSError:
            self.pgid = None
        wanted_cwd = kwargs.get("cwd") or os.getcwd()
        self.cwd = wanted_cwd
        self.handover = (wanted_cwd, *env_changes(warm.env, kwargs.get("env") or os.environ))
        self.connection_info = dict(warm.connection_info)
        self.log.info("Kernel %s: the pre-warmed kernel (pid %s)", km.kernel_id, self.pid)
        return self.connection_info

    async def cleanup(self, restart=False):
        await super().cleanup(restart=restart)
        if self.warm is not None and not restart:
            remove_files(self.warm)  # its first connection file and sockets


class PrewarmingKernelManager(AsyncMappingKernelManager):
    """Hands the pool's kernel to the first start of its kernelspec."""

    handover_timeout = Float(
        120,
        config=True,
        help="""Seconds the pre-warmed kernel may take to finish its imports
        and run the handover code; past them it is ended and a fresh kernel
        started. Default 120.""",
    )

    async def start_kernel(self, *, kernel_id=None, path=None, **kwargs):
        name = kwargs.get("kernel_name") or self.default_kernel_name
        warm = None
        if kernel_id is None or kernel_id not in self:
            warm = POOL.take(name)
        if warm is None:
            return await super().start_kernel(kernel_id=kernel_id, path=path, **kwargs)
        # the id in its connection file's name (``kernel-ID.json``), as any kernel's
        kernel_id = kernel_id or warm.kernel_id
        offer = [warm]
        token = _OFFER.set(offer)
        try:
            kernel_id = await super().start_kernel(kernel_id=kernel_id, path=path, **kwargs)
        finally:
            _OFFER.reset(token)
            if offer:  # not adopted: back into the pool
                POOL.give_back(offer.pop())
        km = self.get_kernel(kernel_id)
        provisioner = km.provisioner
        if getattr(provisioner, "warm", None) is not warm:
            return kernel_id
        try:
            await self._hand_over(km, *provisioner.handover)
        except Exception as e:
            self.log.error("Kernel %s: the pre-warmed kernel's handover failed (%r)", kernel_id, e)
            await self.shutdown_kernel(kernel_id, now=True)
            return await super().start_kernel(kernel_id=kernel_id, path=path, **kwargs)
        return kernel_id

    async def _hand_over(self, km, cwd, changed, removed):
        client = km.client()
        client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        try:
            reply = await asyncio.wait_for(
                _execute(client, handover_code(cwd, changed, removed)), self.handover_timeout
            )
        finally:
            client.stop_channels()
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"the handover code ended {reply['content'].get('ename')}")

    async def shutdown_all(self, now=False):
        await super().shutdown_all(now=now)
        await asyncio.get_running_loop().run_in_executor(None, POOL.close)


async def _execute(client, code):
    msg_id = client.execute(code, silent=True, store_history=False, allow_stdin=False)
    while True:
        reply = await client.get_shell_msg()
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return reply


def _link_jupyter_server_extension(serverapp):
    serverapp.update_config(
        Config(
            {
                "ServerApp": {"kernel_manager_class": PrewarmingKernelManager},
                "KernelProvisionerFactory": {"default_provisioner_name": "portal-prewarmed"},
            }
        )
    )


def _load_jupyter_server_extension(serverapp):
    serverapp.log.debug("portal.session.kernelpool: %s", type(serverapp.kernel_manager).__name__)
