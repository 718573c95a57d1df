"""TLS contexts of the hub's internal_ssl that trust the internal CAs alone.

JupyterHub's ``make_ssl_context`` adds the system's CA store to the CA file
it is given: a server made with it (the hub's API) takes a client
certificate of any CA the system trusts (a public CA's, the portal's own
local CA's), not only of the hub's internal CAs. These take the given CA
file and nothing else, both ways. Standard library only: the session's
launcher imports this before Jupyter starts.

- ``ssl_context(keyfile, certfile, cafile, server=False)``: a client context
  (checks the server's certificate and name) or, ``server=True``, a server
  context that requires a client certificate; None without key or cert (no
  internal_ssl: plain HTTP);
- ``from_environ(environ, server=False)``: the same from the files the hub
  gives a session or a service, ``JUPYTERHUB_SSL_KEYFILE``, ``_CERTFILE`` and
  ``_CLIENT_CA``.
"""

import os
import ssl


def ssl_context(keyfile, certfile, cafile, server=False):
    if not keyfile or not certfile:
        return None
    if not cafile:
        raise ValueError("an internal TLS context needs the internal CAs' file")
    purpose = ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH
    # with a CA file, create_default_context loads that file alone
    context = ssl.create_default_context(purpose, cafile=cafile)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(certfile, keyfile)
    return context


def from_environ(environ=os.environ, server=False):
    return ssl_context(
        environ.get("JUPYTERHUB_SSL_KEYFILE"),
        environ.get("JUPYTERHUB_SSL_CERTFILE"),
        environ.get("JUPYTERHUB_SSL_CLIENT_CA"),
        server=server,
    )


HSTS = "max-age=31536000"
"""The Strict-Transport-Security header of every page on HTTPS: the hub's and
the service's."""
