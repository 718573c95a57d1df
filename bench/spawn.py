"""Spawn to ready, and its floor: what Slurm and the server alone take.

``spawn_ready``: the spawn request (``POST /hub/api/users/NAME/server``) to the
first answer of the user's server through the proxy (``GET /user/NAME/api``
returns Jupyter's version, not the hub's redirect).

``floor``: an equivalent job (the same slice, as the same user, by the same
``sudo -u USER sbatch``) from sbatch to its script running, plus the same
single-user server (``jupyterhub-singleuser`` of the same environment) from its
exec to its first HTTP answer, asked directly on its port. It leaves out
what only a hub does: the port report, the proxy route, the hub's own checks.
With the hub's internal TLS the floor serves TLS too, with a certificate
made as the spawner makes a session's, and is asked with the hub's.
"""

import random
import shlex
import socket
import subprocess
import tempfile
import time

import requests
from jupyterhub.utils import random_port

from portal import settings as site_settings
from portal.core.slice import make_slice
from portal.core.tlsnames import node_alt_names
from portal.slurm.commands import resource_options
from spawners.session_tls import read_session_tls, sign_pair
from tests.support.hubsettings import CA_CERT
from tests.support.jobs import partition_nodes

FLOOR_JOB = "portal-bench-floor"
IMAGE_PROFILES = ("pytorch-image", "tensorflow-image")  # bench/hubs.py's, checked at its start
POLL = 0.05  # seconds between the client's checks


def random_phase():
    """Sleep a random part of a second (see ``bench.run.spawn_figures``)."""
    time.sleep(random.random())


def answers(url, session=requests, tls=None):
    """The Jupyter server at ``url`` answers (through the proxy: HTTPS, checked;
    directly, with ``tls``: requests' ``cert`` and ``verify``)."""
    try:
        r = session.get(url, allow_redirects=False, timeout=5, **(tls or {"verify": CA_CERT}))
    except requests.RequestException:
        return False
    return r.status_code == 200 and '"version"' in r.text


def wait_answer(url, since, timeout=300, session=requests, tls=None):
    """Monotonic time of the first answer of ``url`` after ``since``."""
    while time.monotonic() - since < timeout:
        if answers(url, session, tls):
            return time.monotonic()
        time.sleep(POLL)
    raise RuntimeError(f"{url} gave no answer within {timeout} s")


def floor_tls(hub, partition):
    """The floor server's key, certificate and CAs (``{"key", "cert", "ca"}``)
    as ``PortalSpawner.create_certs`` and ``move_certs`` give a session's: of
    the hub's notebooks-ca, for every node of ``partition``, by the same
    ``sign_pair``. Signed in a temporary folder of root's: the hub's store is
    only read."""
    addresses = {node: socket.gethostbyname_ex(node)[2] for node in partition_nodes(partition)}
    ca = hub.internal_certs / "notebooks-ca" / "notebooks-ca"
    with tempfile.TemporaryDirectory() as folder:
        keyfile, certfile = sign_pair(
            f"{ca}.crt", f"{ca}.key", folder, "bench-floor", node_alt_names(addresses), hours=24
        )
        return read_session_tls(
            {
                "keyfile": keyfile,
                "certfile": certfile,
                "cafile": str(hub.internal_certs / "notebooks-ca_trust.crt"),
                "kernels_cafile": f"{ca}.crt",
            }
        )


def spawn_ready(hub, client, name, options=None, server=""):
    """Seconds from the spawn request to the server (the default one, or the
    named ``server``) answering through the proxy, asked on the client's own
    connection to the hub (kept open, as a browser keeps the one it asked for
    the spawn on: no new TLS handshake per check)."""
    start = time.monotonic()
    path = f"/users/{name}/servers/{server}" if server else f"/users/{name}/server"
    r = client.api("POST", path, json=options)
    if r.status_code not in (201, 202):
        raise RuntimeError(f"spawn of {name} on the {hub.name} hub: {r.status_code} {r.text}")
    url = f"{hub.url}/user/{name}/{server}/api" if server else f"{hub.url}/user/{name}/api"
    return wait_answer(url, start, session=client.session) - start


def wait_offered(hub, client, name, profile, timeout=600):
    """Wait until the spawn page offers ``profile`` (an image profile is
    held back until the admin service's check of its image has passed)."""
    since = time.monotonic()
    while time.monotonic() - since < timeout:
        r = client.session.get(f"{hub.url}/hub/spawn/{name}", timeout=10)
        if f'value="{profile}"' in r.text:
            return
        time.sleep(2)
    raise RuntimeError(f"the {hub.name} hub did not offer {profile} within {timeout} s")


def stop_server(hub, client, name):
    client.api("DELETE", f"/users/{name}/server")
    try:
        client.wait_stopped(name, timeout=120)
    finally:
        hub.cancel_jobs(name)


def stop_servers(hub, client, name, servers):
    """Stop the user's named ``servers``, and remove them."""
    for server in servers:
        client.api("DELETE", f"/users/{name}/servers/{server}", json={"remove": True})
    try:
        client.wait_stopped(name, timeout=120)
    finally:
        hub.cancel_jobs(name)


def as_user(user, argv, **kwargs):
    return subprocess.run(
        ["sudo", "-u", user, "--", *argv], capture_output=True, text=True, check=True, **kwargs
    )


def floor(hub, client, name):
    """Seconds of sbatch to RUNNING (the script's first line) and of the server's
    own start (exec to its first answer): the floor is their sum. A token of the
    user's makes it a valid server."""
    site = site_settings.load()
    slurm, envs = site["slurm"], site["envs"]
    job_slice = make_slice(
        1,
        slurm["default_hours"],
        partition=slurm["partition"],
        max_gpus=1,
        cores_per_gpu=slurm["cores_per_gpu"],
        mem_per_gpu_gb=slurm["mem_per_gpu_gb"],
        max_hours=slurm["max_hours"],
    )
    r = client.api("POST", f"/users/{name}/tokens", json={"expires_in": 600, "note": "bench"})
    r.raise_for_status()
    token = r.json()["token"]
    home = as_user(name, ["sh", "-c", "echo $HOME"]).stdout.strip()
    folder = f"{home}/.bench-floor"
    as_user(name, ["rm", "-rf", folder])
    as_user(name, ["mkdir", "-p", "-m", "700", folder])
    port = random_port()
    prefix = f"/user/{name}/"
    env = {
        "JUPYTERHUB_API_TOKEN": token,
        "JUPYTERHUB_API_URL": f"{hub.api_url}/hub/api",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_USER": name,
        "JUPYTERHUB_CLIENT_ID": f"jupyterhub-user-{name}",
        "JUPYTERHUB_SERVICE_PREFIX": prefix,
        "JUPYTERHUB_OAUTH_CALLBACK_URL": f"{prefix}oauth_callback",
    }
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())
    scheme, direct_tls = "http", None
    if hub.internal_tls:  # as the portal's batch script writes a session's files
        tls = floor_tls(hub, slurm["partition"])
        writes = "\n".join(
            f"printf '%s' {shlex.quote(tls[part])} >{folder}/floor.{part}" for part in tls
        )
        exports += f"""
(umask 077
{writes})
export JUPYTERHUB_SSL_KEYFILE={folder}/floor.key JUPYTERHUB_SSL_CERTFILE={folder}/floor.cert
export JUPYTERHUB_SSL_CLIENT_CA={folder}/floor.ca"""
        scheme = "https"
        cert, trust = hub.internal_cert()
        direct_tls = {"cert": cert, "verify": trust}
    # on its node's cluster address, as the portal's batch script does
    script = f"""#!/bin/bash
date +%s.%N > {folder}/running
{exports}
address=$(getent ahostsv4 "$SLURMD_NODENAME" | awk 'NR == 1 {{ print $1 }}')
echo "$address" > {folder}/address
export JUPYTERHUB_SERVICE_URL="{scheme}://$address:{port}{prefix}"
source {envs["jupyter"]}/bin/activate
date +%s.%N > {folder}/exec
exec jupyterhub-singleuser --ip="$address" --port={port}
"""
    argv = [
        "sbatch", "--parsable", f"--job-name={FLOOR_JOB}", f"--chdir={home}",
        f"--output={folder}/job-%j.log", *resource_options(job_slice),
    ]  # fmt: skip
    wall0, mono0 = time.time(), time.monotonic()
    as_user(name, argv, input=script)
    try:
        while not _read_time(f"{folder}/exec"):
            if time.monotonic() - mono0 > 300:
                raise RuntimeError(f"the floor job of {name} did not start within 300 s")
            time.sleep(POLL)
        running, executed = _read_time(f"{folder}/running"), _read_time(f"{folder}/exec")
        with open(f"{folder}/address") as f:
            address = f.read().strip()
        answered = wait_answer(f"{scheme}://{address}:{port}{prefix}api", mono0, tls=direct_tls)
        server_start = (answered - mono0) - (executed - wall0)
        return running - wall0, server_start
    finally:
        subprocess.run(["scancel", "--name", FLOOR_JOB, "--user", name], check=False)
        client.api("DELETE", f"/users/{name}/tokens/{r.json()['id']}")


def _read_time(path):
    try:
        with open(path) as f:
            return float(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0
