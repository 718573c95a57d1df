"""``portal-session CMD ARGS...``: the session's server, its port reported once it listens.

The batch script runs the single-user server through this launcher, as
batchspawner runs it through ``batchspawner-singleuser``: pick a free port,
put it into ``$JUPYTERHUB_SERVICE_URL``, run CMD in this process, and tell the
hub the port (``POST $JUPYTERHUB_API_URL/batchspawner {"port": N}`` with the
server's own token).

batchspawner's wrapper imports JupyterHub's service-auth stack (SQLAlchemy and
Alembic among it, about half a second) and reports before the server starts.
Here CMD starts at once, and a thread, with the standard library alone, waits
for this process to listen on the port (told by a wrapper of
``socket.socket.listen``, not by polling) and only then reports. The hub learns
the port the moment there is something to reach, and what it reaches is this
server: another user's process that took the port meanwhile (a port is free
only until somebody binds it) makes the server fail to start, instead of
receiving the session's traffic.

Any report that fails (refused, unreachable after a few tries, an error of the
thread itself) ends the process with the reason in the job's log: the hub then
says the job ended, instead of waiting for a port that never comes. The
report follows no redirect and no proxy variable, and carries the token in a
header only.

Just before the server, a kernel of the session's environment is started,
importing its framework (``portal.session.prewarm``): the first kernel the
user opens of that environment is that one.

The server starts with Python's cyclic collector off (``quiet_collector``):
its start is mostly imports, which make many objects and little garbage, and
the collector's passes over them were a seventh of it (Jupyter's start to
listening, medians of 7 here: 1.65 s against 1.91 s; 1 MB more memory). Once
the server listens, what its start made is frozen out of later passes and the
collector is on again, before the port is reported.
"""

import gc
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from runpy import run_path
from shutil import which
from urllib.parse import urlsplit, urlunsplit

from portal import tlscontext

TRIES = 4  # a hub restarting meanwhile is back within this (0.5, 1, 2 s apart)
TIMEOUT = 10  # seconds per try


def free_port():
    """A port nobody listens on now (the kernel's choice), as jupyterhub's ``random_port``."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def with_port(service_url, port):
    """``$JUPYTERHUB_SERVICE_URL`` with ``port`` (the batch script sets port 0)."""
    parts = urlsplit(service_url)
    return urlunsplit(parts._replace(netloc=f"{parts.hostname}:{port}"))


def signal_listening(port, event):
    """Set ``event`` when a socket of this process starts listening on ``port``
    (``socket.socket.listen``, which Tornado and asyncio call, is wrapped):
    no polling, so the server's start is not slowed."""
    original = socket.socket.listen

    def listen(self, *args):
        original(self, *args)
        try:
            if self.family in (socket.AF_INET, socket.AF_INET6) and self.getsockname()[1] == port:
                event.set()
        except OSError:
            pass

    socket.socket.listen = listen


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect is an answer (an error), never followed with the token


def opener(environ=os.environ):
    """``urlopen`` for the report: no proxy, no redirect, and the hub's internal
    TLS when the hub gives its files (``JUPYTERHUB_SSL_*``)."""
    handlers = [urllib.request.ProxyHandler({}), _NoRedirect()]
    context = tlscontext.from_environ(environ)
    if context:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers).open


def report_request(api_url, token, port):
    """The port report, as a ``urllib`` request (the token in a header, not a URL)."""
    return urllib.request.Request(
        api_url.rstrip("/") + "/batchspawner",
        data=json.dumps({"port": port}).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method="POST",
    )


def report(request, open_url, tries=TRIES, timeout=TIMEOUT):
    """Send the report; None once the hub took it (2xx), else the reason it did
    not. A refusal (other than 5xx) is final; a connection error or 5xx is tried
    again (the hub answers a repeated report of the same port as taken)."""
    reason = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(0.5 * 2 ** (attempt - 1))
        try:
            with open_url(request, timeout=timeout) as answer:
                if 200 <= answer.status < 300:
                    return None
                reason = f"the hub answered {answer.status}"
        except urllib.error.HTTPError as e:
            reason = f"the hub answered {e.code}: {_body(e)}"
            if e.code < 500:
                return reason
        except (OSError, ValueError, urllib.error.URLError) as e:
            reason = f"the hub could not be reached: {e}"
        except Exception as e:  # a malformed answer (http.client's errors) is a failure too
            reason = f"the hub's answer could not be read: {e!r}"
    return reason


def _body(error):
    try:
        return error.read(500).decode(errors="replace")
    except Exception:
        return "(no readable body)"


def quiet_collector():
    """The collector off for the server's start; the function that turns it
    on again, with what was made meanwhile out of its later passes.

    >>> on = quiet_collector()
    >>> gc.isenabled()
    False
    >>> on(); gc.isenabled(), gc.get_freeze_count() > 0
    (True, True)
    >>> gc.unfreeze()
    """
    gc.disable()

    def on():
        gc.freeze()
        gc.enable()

    return on


def _report_when_listening(listening, request, open_url, collector_on=lambda: None):
    try:
        listening.wait()
        collector_on()
        reason = report(request, open_url)
    except BaseException as e:  # the thread must not die quietly, leaving the hub waiting
        reason = f"the report failed: {e!r}"
    if reason:
        print(f"portal: the port report failed, ending the session: {reason}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)  # the server may be mid-start: end the whole process now


def prewarm_kernel():
    """The session's pre-warmed kernel (``portal.session.prewarm``), started
    beside the server's start; a failure is logged, the session goes on."""
    try:
        from portal.session import prewarm

        prewarm.start_from_environ()
    except Exception as e:
        print(f"portal: no pre-warmed kernel: {e!r}", file=sys.stderr)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.exit("usage: portal-session CMD [ARGS...]")
    command = which(argv[0])
    if command is None:
        sys.exit(f"portal-session: {argv[0]} not found")
    try:
        api_url, token = os.environ["JUPYTERHUB_API_URL"], os.environ["JUPYTERHUB_API_TOKEN"]
    except KeyError as e:
        sys.exit(f"portal-session: {e.args[0]} is not set (the hub sets it)")
    port = free_port()
    service_url = os.environ.get("JUPYTERHUB_SERVICE_URL", "")
    if service_url:
        os.environ["JUPYTERHUB_SERVICE_URL"] = with_port(service_url, port)
    else:
        argv.append(f"--port={port}")
    listening = threading.Event()
    signal_listening(port, listening)
    collector_on = quiet_collector()
    reporter = threading.Thread(
        target=_report_when_listening,
        args=(listening, report_request(api_url, token, port), opener(), collector_on),
        daemon=True,
    )
    reporter.start()
    prewarm_kernel()
    sys.argv = [command, *argv[1:]]
    run_path(command, run_name="__main__")


if __name__ == "__main__":
    main()
