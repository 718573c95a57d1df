#!/usr/bin/python3
"""A lightweight single-user server for the Slurm load figures (standard library only).

It does what ``batchspawner-singleuser`` does for the hub (reports a free port
to ``$JUPYTERHUB_API_URL/batchspawner`` with the server's token), then answers
every GET with a small JSON body, as Jupyter's ``/api`` does: enough for the hub
to see the server up, at a few MB per session instead of a JupyterLab's hundred.
Like the portal's sessions, it listens on its node's cluster address (the node
name as it resolves), not on every interface.

With the hub's internal TLS (``[tls] internal``), it uses the files the batch
script gives a real session, as ``jupyterhub-singleuser`` does
(``JUPYTERHUB_SSL_KEYFILE``, ``_CERTFILE``, ``_CLIENT_CA``): it serves HTTPS with
that key and certificate to clients with a certificate of those CAs only, and
reaches the hub's API over HTTPS, checked against the same CAs, with its
certificate. Without them (the stock hub), plain HTTP both ways.
The arguments (the real server's command line) are ignored.
"""

import json
import os
import socket
import ssl
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"version": "lite"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def node_address():
    """The node's address as its name resolves (the portal's batch script's choice)."""
    return socket.gethostbyname(os.environ.get("SLURMD_NODENAME") or socket.gethostname())


def ssl_context(purpose, env=os.environ):
    """JupyterHub's ``make_ssl_context`` for the session's internal TLS files
    in ``env``: always verifying the other side (a client also checks the
    server's name); None when the batch script gave none."""
    keyfile, certfile = env.get("JUPYTERHUB_SSL_KEYFILE"), env.get("JUPYTERHUB_SSL_CERTFILE")
    if not keyfile or not certfile:
        return None
    context = ssl.create_default_context(purpose, cafile=env.get("JUPYTERHUB_SSL_CLIENT_CA"))
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = purpose == ssl.Purpose.SERVER_AUTH
    context.load_cert_chain(certfile, keyfile)
    return context


def main():
    server = HTTPServer((node_address(), 0), Handler)
    served = ssl_context(ssl.Purpose.CLIENT_AUTH)
    if served:
        server.socket = served.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]
    request = urllib.request.Request(
        os.environ["JUPYTERHUB_API_URL"].rstrip("/") + "/batchspawner",
        data=json.dumps({"port": port}).encode(),
        headers={
            "Authorization": f"token {os.environ['JUPYTERHUB_API_TOKEN']}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    client = ssl_context(ssl.Purpose.SERVER_AUTH)
    urllib.request.urlopen(request, timeout=30, context=client).read()
    scheme = "https" if served else "http"
    print(f"lite session at {scheme}://{socket.gethostname()}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
