"""TensorBoard per user: a Jupyter server extension of the portal.

The user's Jupyter server (in the Slurm job, as the user) starts one
TensorBoard per log folder on request, on a private Unix socket, and serves
it under its own URL and login:

- ``{base_url}portal/api/tensorboards``: list (GET), start (POST ``{"logdir"}``);
  ``.../{id}``: stop (DELETE);
- ``{base_url}portal/tensorboard/{id}/``: TensorBoard.

Enabled by ``etc/jupyter/jupyter_server_config.d/portal-tensorboard.json`` in
the jupyter environment. Settings: ``c.TensorBoardManager.*`` (see
``manager.py``), e.g. ``c.TensorBoardManager.idle_timeout = 600``.

Kernels find the API in ``$PORTAL_TENSORBOARD_API`` and authenticate with the
server's ``$JUPYTERHUB_API_TOKEN`` (see the README's TensorBoard section).
"""


def _jupyter_server_extension_points():
    # imported here, so that the pure parts import without jupyter_server
    from .extension import TensorBoardExtension

    return [{"module": "portal.tensorboard", "app": TensorBoardExtension}]
