"""The user's session: code that runs in the Slurm job, as the user.

Nothing here imports the hub's code (``spawners``), the admin service
(``portal.service``), jupyterhub or batchspawner (``tests/unit/test_layers.py``);
what the hub tells a session is ``portal.contract``.

- ``launch``: the job's launcher (``portal-session``), which starts the
  user's Jupyter server; ``kernel_launcher``: every kernel's launcher.
- ``extension``: the Jupyter server extension ``portal.session`` (enabled by
  ``etc/jupyter/jupyter_server_config.d/portal-session.json`` in the jupyter
  environment), which serves, behind the server's own login:

  - ``tensorboard/``: TensorBoard per user, ``{base_url}portal/api/tensorboards``
    and ``{base_url}portal/tensorboard/{id}/``; ``labextension/`` is the
    JupyterLab extension's build (``make labextension``);
  - ``joblog``: the job's log, ``{base_url}portal/joblog``;
  - ``timeleft`` (``jobend``: the end, from squeue): ``{base_url}portal/api/session``;
  - ``gpus`` (``nvml``: the job's own GPUs): ``{base_url}portal/api/gpus``;
  - ``activity``: the session's activity, reported to the hub for its idle culler.

  Its second extension point, ``kernelpool``, makes the server's kernel
  manager hand the pre-warmed kernel (``prewarm``, started by the launcher)
  to the first request for a kernel of the session's environment.
"""


def _jupyter_server_extension_points():
    # imported here, so that the launcher and the pure parts import without jupyter_server
    from .extension import SessionExtension

    return [
        {"module": "portal.session", "app": SessionExtension},
        {"module": "portal.session.kernelpool"},
    ]
