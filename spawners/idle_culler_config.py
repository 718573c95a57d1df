"""The configuration file of jupyterhub-idle-culler (``--config``), the hub
service ``idle-culler`` that ``spawners.hub_config.configure_culling``
starts: each session is held to its own idle limit through the culler's
documented hook (``portal.core.idle.cull_arbiter``)."""

from portal.core.idle import cull_arbiter

c = get_config()  # noqa: F821 (provided by traitlets' config loader)
c.IdleCuller.cull_arbiter_hook = cull_arbiter
