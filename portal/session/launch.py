"""``portal-session CMD ARGS...``: the session's server, with its port reported at once.

The batch script runs the single-user server through this launcher, as
batchspawner runs it through ``batchspawner-singleuser``: pick a free port,
tell the hub (``POST $JUPYTERHUB_API_URL/batchspawner {"port": N}`` with the
server's own token), put the port into ``$JUPYTERHUB_SERVICE_URL``, run CMD in
this process. batchspawner's wrapper imports JupyterHub's service-auth stack
(SQLAlchemy and Alembic among it, about half a second) before it reports, and
only then starts the server. Here the report uses the standard library only and
is sent from a thread while CMD's imports run, so the hub learns the port
within milliseconds of the job's start and the server's start is not delayed.

A report the hub refuses, or one that cannot be sent after a few tries, ends
the job with the reason in its log: the hub then says the job ended, instead
of waiting for a port that never comes.
"""

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


def report_request(api_url, token, port):
    """The port report, as a ``urllib`` request (the token in a header, not a URL)."""
    return urllib.request.Request(
        api_url.rstrip("/") + "/batchspawner",
        data=json.dumps({"port": port}).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method="POST",
    )


def report(request, tries=TRIES, timeout=TIMEOUT, opener=urllib.request.urlopen):
    """Send the report; None once the hub took it, else the reason it did not.
    A refusal (4xx) is final; a connection error or 5xx is tried again."""
    reason = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(0.5 * 2 ** (attempt - 1))
        try:
            with opener(request, timeout=timeout):
                return None
        except urllib.error.HTTPError as e:
            reason = f"the hub answered {e.code}: {e.read(500).decode(errors='replace')}"
            if e.code < 500:
                return reason
        except (OSError, ValueError) as e:
            reason = f"the hub could not be reached: {e}"
    return reason


def _report_or_end(request):
    reason = report(request)
    if reason:
        print(f"portal: the port report failed, ending the session: {reason}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)  # the server may be mid-import: end the whole process now


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
    reporter = threading.Thread(
        target=_report_or_end, args=(report_request(api_url, token, port),), daemon=True
    )
    reporter.start()
    sys.argv = [command, *argv[1:]]
    run_path(command, run_name="__main__")


if __name__ == "__main__":
    main()
