"""Jupyter Server settings of the portal's sessions.

deploy/kernels.py installs this file as etc/jupyter/jupyter_server_config.py
of the jupyter environment, which every session's server reads.

The spawner exports the environment of the session's profile as
$PORTAL_ENVIRONMENT (``pytorch``, ``tensorflow``, ...). That environment's
kernel becomes the default of new notebooks; without one, or when no kernel
has that name, the default stays ``python3``.
"""

import os
import sys

from jupyter_client.kernelspec import KernelSpecManager

c = get_config()  # noqa: F821 (defined by traitlets when it loads this file)

environment = os.environ.get("PORTAL_ENVIRONMENT", "")
default_kernel = "python3"
if environment:
    if environment in KernelSpecManager().find_kernel_specs():
        default_kernel = environment
    else:
        print(
            f"portal: no kernel named {environment!r} ($PORTAL_ENVIRONMENT);"
            f" the default kernel is {default_kernel!r}",
            file=sys.stderr,
        )
c.MappingKernelManager.default_kernel_name = default_kernel

# Kernels talk to the server over ZMQ's ipc transport: Unix sockets in the
# runtime folder (the batch script makes it private: 0700, the user's, in
# the job's own /tmp), which only the user can open. Over tcp they listened
# on the node's loopback, which every user of the node shares: IOPub is
# signed, not encrypted, so anyone there could read the code a kernel ran
# and what it printed. Every kernel here speaks ipc (ipykernel; IRkernel
# 1.3 too).
c.KernelManager.transport = "ipc"

# Hidden files (~/.ssh, ~/.portal) stay out of the contents API. The session
# card's job log is served by the portal extension (portal/joblog/JOBID).
c.ContentsManager.allow_hidden = False
# The portal is served over HTTPS (the proxy): browsers keep to it.
c.ServerApp.tornado_settings = {"headers": {"Strict-Transport-Security": "max-age=31536000"}}

# JupyterLab's scheduler (jupyter-scheduler): the portal is its backend, its
# jobs are Slurm jobs of the user through the hub's API (portal.session.scheduler);
# its own database (which the portal's backend does not use) in the session's
# private runtime folder, not in the home.
c.SchedulerApp.scheduler_class = "portal.session.scheduler.PortalScheduler"
c.SchedulerApp.environment_manager_class = "portal.session.scheduler.PortalEnvironments"
if os.environ.get("JUPYTER_RUNTIME_DIR"):
    c.SchedulerApp.db_url = f"sqlite:///{os.environ['JUPYTER_RUNTIME_DIR']}/scheduler.sqlite"
