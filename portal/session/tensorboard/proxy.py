"""HTTP to a TensorBoard's Unix socket: the client and the header rules.

Tornado's HTTP client reaches a Unix socket when its resolver answers with
an ``AF_UNIX`` address (jupyter-server-proxy and jupyter_server do the same);
each TensorBoard gets its own client, so the server's shared client is left
alone. The header rules are pure functions.
"""

import socket

from tornado.netutil import Resolver
from tornado.simple_httpclient import SimpleAsyncHTTPClient

# RFC 9110 7.6.1: meant for one connection, never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Not for TensorBoard: the Jupyter server's login (it has none of its own),
# and what the client recomputes.
REQUEST_DROP = frozenset({"host", "cookie", "authorization", "content-length", "x-xsrftoken"})
# Tornado sets these itself (Content-Length: from the body it writes).
RESPONSE_DROP = frozenset({"content-length", "date", "server"})


def end_to_end(headers, drop=frozenset()):
    """The (name, value) pairs of ``headers`` a proxy forwards.

    ``headers`` is a list of pairs or a tornado ``HTTPHeaders``. Left out:
    hop-by-hop headers, those named by ``Connection``, and ``drop`` (lower case).
    """
    pairs = list(headers.get_all() if hasattr(headers, "get_all") else headers)
    named = {
        token.strip().lower()
        for name, value in pairs
        if name.lower() == "connection"
        for token in value.split(",")
    }
    skip = HOP_BY_HOP | named | drop
    return [(name, value) for name, value in pairs if name.lower() not in skip]


def request_headers(headers):
    """What goes to TensorBoard of the browser's request headers."""
    return end_to_end(headers, REQUEST_DROP)


def response_headers(headers, method="GET"):
    """What goes back to the browser of TensorBoard's response headers.

    The body is passed as it came (gzip included), so Content-Encoding stays;
    Content-Length is recomputed by tornado, except for HEAD, which has no body.
    """
    drop = RESPONSE_DROP - {"content-length"} if method == "HEAD" else RESPONSE_DROP
    return end_to_end(headers, drop)


def merge_csp(upstream, ours):
    """TensorBoard's Content-Security-Policy, plus the directives of ``ours``
    it does not set (the Jupyter server's ``frame-ancestors``, ``report-uri``)."""
    directives = [d.strip() for d in (upstream or "").split(";") if d.strip()]
    names = {d.split()[0].lower() for d in directives}
    for directive in (d.strip() for d in (ours or "").split(";")):
        if directive and directive.split()[0].lower() not in names:
            directives.append(directive)
    return "; ".join(directives)


class UnixResolver(Resolver):
    """Resolves every host to one Unix socket."""

    def initialize(self, socket_path):
        self.socket_path = socket_path

    async def resolve(self, host, port, family=socket.AF_UNSPEC):
        return [(socket.AF_UNIX, self.socket_path)]


def unix_socket_client(socket_path, max_clients=20):
    """A tornado HTTP client whose every request goes to ``socket_path``."""
    return SimpleAsyncHTTPClient(
        force_instance=True,
        resolver=UnixResolver(socket_path=socket_path),
        max_clients=max_clients,
        max_body_size=512 * 1024 * 1024,
        max_buffer_size=512 * 1024 * 1024,
    )
