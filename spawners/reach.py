"""Whether the hub reaches a started session: the wait for its Jupyter's
first HTTP answer at the reported node and port, and the errors that say
what failed (a node the hub cannot reach, a certificate it does not trust).

``PortalSpawner._wait_answering`` calls ``wait_answering`` once the job
runs and its port is reported.
"""

import asyncio
import socket
import ssl
import time
from dataclasses import dataclass

from tornado.httpclient import AsyncHTTPClient, HTTPClientError


@dataclass(frozen=True)
class Target:
    """A started session as the hub reaches it, for the logs and errors."""

    job_id: str
    user: str
    node: str
    port: int


async def wait_answering(
    target, url, context, *, timeout, interval, unreachable_timeout, log, check_job
):
    """Wait for Jupyter's first HTTP answer at ``url`` (TLS ``context`` or
    None), trying every ``interval`` seconds: the answer (Tornado's
    ``HTTPResponse``) once there is one, None when there is none within
    ``timeout`` seconds.

    The session reports its port once its server listens; a server still
    busy with its start, or a node the hub does not reach, answers later or
    never. JupyterHub's own wait backs off exponentially (0.2, 0.4, ... 3.2
    s) and would find the server up to seconds after it answered; it takes
    this answer instead (``jupyterhub_patches.install_answered_wait``). A
    node the hub cannot reach for ``unreachable_timeout`` seconds ends the
    wait with an error (``unreachable``), rather than a wait of ``timeout``;
    a certificate the hub does not trust at once (``untrusted``).
    ``check_job`` is awaited between tries: it raises when the job ended.
    """
    client = AsyncHTTPClient()
    deadline = time.monotonic() + timeout
    unreachable_since = None
    while time.monotonic() < deadline:
        try:
            r = await client.fetch(
                url,
                raise_error=False,
                connect_timeout=3,
                request_timeout=5,
                ssl_options=context,
            )
            if r.code < 500:
                return r
            unreachable_since = None
        except ConnectionRefusedError:
            unreachable_since = None  # the node answers; Jupyter is not listening yet
        except ssl.SSLCertVerificationError as e:
            raise untrusted(target, e, log) from None
        except (OSError, HTTPClientError) as e:
            now = time.monotonic()
            unreachable_since = unreachable_since or now
            if now - unreachable_since >= unreachable_timeout:
                raise await unreachable(target, e, unreachable_timeout, log) from None
        await check_job()
        await asyncio.sleep(interval)
    return None


async def unreachable(target, error, timeout, log):
    """The error of a node the hub has not reached for ``timeout`` seconds
    (no route, no answer to the connection: not a refused connection, which
    only means Jupyter is not listening yet), naming the node, its address
    and port; logged."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            target.node, None, family=socket.AF_INET
        )
        address = infos[0][4][0]
    except OSError:
        address = "an address this host cannot resolve"
    log.error(
        "Job %s of %s: node %s (%s) port %s unreachable from the hub for %.0f s: %s",
        target.job_id, target.user, target.node, address, target.port, timeout, error,
    )  # fmt: skip
    return RuntimeError(
        f"The portal cannot reach your session on node {target.node} ({address}, port "
        f"{target.port}): {error}. The job is cancelled; tell your admin, who can check "
        "that the login node reaches the compute nodes (PortalSpawner.unreachable_timeout)."
    )


def untrusted(target, error, log):
    """What the listener at the reported port answered with is not this
    session's certificate (or not for this node): it is never trusted. The
    error, logged."""
    log.error(
        "Job %s of %s: the server at %s:%s presented a certificate the hub does not "
        "trust: %s", target.job_id, target.user, target.node, target.port, error,
    )  # fmt: skip
    return RuntimeError(
        f"Your session on node {target.node} (port {target.port}) could not prove it is "
        "yours: its TLS certificate was refused. The job is cancelled; tell your admin "
        "(the hub's log has the reason)."
    )
