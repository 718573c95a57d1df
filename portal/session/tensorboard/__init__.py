"""TensorBoard per user, served by the session's server extension
(``portal.session.extension``).

The user's Jupyter server (in the Slurm job, as the user) starts one
TensorBoard per log folder on request, on a private Unix socket, and serves
it under its own URL and login:

- ``{base_url}portal/api/tensorboards``: list (GET), start (POST ``{"logdir"}``);
  ``.../{id}``: stop (DELETE);
- ``{base_url}portal/tensorboard/{id}/``: TensorBoard.

Settings: ``c.TensorBoardManager.*`` (see ``manager.py``), e.g.
``c.TensorBoardManager.idle_timeout = 600``.

Kernels find the API in ``$PORTAL_TENSORBOARD_API`` and authenticate with the
server's ``$JUPYTERHUB_API_TOKEN`` (see docs/users/tensorboard.md).
"""
