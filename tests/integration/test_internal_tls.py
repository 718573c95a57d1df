"""Mutual TLS inside the cluster ([tls] internal, JupyterHub's internal_ssl)
on the test hub, its proxy, its admin service and a real session.

Someone with a shell on a compute node (``nobody`` in the node's network,
as in test_cluster_shape.py) and no certificate of the hub's internal CAs
gets nothing from the hub's API, the proxy's API or a session's port: no
login form posted, no route read, no Jupyter answer, over plain HTTP or TLS.
A certificate of a CA the system trusts (the portal's own public CA), which
JupyterHub's hub took, is refused too. The proxy reaches the session at
``https://NODE:PORT``, a session still starts, answers through the proxy and
stops, and the admin service's pages load.
"""

import glob
import os
import re
import socket
import ssl
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from cryptography import x509

from portal import settings as site_settings
from tests.support.hubsettings import CA_CERT, DOMAIN
from tests.support.internaltls import (
    CERTS,
    HUB_CERT,
    HUB_TRUST,
    INTERNAL_TLS,
    PROXY_API,
    STATE,
    proxy_api,
)
from tests.support.jobs import scontrol_job, user_jobs, wait_no_jobs
from tests.support.testhub import PORT

SITE = site_settings.load()
CLUSTER = SITE["cluster"]
LOGIN = f"{CLUSTER['network']}.1"  # where the nodes reach the hub's API
HUB_API = f"https://{LOGIN}:{PORT + 81}"
SERVICE_PORT = PORT + 2
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]

pytestmark = [
    pytest.mark.skipif(not INTERNAL_TLS, reason="[tls] internal = false"),
    pytest.mark.skipif(CLUSTER["nodes"] < 2, reason="the embedded cluster has no compute node"),
]


def curl(*args, node=None, as_nobody=True):
    """curl's status line (``-w %{http_code}``) and exit code, from ``node``'s
    network as ``nobody`` (from this host when ``node`` is None)."""
    argv = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", *args]
    if as_nobody:
        argv = [*NOBODY, *argv]
    if node:
        argv = ["nsenter", f"--net=/var/run/netns/{node}", *argv]
    r = subprocess.run(argv, capture_output=True, text=True)
    return r.stdout.strip(), r.returncode, r.stderr


def route(routes, path):
    """The proxy's route of ``path``, by path or, with host routing, by host and
    path (``/HOST/user/alice``); None when there is none."""
    found = [r for spec, r in routes.items() if spec.rstrip("/").endswith(path.rstrip("/"))]
    if path == "/":
        found = [r for r in routes.values() if r.get("hub")]
    return found[0] if found else None


def refused(answer):
    """No HTTP answer at all: the connection was closed or the handshake refused."""
    code, rc, stderr = answer
    return code == "000" and rc != 0, answer


@pytest.fixture(scope="module")
def public_ca_client_cert(tmp_path_factory):
    """A client certificate of the portal's own CA, which the system trusts
    (deploy/tls.sh): JupyterHub's contexts trust the system's CAs too."""
    ca_cert = Path(SITE["tls"]["ca_cert"])
    ca_key = ca_cert.parent / "ca.key"
    if not ca_key.exists():
        pytest.skip("[tls] files are a site's own: no CA key to sign with")
    folder = tmp_path_factory.mktemp("public-ca-client")
    os.chmod(folder, 0o755)
    key, csr, cert, ext = (folder / name for name in ("key", "csr", "crt", "ext"))
    ext.write_text("extendedKeyUsage=clientAuth\n")
    subprocess.run(
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=intruder"]
        + ["-keyout", str(key), "-out", str(csr)],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key)]
        + ["-CAcreateserial", "-CAserial", str(folder / "serial"), "-days", "1"]
        + ["-extfile", str(ext), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    os.chmod(key, 0o644)  # nobody presents it
    return str(cert), str(key)


def test_the_hubs_api_answers_no_one_without_an_internal_certificate(
    hub, accounts, public_ca_client_cert
):
    node = "n2"
    form = ["-X", "POST", "--data-urlencode", f"password={accounts['alice']['password']}"]
    form += ["--data-urlencode", "username=alice"]
    # plain HTTP, as a login was posted before: no answer
    assert refused(curl(*form, f"http://{LOGIN}:{PORT + 81}/hub/login", node=node))
    # TLS without a client certificate (the server's not even checked): refused
    assert refused(curl("-k", *form, f"{HUB_API}/hub/login", node=node))
    # nor with one of a CA the system trusts, the portal's public CA
    cert, key = public_ca_client_cert
    assert refused(curl("-k", "--cert", cert, "--key", key, f"{HUB_API}/hub/login", node=node))
    # the hub itself, with its internal certificate: the API answers (the control)
    code, rc, _ = curl(
        "--cacert", HUB_TRUST, "--cert", HUB_CERT[0], "--key", HUB_CERT[1], f"{HUB_API}/hub/api/",
        as_nobody=False,
    )  # fmt: skip
    assert (code, rc) == ("200", 0)


def test_the_proxys_api_takes_the_hubs_certificate_alone(hub, public_ca_client_cert):
    api = f"https://127.0.0.1:{PORT + 1}/api/routes"
    assert refused(curl(f"http://127.0.0.1:{PORT + 1}/api/routes"))
    assert refused(curl("-k", api))
    # the admin service's certificate (an internal one, not the hub's CA's): refused
    service = CERTS / "user-service" / "user-service"
    r = curl("-k", "--cert", f"{service}.crt", "--key", f"{service}.key", api, as_nobody=False)
    assert refused(r)
    cert, key = public_ca_client_cert
    assert refused(curl("-k", "--cert", cert, "--key", key, api))
    # the hub's certificate, without the token: the proxy's own refusal; with it, the routes
    assert proxy_api(token="").status_code == 403
    r = proxy_api()
    assert r.status_code == 200
    assert route(r.json(), "/")["target"] == f"https://{LOGIN}:{PORT + 81}"
    assert route(r.json(), "/services/portal")["target"] == f"https://127.0.0.1:{SERVICE_PORT}"


def session_server(job_id):
    """``(pid, environ)`` of the single-user server of Slurm job ``job_id``
    (another hub's sessions of the same user may run beside it)."""
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            raw = open(path, "rb").read().decode(errors="replace")
            cmdline = open(path.replace("environ", "cmdline"), "rb").read()
        except OSError:
            continue
        env = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
        if env.get("SLURM_JOB_ID") == job_id and b"jupyterhub-singleuser" in cmdline:
            return int(path.split("/")[2]), env
    raise AssertionError(f"no server process of job {job_id}")


def test_a_session_speaks_tls_to_the_hub_and_the_proxy_alone(session, public_ca_client_cert):
    alice = session("alice", profile="pytorch", gpus=1)
    (job_id, state), *_ = user_jobs("alice")
    node = scontrol_job(job_id)["BatchHost"]
    pid, env = session_server(job_id)
    # told to serve HTTPS on its node's address (the launcher picks the port)
    assert re.fullmatch(r"https://[\d.]+:0/user/alice/", env["JUPYTERHUB_SERVICE_URL"])

    # the proxy reaches the session at its node's name, over TLS
    target = route(proxy_api().json(), "/user/alice")["target"]
    port = int(re.fullmatch(rf"https://{node}:(\d+)", target)[1])
    # and it answers through the proxy, behind the hub's login
    assert alice.lab_answers("alice")

    # from another node as nobody: plain HTTP gets no Jupyter answer, TLS
    # without a client certificate is refused, with the portal's public CA's too
    other = next(n for n in ("n1", "n2") if n != node)
    api = f"{node}:{port}/user/alice/api"
    assert refused(curl(f"http://{api}", node=other))
    assert refused(curl("-k", f"https://{api}", node=other))
    cert, key = public_ca_client_cert
    assert refused(curl("-k", "--cert", cert, "--key", key, f"https://{api}", node=other))
    # the hub's own certificate is taken (the control)
    code, rc, _ = curl(
        "--cacert", HUB_TRUST, "--cert", HUB_CERT[0], "--key", HUB_CERT[1], f"https://{api}",
        as_nobody=False,
    )  # fmt: skip
    assert (code, rc) == ("200", 0)

    # its key, certificate and CAs: in a new folder of alice's in the job's
    # own /tmp, hers alone; none of them in a command line or an environment
    files = {name: env[f"JUPYTERHUB_SSL_{name}"] for name in ("KEYFILE", "CERTFILE", "CLIENT_CA")}
    in_job = {name: Path(f"/proc/{pid}/root{path}") for name, path in files.items()}
    folder = in_job["KEYFILE"].parent
    assert re.fullmatch(r"/tmp/portal-tls-\w{8}", str(Path(files["KEYFILE"]).parent))
    alice_uid = os.stat("/home/alice").st_uid
    assert (folder.stat().st_uid, oct(folder.stat().st_mode & 0o777)) == (alice_uid, "0o700")
    assert {oct(p.stat().st_mode & 0o777) for p in in_job.values()} == {"0o600"}
    assert not Path(files["KEYFILE"]).exists(), "the key is visible outside the job's /tmp"
    # a line of the private key itself (an ECDSA P-256 key's PEM has 3)
    key_line = in_job["KEYFILE"].read_text().splitlines()[1]
    for proc in glob.glob("/proc/[0-9]*"):
        for name in ("cmdline", "environ"):
            try:
                assert key_line not in Path(proc, name).read_bytes().decode(errors="replace")
            except OSError:
                pass
    # the hub kept no copy of it
    assert not (CERTS / "user-alice" / "user-alice.key").exists()

    # the certificate names every node of the partition, nothing of the hub's
    # or of loopback, and ends within the longest a session may run
    cert = x509.load_pem_x509_certificate(in_job["CERTFILE"].read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(sans.get_values_for_type(x509.DNSName))
    addresses = {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    own_host = {f"alice.{DOMAIN}"} if DOMAIN else set()  # the proxy checks it
    assert names == {"n1", "n2"} | own_host, names
    assert LOGIN not in addresses and "127.0.0.1" not in addresses
    assert cert.not_valid_after_utc - datetime.now(UTC) <= timedelta(days=30, hours=1)

    # stopped cleanly: the job and the route are gone
    r = alice.api("DELETE", "/users/alice/server")
    assert r.status_code in (202, 204), r.text
    alice.wait_stopped("alice")
    wait_no_jobs("alice")
    assert route(proxy_api().json(), "/user/alice") is None


def test_the_admin_services_pages_load_and_its_port_takes_no_stranger(portal):
    carol = portal("carol")
    page = carol.get("profiles")
    assert page.status_code == 200 and "pytorch" in page.text
    assert carol.get("api/profiles").status_code == 200
    # on its own port (loopback), for the proxy and the hub alone
    service = f"127.0.0.1:{SERVICE_PORT}/services/portal/profiles"
    assert refused(curl(f"http://{service}"))
    assert refused(curl("-k", f"https://{service}"))


def session_tls(job_id):
    """``(certfile, keyfile)`` of the session of job ``job_id``, read from its
    job's own /tmp (as root)."""
    pid, env = session_server(job_id)
    return tuple(f"/proc/{pid}/root{env[f'JUPYTERHUB_SSL_{n}']}" for n in ("CERTFILE", "KEYFILE"))


def answer_with(cert):
    """A TLS listener on loopback with ``cert`` (a session's certificate and
    key) that answers any request with 200 and the words "answered by"; its
    port. It stands where a user's freed port would be."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*cert)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(65536)
                    body = b"answered by the listener"
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                                b"Connection: close\r\n\r\n%s" % (len(body), body))  # fmt: skip
            except (OSError, ssl.SSLError):
                pass

    threading.Thread(target=serve, daemon=True).start()
    return listener


@pytest.mark.skipif(not DOMAIN, reason="[hub] domain is empty: one origin, no per-user name")
def test_only_the_users_own_session_certificate_answers_her_host(session):
    """The freed-port race: users share a node's address, so another user's
    job can bind the port of a session that ended before the hub drops its
    route. The proxy checks the backend's certificate against the request's
    host (alice.DOMAIN), which only alice's session certificate names: a
    listener with bob's (a real portal certificate of his own session) at
    the target of alice's route is refused; the same listener with alice's
    answers, as the control."""
    session("alice", profile="pytorch", gpus=1)
    session("bob", profile="pytorch", gpus=1)
    certs = {name: session_tls(user_jobs(name)[0][0]) for name in ("alice", "bob")}
    spec = next(s for s in proxy_api().json() if s.rstrip("/").endswith("/user/alice"))
    token = (STATE / "proxy_token").read_text().strip()
    alice_url = f"https://alice.{DOMAIN}:{PORT}/user/alice/api/status"
    seen = {}
    for holder in ("bob", "alice"):
        listener = answer_with(certs[holder])
        r = requests.post(
            PROXY_API + spec, json={"target": f"https://127.0.0.1:{listener.getsockname()[1]}"},
            headers={"Authorization": f"token {token}"}, cert=HUB_CERT, verify=HUB_TRUST,
            timeout=10,
        )  # fmt: skip
        assert r.status_code == 201, r.text
        answer = requests.get(alice_url, verify=CA_CERT, timeout=30)
        seen[holder] = (answer.status_code, "answered by the listener" in answer.text)
        listener.close()
    assert seen["bob"][1] is False and seen["bob"][0] >= 500, seen
    assert seen["alice"] == (200, True), seen
