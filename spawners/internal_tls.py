"""The TLS context of the hub's own requests to sessions under JupyterHub's
``internal_ssl`` (the spawner's first check that Jupyter answers, the
session card's GPU figures): the hub's internal certificate, the session's
checked against the internal CAs alone, as JupyterHub's own requests. The
fixes to JupyterHub's own contexts are ``spawners.jupyterhub_patches``."""

import functools

from portal.tlscontext import ssl_context


@functools.cache
def _client_context(keyfile, certfile, cafile):
    return ssl_context(keyfile, certfile, cafile)


def hub_client_context(settings):
    """The hub's client TLS context from its tornado ``settings`` (a handler's
    ``self.settings``, a user's ``settings``), or None without internal_ssl.
    One context per set of files, shared by every request."""
    if not settings or not settings.get("internal_ssl"):
        return None
    return _client_context(
        settings["internal_ssl_key"], settings["internal_ssl_cert"], settings["internal_ssl_ca"]
    )
