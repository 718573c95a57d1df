"""The hub's side of JupyterHub's ``internal_ssl``: the context of the
portal's own requests to sessions, and two fixes to JupyterHub 6.1.1's.

- ``hub_client_context(settings)``: the TLS context of the hub's own
  requests to a session (the spawner's first check that Jupyter answers,
  the session card's GPU figures): the hub's internal certificate, the
  session's checked against the internal CAs, as JupyterHub's own requests.
- ``install()``, called by the hub's configuration
  (``spawners.hub_config.configure_internal_ssl``; importing this module
  changes nothing):

  * the hub's contexts trust the internal CAs alone. JupyterHub's
    ``make_ssl_context`` adds the system's CA store to them, so the hub's
    API took a client certificate of any CA the system trusts (a public
    CA's, the portal's own local CA's), not only an internal one
    (``portal.tlscontext``);
  * the hub waits for a managed service at an https URL (the admin
    service) with its client context. JupyterHub hands ``start_service``
    the hub's own *server* context, with which no client connection can be
    opened ("Cannot create a client socket with a PROTOCOL_TLS_SERVER
    context"): the service never counted as up and the hub exited. Its
    periodic health check brought no certificate at all.
"""

import functools
import ssl

from jupyterhub import app, objects, user, utils
from jupyterhub.objects import Server

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


def make_ssl_context(keyfile, certfile, cafile=None, purpose=ssl.Purpose.SERVER_AUTH, **kwargs):
    """``jupyterhub.utils.make_ssl_context``, trusting ``cafile`` alone."""
    if kwargs or not cafile:  # its deprecated arguments, or no CA file: JupyterHub's own
        return utils.make_ssl_context(keyfile, certfile, cafile, purpose=purpose, **kwargs)
    return ssl_context(keyfile, certfile, cafile, server=purpose == ssl.Purpose.CLIENT_AUTH)


def _app_client_context():
    if not app.JupyterHub.initialized():
        return None
    hub = app.JupyterHub.instance()
    if not hub.internal_ssl or not hub.internal_ssl_key:
        return None
    return _client_context(hub.internal_ssl_key, hub.internal_ssl_cert, hub.internal_ssl_ca)


def install(domain=""):
    """The fixes (idempotent). ``domain``: the hub's host name under host
    routing ([hub] domain), which the services' certificates must name: the
    proxy checks a backend's certificate against the request's Host (node's
    TLS client takes the name from it), and JupyterHub 6.1.1 makes the
    services' certificates for localhost and 127.0.0.1 alone."""
    for module in (app, user, objects):
        module.make_ssl_context = make_ssl_context
    if domain:
        name_services(domain)
    if getattr(Server.wait_up, "portal_internal_tls", False):
        return
    original = Server.wait_up

    def wait_up(self, timeout=10, http=False, ssl_context=None, extra_path=""):
        if http and (ssl_context is None or ssl_context.protocol == ssl.PROTOCOL_TLS_SERVER):
            ssl_context = _app_client_context() or ssl_context
        return original(
            self, timeout=timeout, http=http, ssl_context=ssl_context, extra_path=extra_path
        )

    wait_up.portal_internal_tls = True
    Server.wait_up = wait_up


def name_services(domain):
    """The hub's managed services (the admin service, at DOMAIN/services/NAME/
    through the proxy) get certificates that name DOMAIN too."""
    from jupyterhub.services.service import _ServiceSpawner

    if getattr(_ServiceSpawner.create_certs, "portal_internal_tls", False):
        return
    create_certs = _ServiceSpawner.create_certs

    async def create_certs_for_the_hubs_host(self):
        self.ssl_alt_names = [*self.ssl_alt_names, f"DNS:{domain}"]
        return await create_certs(self)

    create_certs_for_the_hubs_host.portal_internal_tls = True
    _ServiceSpawner.create_certs = create_certs_for_the_hubs_host
