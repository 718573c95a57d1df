"""The portal behind a site's web server ([hub] public_url): a real nginx on
loopback terminates TLS with the portal's certificate and forwards every
host of the portal to the proxy, which listens in plain HTTP on loopback.

A hub of its own (its proxy on PORT in plain HTTP, nginx on NGINX_PORT),
with nginx started from a configuration file in a temporary folder (no
system service, no port 80 or 443). Through nginx: the login page, a login
(Secure __Host- cookies, redirects to the public https origin, not the
proxy's), the users' hosts under the domain, the client's address as nginx
saw it whatever headers the client sent, and HSTS from nginx alone."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

from portal import settings as site_settings
from tests.support.hubclient import HubClient
from tests.support.hubsettings import (
    CA_CERT,
    DOMAIN,
    PYTORCH_PROFILE,
    fresh_state,
    hub_settings,
    write_settings,
)
from tests.support.testhub import PORT as TEST_PORT
from tests.support.testhub import deploy

PORT = TEST_PORT + 40  # PORT+1, +2, +81: its proxy's API, its service, its API
NGINX_PORT = TEST_PORT + 45
STATE = f"/var/lib/portal/test-front-hub-{PORT}"
SETTINGS_FILE = f"/var/lib/portal/test-front-settings-{PORT}.toml"
PUBLIC = f"https://{DOMAIN}:{NGINX_PORT}"
SETTINGS = (
    hub_settings(
        PORT,
        STATE,
        f"portal-test-front-{PORT}",
        bind_url=f"http://127.0.0.1:{PORT}",
        public_url=f"{PUBLIC}/",
    )  # fmt: skip
    + PYTORCH_PROFILE
)
HSTS = "max-age=63072000"  # nginx's own, unlike the portal's

NGINX_CONF = """
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
user nobody nogroup;
events {{ worker_connections 64; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    server {{
        listen 127.0.0.1:{nginx_port} ssl;
        server_name {domain} *.{domain};
        ssl_certificate {cert};
        ssl_certificate_key {key};
        add_header Strict-Transport-Security "{hsts}" always;
        location / {{
            proxy_pass http://127.0.0.1:{port};
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
        }}
    }}
}}
"""


def nginx_binary():
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None
    )
    assert found, "nginx is not installed: deploy/packages.sh installs nginx-light"
    return found


@pytest.fixture(scope="module")
def nginx():
    """nginx in front of PORT on NGINX_PORT, from its own folder; stopped at the end."""
    tls = site_settings.load()["tls"]
    tmp = Path(tempfile.mkdtemp(prefix="portal-nginx-"))
    tmp.chmod(0o755)  # its workers (nobody) use the temporary folders
    conf = tmp / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            tmp=tmp,
            nginx_port=NGINX_PORT,
            domain=DOMAIN,
            cert=tls["cert"],
            key=tls["key"],
            hsts=HSTS,
            port=PORT,
        )  # fmt: skip
    )
    argv = [nginx_binary(), "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(conf)]
    started = subprocess.run([*argv, "-g", "daemon on;"], capture_output=True, text=True)
    assert started.returncode == 0, started.stderr + (tmp / "error.log").read_text()
    try:
        yield PUBLIC
    finally:
        subprocess.run([*argv, "-s", "quit"], capture_output=True)
        deadline = time.monotonic() + 10
        while (tmp / "nginx.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def front_hub(cluster, nginx):
    env = {**os.environ, "PORTAL_CONFIG": str(write_settings(SETTINGS_FILE, SETTINGS))}
    deploy("hub.sh", "stop", env=env)
    if os.path.isdir(STATE):
        fresh_state(STATE)
    result = deploy("hub.sh", "start", env=env, check=False)
    assert result.returncode == 0, result.stderr
    yield nginx
    deploy("hub.sh", "stop", env=env)


def test_the_proxy_serves_plain_http_on_loopback_only(front_hub):
    r = requests.get(f"http://127.0.0.1:{PORT}/hub/login", timeout=30)
    assert r.status_code == 200 and 'name="password"' in r.text
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://{primary_address()}:{PORT}/hub/login", timeout=5)


def primary_address():
    """An address of this host that is not loopback."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    addresses = [a for a in out if ":" not in a and not a.startswith("127.")]
    if not addresses:
        pytest.skip("this host has no address but loopback")
    return addresses[0]


def test_a_login_through_the_front_web_server(front_hub, accounts):
    client = HubClient(front_hub)
    page = client.session.get(f"{front_hub}/hub/login", timeout=30)
    assert page.status_code == 200 and 'name="password"' in page.text
    # HSTS is the front web server's, once: the hub sends none of its own
    assert page.headers["Strict-Transport-Security"] == HSTS

    r = client.login("alice", accounts["alice"]["password"])
    assert r.status_code == 302, r.text[:300]
    # the hub answers for the public origin (https, nginx's port), not the proxy's
    location = r.headers["Location"]
    assert location.startswith("/hub/") or location.startswith(f"{front_hub}/hub/"), location
    cookies = r.raw.headers.getlist("Set-Cookie")
    assert cookies and all("Secure" in c for c in cookies), cookies
    assert any(c.startswith("__Host-") for c in cookies), cookies
    home = client.session.get(f"{front_hub}/hub/home", timeout=30)
    assert home.status_code == 200 and "alice" in home.text
    assert client.api("GET", "/user").json()["name"] == "alice"


def test_a_users_host_through_the_front_web_server_leads_to_the_public_origin(front_hub):
    """No session runs: alice's host reaches the hub (through nginx and the
    proxy's default route), which sends the browser to the hub's public
    https origin, not to the proxy's plain HTTP one."""
    r = requests.get(
        f"https://alice.{DOMAIN}:{NGINX_PORT}/hub/home", verify=CA_CERT,
        allow_redirects=False, timeout=30,
    )  # fmt: skip
    assert r.status_code == 302
    assert r.headers["Location"] == f"{front_hub}/hub/home"


def test_the_hub_logs_the_address_nginx_saw_not_one_a_client_sent(front_hub):
    client = HubClient(front_hub)
    spoof = {"X-Forwarded-For": "192.0.2.99", "X-Real-IP": "192.0.2.98"}
    client.session.headers.update(spoof)
    assert client.login("bob", "not-bobs-password").status_code == 403
    log = (Path(STATE) / "jupyterhub.log").read_text(errors="replace")
    failed = [line for line in log.splitlines() if "Failed login for bob from" in line]
    assert failed, "the hub logged no failed login of bob"
    assert "from 127.0.0.1" in failed[-1] and "192.0.2" not in failed[-1], failed[-1]
