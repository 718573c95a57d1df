"""Starts the sessions' IPython kernels (``python -m portal_kernel_launcher -f
CONNECTION_FILE``; deploy/kernels.py copies this file into every environment
under that name and names it in their kernelspecs).

The sessions' kernels talk to the server over ZMQ's ipc transport, Unix
sockets in the session's private runtime folder (deploy/jupyter_server_config.py),
never over TCP on the node's loopback, which every user of the node reaches.
ipykernel binds one socket of its own over TCP whatever the transport: the
IOPub "pipe" (a PULL socket on 127.0.0.1), through which processes forked by
the kernel send their output. Here that pipe is an ipc socket too, beside the
kernel's own, when the kernel speaks ipc from a folder only its user opens.

The kernels' debugger is off: ipykernel's debugpy listens on TCP ports of
127.0.0.1, and stayed listening after JupyterLab's debugger was turned off,
so another user of the node attached to it and ran code as the kernel's user
(an attacker's review found it). There is no transport for it but TCP.

Written against ipykernel 7.4 (``IOPubThread._setup_pipe_in`` and
``_setup_pipe_out``, ``_pipe_port``, ``_pipe_in``); where ipykernel is not as
expected the kernel starts as ipykernel makes it and says so on stderr.
tests/integration/test_kernels.py fails when a kernel listens on TCP.
Standard library, ZMQ and ipykernel only: it runs in every environment.
"""

import json
import os
import stat
import sys

PIPE_METHODS = ("_setup_pipe_in", "_setup_pipe_out", "_handle_pipe_msg")


def connection_file(argv):
    """The ``-f`` argument of the kernel's command line, or None.

    >>> connection_file(["-f", "/run/k/kernel-1.json", "--ext=x"])
    '/run/k/kernel-1.json'
    >>> connection_file(["--f=/run/k/kernel-2.json"]), connection_file([])
    ('/run/k/kernel-2.json', None)
    """
    for i, arg in enumerate(argv):
        if arg in ("-f", "--f", "--IPKernelApp.connection_file") and i + 1 < len(argv):
            return argv[i + 1]
        for prefix in ("-f=", "--f=", "--IPKernelApp.connection_file="):
            if arg.startswith(prefix):
                return arg[len(prefix) :]
    return None


def private_pipe_path(path):
    """Where the pipe's socket goes: beside the connection file, when the
    kernel speaks ipc and that folder is the user's alone; else None."""
    if not path:
        return None
    try:
        with open(path) as f:
            transport = json.load(f).get("transport")
        folder = os.path.dirname(os.path.abspath(path))
        st = os.stat(folder)
    except (OSError, ValueError, AttributeError):
        return None
    if transport != "ipc" or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        return None
    return os.path.join(folder, f"kernel-pipe-{os.getpid()}")


def pipe_over_ipc(path):
    """Make ipykernel's IOPub pipe an ipc socket at ``path``; False where
    ipykernel is not as this was written against."""
    try:
        import zmq
        from ipykernel import iostream
    except ImportError:
        return False
    thread = iostream.IOPubThread
    if not all(hasattr(thread, name) for name in PIPE_METHODS):
        return False

    def _setup_pipe_in(self):
        self._pipe_uuid = os.urandom(16)  # as ipykernel's: authenticates the forks' messages
        pipe_in = self.socket.context.socket(zmq.PULL)
        pipe_in.linger = 0
        pipe_in.bind(f"ipc://{path}")
        self._pipe_port = path  # read by _setup_pipe_out in a forked process
        self._pipe_in = iostream.ZMQStream(pipe_in, self.io_loop)
        self._pipe_in.on_recv(self._handle_pipe_msg)

    def _setup_pipe_out(self):
        ctx = zmq.Context()  # a fork needs a context of its own
        pipe_out = ctx.socket(zmq.PUSH)
        pipe_out.linger = 3000
        pipe_out.connect(f"ipc://{self._pipe_port}")
        return ctx, pipe_out

    thread._setup_pipe_in = _setup_pipe_in
    thread._setup_pipe_out = _setup_pipe_out
    return True


def debugger_off():
    """ipykernel without its debugger (debugpy, which listens on TCP): a
    debug request is answered as by a kernel that has none."""
    try:
        from ipykernel import debugger
    except ImportError:
        return
    debugger._is_debugpy_available = False


def main():
    if sys.path and sys.path[0] == "":  # as ipykernel_launcher: not the cwd's modules
        del sys.path[0]
    debugger_off()
    path = private_pipe_path(connection_file(sys.argv[1:]))
    if path and not pipe_over_ipc(path):
        print("portal: ipykernel's IOPub pipe is not as expected: left on TCP", file=sys.stderr)
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
