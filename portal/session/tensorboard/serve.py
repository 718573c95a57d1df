"""Run TensorBoard on a Unix socket: ``python -m portal.session.tensorboard.serve``.

TensorBoard's own server listens on a TCP port, which every user of a shared
node can reach (TensorBoard has no login). This launcher builds the same WSGI
application through ``tensorboard.program.TensorBoard`` and serves it with
werkzeug on a Unix socket instead, in a folder only the user can enter; the
Jupyter server proxies to it behind its own login.

    python -m portal.session.tensorboard.serve --logdir DIR --socket PATH \\
        --path_prefix /user/NAME/portal/tensorboard/ID

Its page's font URLs are made relative (``page.py``): TensorBoard gives them
from the site's root, which under the prefix is not TensorBoard.

Data is loaded by TensorBoard's Python loader (``--load_fast=false``): the
fast loader is a separate ``tensorboard_data_server`` process that answers on
a TCP port of its own.
"""

import argparse
import ctypes
import logging
import os
import signal
import sys
import threading
from urllib.parse import quote

from tensorboard import program, version
from werkzeug import serving

from .page import relative_font_urls

PR_SET_PDEATHSIG = 1


class _RequestHandler(serving.WSGIRequestHandler):
    # Keep-alive connections: HTTP/1.1, as TensorBoard's own server.
    protocol_version = "HTTP/1.1"

    def log_request(self, code="-", size="-"):
        # No access log: the Jupyter server in front logs the requests.
        pass


class UnixSocketServer(serving.ThreadedWSGIServer, program.TensorBoardServer):
    """A ``TensorBoardServer`` on a Unix socket (werkzeug's ``unix://`` host)."""

    daemon_threads = True

    def __init__(self, wsgi_app, flags, socket_path):
        self._flags = flags
        self.socket_path = socket_path
        self.stopped = threading.Event()
        # werkzeug binds unix://PATH as an AF_UNIX socket (port is ignored)
        super().__init__(f"unix://{socket_path}", 0, wsgi_app, _RequestHandler)

    def serve_forever(self, poll_interval=0.5):
        try:
            super().serve_forever(poll_interval)
        finally:
            self.stopped.set()

    def get_url(self):
        prefix = self._flags.path_prefix.rstrip("/")
        return f"http+unix://{quote(self.socket_path, safe='')}{prefix}/"


def die_with_parent(parent_pid):
    """Ask Linux to TERM this process when the Jupyter server goes (even by KILL)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if parent_pid and os.getppid() != parent_pid:
        # the parent went before prctl took effect
        sys.exit(0)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m portal.session.tensorboard.serve")
    parser.add_argument("--logdir", required=True, help="folder of the event files")
    parser.add_argument("--socket", required=True, help="path of the Unix socket to create")
    parser.add_argument(
        "--path_prefix", default="", help="URL path TensorBoard is served under, e.g. /x/tb"
    )
    parser.add_argument(
        "--parent_pid", type=int, default=0, help="exit when this process goes (0: no check)"
    )
    args = parser.parse_args(argv)
    die_with_parent(args.parent_pid)
    # SIGTERM ends the process (the default); the socket folder is removed by the parent.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    servers = []

    def make_server(wsgi_app, flags):
        app = relative_font_urls(wsgi_app, flags.path_prefix)
        servers.append(UnixSocketServer(app, flags, args.socket))
        return servers[-1]

    tensorboard = program.TensorBoard(server_class=make_server)
    tensorboard.configure(
        logdir=args.logdir,
        path_prefix=args.path_prefix,
        load_fast="false",
        # the werkzeug logger's level follows the root logger
    )
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    url = tensorboard.launch()  # builds the app, binds the socket, serves in a thread
    sys.stderr.write(f"TensorBoard {version.VERSION} for {args.logdir} at {url}\n")
    sys.stderr.flush()
    servers[0].stopped.wait()
    return 1  # serve_forever ended without a signal: an error (logged above)


if __name__ == "__main__":
    sys.exit(main())
