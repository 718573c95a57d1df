#!/usr/bin/python3
"""A lightweight single-user server for the Slurm load figures (standard library only).

It does what ``batchspawner-singleuser`` does for the hub (reports a free port
to ``$JUPYTERHUB_API_URL/batchspawner`` with the server's token), then answers
every GET with a small JSON body, as Jupyter's ``/api`` does: enough for the hub
to see the server up, at a few MB per session instead of a JupyterLab's hundred.
Like the portal's sessions, it listens on its node's cluster address (the node
name as it resolves), not on every interface.
The arguments (the real server's command line) are ignored.
"""

import json
import os
import socket
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


def main():
    server = HTTPServer((node_address(), 0), Handler)
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
    urllib.request.urlopen(request, timeout=30).read()
    print(f"lite session on {socket.gethostname()}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
