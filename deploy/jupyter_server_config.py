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

# Hidden files (~/.ssh, ~/.portal) stay out of the contents API. The session
# card's job log is served by the portal extension (portal/joblog/JOBID).
c.ContentsManager.allow_hidden = False
# The portal is served over HTTPS (the proxy): browsers keep to it.
c.ServerApp.tornado_settings = {"headers": {"Strict-Transport-Security": "max-age=31536000"}}
