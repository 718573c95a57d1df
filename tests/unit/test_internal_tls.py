"""Mutual TLS inside the cluster (JupyterHub's internal_ssl, [tls] internal),
without a hub: the names each certificate covers, the hub's configuration,
contexts that trust the internal CAs alone, and a session's certificate as
the spawner makes it and hands it to the batch script. The real hub, proxy
and sessions: tests/integration/test_internal_tls.py."""

import os
import socket
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from certipy import Certipy
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, load_pem_private_key
from jupyterhub import app, objects, user
from jupyterhub.objects import Server
from jupyterhub.utils import make_ssl_context as jupyterhubs_make_ssl_context
from tornado import web
from traitlets.config import Config

from portal import settings, tlscontext
from portal.core.tlsnames import alt_name, alt_names, node_alt_names
from spawners import jupyterhub_patches
from spawners.hub_config import (
    configure_internal_ssl,
    configure_proxy,
    configure_service,
    hub_alt_names,
)
from spawners.session_tls import CERT_HOURS, _issuer, read_session_tls
from tests.unit.test_spawner_lifecycle import runner, spawner  # noqa: F401 (fixture)

TRUST = {  # JupyterHub's trust graph (JupyterHub.init_internal_ssl)
    "hub-ca": ["hub-ca", "notebooks-ca", "proxy-api-ca", "proxy-client-ca", "services-ca"],
    "proxy-api-ca": ["hub-ca", "services-ca", "notebooks-ca"],
    "proxy-client-ca": ["hub-ca", "notebooks-ca"],
    "notebooks-ca": ["hub-ca", "proxy-client-ca"],
    "services-ca": ["hub-ca", "proxy-api-ca"],
}


def site(**sections):
    return settings.merge(settings.defaults(), sections)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """An internal CA store as JupyterHub makes it: the CAs, their trust
    bundles, the hub's certificate."""
    path = tmp_path_factory.mktemp("internal-ssl")
    certipy = Certipy(store_dir=str(path))
    for ca in TRUST:
        certipy.create_ca(ca)
    bundles = certipy.trust_from_graph(TRUST)
    hub = certipy.create_signed_pair("hub-internal", "hub-ca", alt_names=["IP:127.0.0.1"])
    return {"path": path, "bundles": bundles, "hub": hub["files"]}


def names_of(cert_pem):
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = [f"DNS:{n}" for n in sans.get_values_for_type(x509.DNSName)]
    ips = [f"IP:{n}" for n in sans.get_values_for_type(x509.IPAddress)]
    return cert, set(dns + ips)


def test_alt_names_say_what_each_host_is():
    assert alt_name("10.200.0.2") == "IP:10.200.0.2" and alt_name("n1") == "DNS:n1"
    assert alt_names(["10.1.0.5", "0.0.0.0", "", "login01", "10.1.0.5"]) == [
        "IP:10.1.0.5",
        "DNS:login01",
    ]
    assert node_alt_names({"n1": ["10.200.0.2"], "n2": []}) == ["DNS:n1", "IP:10.200.0.2", "DNS:n2"]


def test_the_hubs_certificate_covers_where_sessions_reach_it():
    embedded = site(cluster={"embedded": True, "nodes": 2}, hub={"domain": ""})
    assert hub_alt_names(embedded) == ["IP:10.200.0.1"]
    real = site(hub={"api_ip": "10.1.0.5", "connect_ip": "login01.cluster", "domain": ""})
    assert hub_alt_names(real) == ["IP:10.1.0.5", "DNS:login01.cluster"]
    # under host routing the proxy sends the hub every host no session holds
    routed = site(cluster={"embedded": True, "nodes": 2}, hub={"domain": "portal.localhost"})
    assert hub_alt_names(routed) == ["IP:10.200.0.1", "DNS:*.portal.localhost"]


def test_internal_tls_turns_on_jupyterhubs_internal_ssl_and_https_inside():
    on = site(hub={"state_dir": "/var/lib/portal/hub"}, tls={"internal": True})
    c = Config()
    configure_internal_ssl(c, on)
    configure_proxy(c, on)
    configure_service(c, on)
    assert c.JupyterHub.internal_ssl is True
    assert c.JupyterHub.internal_certs_location == "/var/lib/portal/hub/internal-ssl"
    assert c.JupyterHub.trusted_alt_names == hub_alt_names(on)
    assert c.ConfigurableHTTPProxy.api_url == "https://127.0.0.1:8001"
    assert c.JupyterHub.services[0]["url"] == "https://127.0.0.1:10101"

    off = site(tls={"internal": False})
    c = Config()
    configure_internal_ssl(c, off)
    configure_proxy(c, off)
    configure_service(c, off)
    assert "internal_ssl" not in c.JupyterHub
    assert c.ConfigurableHTTPProxy.api_url == "http://127.0.0.1:8001"
    assert c.JupyterHub.services[0]["url"] == "http://127.0.0.1:10101"


def test_contexts_trust_the_internal_cas_alone(store):
    """JupyterHub's make_ssl_context adds the system's CA store (a public CA's
    client certificate passed the hub's API); the portal's contexts, and the
    hub's once install() ran, trust the given CA file alone, both ways."""
    hub, bundle = store["hub"], store["bundles"]["hub-ca"]
    internal = len(TRUST["hub-ca"])
    theirs = jupyterhubs_make_ssl_context(
        hub["key"], hub["cert"], cafile=bundle, purpose=ssl.Purpose.CLIENT_AUTH
    )
    assert len(theirs.get_ca_certs()) > internal  # the system's CAs too
    server = tlscontext.ssl_context(hub["key"], hub["cert"], bundle, server=True)
    assert len(server.get_ca_certs()) == internal
    assert server.verify_mode == ssl.CERT_REQUIRED and server.protocol == ssl.PROTOCOL_TLS_SERVER
    client = tlscontext.ssl_context(hub["key"], hub["cert"], bundle)
    assert len(client.get_ca_certs()) == internal and client.check_hostname
    assert tlscontext.ssl_context("", "", bundle) is None
    environ = {
        "JUPYTERHUB_SSL_KEYFILE": hub["key"],
        "JUPYTERHUB_SSL_CERTFILE": hub["cert"],
        "JUPYTERHUB_SSL_CLIENT_CA": bundle,
    }
    assert len(tlscontext.from_environ(environ).get_ca_certs()) == internal
    assert tlscontext.from_environ({}) is None


def test_install_gives_the_hub_contexts_of_the_internal_cas_and_a_client_to_wait_up(
    store, monkeypatch
):
    for module in (app, user, objects):
        monkeypatch.setattr(module, "make_ssl_context", module.make_ssl_context)
    monkeypatch.setattr(Server, "wait_up", Server.wait_up)
    hub, bundle = store["hub"], store["bundles"]["hub-ca"]
    client = tlscontext.ssl_context(hub["key"], hub["cert"], bundle)
    monkeypatch.setattr(jupyterhub_patches, "_app_client_context", lambda: client)
    seen = []

    def original(self, timeout=10, http=False, ssl_context=None, extra_path=""):
        seen.append(ssl_context)

    monkeypatch.setattr(Server, "wait_up", original)
    jupyterhub_patches.install_internal_tls()
    jupyterhub_patches.install_internal_tls()  # idempotent
    server = app.make_ssl_context(hub["key"], hub["cert"], bundle, purpose=ssl.Purpose.CLIENT_AUTH)
    assert len(server.get_ca_certs()) == len(TRUST["hub-ca"])
    assert user.make_ssl_context is objects.make_ssl_context is jupyterhub_patches.make_ssl_context
    # start_service's server context, the health check's none: the client's instead
    Server(ip="127.0.0.1", port=1).wait_up(http=True, ssl_context=server)
    Server(ip="127.0.0.1", port=1).wait_up(http=True)
    other = tlscontext.ssl_context(hub["key"], hub["cert"], bundle)
    Server(ip="127.0.0.1", port=1).wait_up(http=True, ssl_context=other)
    assert seen == [client, client, other]


def session_spawner(store, name="unit-tls"):
    s = spawner(name)
    s.internal_ssl = True
    s.internal_certs_location = str(store["path"])
    s.internal_trust_bundles = store["bundles"]
    s.trusted_alt_names = ["IP:10.200.0.1"]  # the hub's, which JupyterHub would give sessions
    return s


async def test_a_sessions_certificate_names_its_partitions_nodes_and_nothing_else(
    store,
    runner,  # noqa: F811
    monkeypatch,
):
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "n1":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.200.0.2", 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    s = session_spawner(store)
    s.load_user_options({"gpus": "1"})
    _issuer.cache_clear()
    paths = await s.create_certs()
    assert os.stat(paths["keyfile"]).st_mode & 0o777 == 0o600
    cert, names = names_of(Path(paths["certfile"]).read_text())
    # the node (sinfo lists n1) by name and address; no loopback, none of the hub's names
    assert names == {"DNS:n1", "IP:10.200.0.2"}
    # under host routing, its user's own host too: the proxy checks it, so no
    # other user's session certificate answers for this user
    s.user.domain = "unit-tls.portal.localhost"
    _, names = names_of(Path((await s.create_certs())["certfile"]).read_text())
    assert names == {"DNS:n1", "IP:10.200.0.2", "DNS:unit-tls.portal.localhost"}
    # the CA's files are parsed once, not at every signature (its RSA key's
    # check took about 20 ms of each spawn)
    assert (_issuer.cache_info().misses, _issuer.cache_info().hits) == (1, 1)
    lifetime = cert.not_valid_after_utc - datetime.now(UTC)
    assert timedelta(hours=CERT_HOURS - 1) < lifetime <= timedelta(hours=CERT_HOURS)
    # signed by notebooks-ca, as JupyterHub's; the hub and the proxy trust it
    ca_file = store["path"] / "notebooks-ca" / "notebooks-ca.crt"
    ca = x509.load_pem_x509_certificate(ca_file.read_bytes())
    assert cert.issuer == ca.subject

    # handed to the batch script, not as paths; the hub keeps no key
    assert await s.move_certs(paths) == {}
    assert not Path(paths["keyfile"]).exists()
    assert "PRIVATE KEY" in s.session_tls["key"]
    # an ECDSA key on P-256 (made in a millisecond on the spawn's path, not
    # RSA's tens to hundreds), the one the certificate names
    key = load_pem_private_key(s.session_tls["key"].encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp256r1"
    named = x509.load_pem_x509_certificate(s.session_tls["cert"].encode()).public_key()
    assert named.public_numbers() == key.public_key().public_numbers()
    # the CAs of its clients and servers (the hub's, the proxy's), and its own for its kernels
    bundle = Path(store["bundles"]["notebooks-ca"]).read_text()
    assert s.session_tls["ca"] == bundle + ca.public_bytes(Encoding.PEM).decode()
    # in the script fed to sbatch's stdin, then forgotten
    key = s.session_tls["key"]
    await s.submit_batch_script()
    assert "export JUPYTERHUB_SSL_KEYFILE=$tls_dir/session.key" in runner.script
    assert key.splitlines()[1] in runner.script
    assert s.session_tls is None


async def test_no_node_listed_no_certificate(store, runner, monkeypatch):  # noqa: F811
    s = session_spawner(store, "unit-tls-none")
    s.load_user_options({"gpus": "1"})
    monkeypatch.setattr(s.poller, "partitions", {})

    async def sinfo_failed(*args, **kwargs):
        return None

    monkeypatch.setattr(s.poller, "partitions_since", sinfo_failed)
    with pytest.raises(web.HTTPError, match="could not list the nodes of partition gpu"):
        await s.create_certs()


def test_read_session_tls_removes_the_key(tmp_path):
    for name, text in {"k": "KEY\n", "c": "CERT\n", "a": "HUB\n", "n": "OWN\n"}.items():
        (tmp_path / name).write_text(text)
    paths = {name: str(tmp_path / f) for name, f in [("keyfile", "k"), ("certfile", "c")]}
    paths |= {"cafile": str(tmp_path / "a"), "kernels_cafile": str(tmp_path / "n")}
    assert read_session_tls(paths) == {"key": "KEY\n", "cert": "CERT\n", "ca": "HUB\nOWN\n"}
    assert not (tmp_path / "k").exists() and (tmp_path / "c").exists()
