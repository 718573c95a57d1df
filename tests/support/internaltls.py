"""The test hub's internal TLS ([tls] internal, JupyterHub's internal_ssl),
as the tests use it: the hub's internal CAs and certificate in its state
folder (the tests run as root), and the proxy's API, which takes a client
certificate of the hub's CA and the proxy's token."""

import requests

from portal import settings as site_settings
from tests.support.testhub import PORT, STATE

INTERNAL_TLS = site_settings.load()["tls"]["internal"]
CERTS = STATE / "internal-ssl"
# the hub's own certificate and key (as requests takes them), and the CAs it trusts
HUB_CERT = tuple(str(CERTS / "hub-internal" / f"hub-internal.{ext}") for ext in ("crt", "key"))
HUB_TRUST = str(CERTS / "hub-ca_trust.crt")
PROXY_API = f"{'https' if INTERNAL_TLS else 'http'}://127.0.0.1:{PORT + 1}/api/routes"


def proxy_api(token=None, cert=HUB_CERT, timeout=10):
    """``GET /api/routes`` of the test hub's proxy, as the hub asks it (its
    certificate; the token in the state folder unless ``token`` is given:
    ``""`` sends none)."""
    if token is None:
        token = (STATE / "proxy_token").read_text().strip()
    headers = {"Authorization": f"token {token}"} if token else {}
    if not INTERNAL_TLS:
        return requests.get(PROXY_API, headers=headers, timeout=timeout)
    return requests.get(PROXY_API, headers=headers, cert=cert, verify=HUB_TRUST, timeout=timeout)


def proxy_call(method, routespec, **kwargs):
    """``METHOD /api/routes/ROUTESPEC`` of the test hub's proxy, as the hub asks it."""
    token = (STATE / "proxy_token").read_text().strip()
    tls = {"cert": HUB_CERT, "verify": HUB_TRUST} if INTERNAL_TLS else {}
    url = PROXY_API + "/" + routespec.lstrip("/")
    headers = {"Authorization": f"token {token}"}
    r = requests.request(method, url, headers=headers, timeout=10, **tls, **kwargs)
    r.raise_for_status()
    return r


def proxy_routes():
    """The proxy's routing table as the proxy itself tells it: ``{path: target}``."""
    r = proxy_api()
    r.raise_for_status()
    return {path: route["target"] for path, route in r.json().items()}
