"""A site installs the portal on its own login node (issue 35): the fresh
machine of tests/site (systemd as PID 1, joined to the demo cluster by hand),
the site's own prerequisites set up by hand (Node.js and
configurable-http-proxy, nginx on 443 with a certificate of its own, the
shared environments and homes), then the ``dsportal`` wheel installed with
pip into a new venv, ``portal setup`` and ``systemctl enable --now``.

The journey, in order (each test relies on the ones before it):
the login page through nginx; alice's session (1 GPU, pytorch) runs a cell;
the hub killed with SIGKILL answers again under systemd within 10 s and the
session still runs cells; the session stops and its job ends; the site's
files, packages and services are as before; ``portal uninstall`` and
``make purge``'s file step (with state_dir = "/var/lib/jupyterhub") each
remove only the portal's paths.

What it measured is printed at the end (``pytest -s`` shows it): the
wheel's size, setup's lines, the time to a ready session, the seconds from
SIGKILL to an answer, and ``systemd-analyze security`` of both units.
"""

import asyncio
import concurrent.futures
import hashlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from portal import settings as site_settings
from tests.site.join import CA_IN_MACHINE, REPO, join_demo, stop_ldap_relay_if_unused
from tests.site.machine import CACHE, PACKAGES, STATE, Machine, MachineError, why_not_here
from tests.site.snapshot import differences, snapshot
from tests.support import kernelcells
from tests.support.hubclient import HubClient

pytestmark = pytest.mark.slow

# Not login2 (.30, README's by hand) nor login-test (.31, test_login_node.py).
NAME, HOST = "login-site", 32
USER = "alice"
# The portal's public name (nginx's), with a dot as a site's has: Python's
# cookie jar files a dotless host's cookies under HOST.local, apart from the
# hub's cookies for .HOST.
PUBLIC = f"{NAME}.example"
# What a site installs before the portal: Node.js from Debian, for
# configurable-http-proxy (copied from this host: npm is not reachable inside).
SITE_PACKAGES = (*PACKAGES, "nodejs")
CHP_ON_HOST = Path("/usr/lib/node_modules/configurable-http-proxy")
CHP_IN_MACHINE = "/usr/local/lib/node_modules/configurable-http-proxy"
VENV = "/opt/dsportal"
# The portal's ports in the machine, none of the demo's (8000, 8001, 8081,
# 10101) nor the tests' (18000+) or the helpers' (19000-19400).
PORT = 8100
JOB_NAME = "portal-site"
ETC_PORTAL = "/etc/portal"
SITE_TOML = f"{ETC_PORTAL}/portal.toml"
NGINX_TLS = "/etc/nginx/tls"
# The built dsportal wheel (each run anew) and its dependencies' wheels (a
# cache keyed by deploy/requirements-hub.txt), both seen read-only inside.
DIST = STATE.parent / "dist"
REQUIREMENTS = REPO / "deploy" / "requirements-hub.txt"
HUB_PYTHON = "/opt/portal/envs/hub/bin/python"
SECURITY = re.compile(r"Overall exposure level for (\S+): ([0-9.]+) (\w+)")

FIGURES = {}


# ---------------------------------------------------------------- pure


def hub_requirements(text):
    """The hub's pinned requirements, without the tests' tools (the part
    of requirements-hub.txt before its ``# tests`` line).

    >>> hub_requirements("# the hub\\njupyterhub==6.1.1\\n\\n# tests\\npytest==9\\n")
    ['jupyterhub==6.1.1']
    """
    return [
        line.strip()
        for line in text.split("\n# tests", 1)[0].splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def site_settings_toml(address, ldap_host, ldap_port, state_dir="/var/lib/portal/hub"):
    """The site's /etc/portal/portal.toml: only what differs from the
    package's defaults, as a site's administrator writes it."""
    return f"""# login-site's settings (tests/site/test_site_install.py)
[cluster]
embedded = false

[hub]
# configurable-http-proxy on loopback; the site's nginx terminates TLS on 443
bind_url = "http://127.0.0.1:{PORT}"
public_url = "https://{PUBLIC}/"
domain = "{PUBLIC}"
api_ip = "{address}"
api_port = {PORT + 81}
connect_ip = "{address}"
proxy_api_port = {PORT + 1}
state_dir = "{state_dir}"
db_url = "sqlite:///{state_dir}/jupyterhub.sqlite"

[portal]
service_port = {PORT + 2}

[tls]
ca_cert = "{ETC_PORTAL}/tls/site-ca.crt"
cert = "{NGINX_TLS}/{PUBLIC}.crt"
key = "{NGINX_TLS}/{PUBLIC}.key"

[ldap]
server_address = "{ldap_host}"
server_port = {ldap_port}
ca_cert = "{CA_IN_MACHINE}"

[slurm]
job_name = "{JOB_NAME}"
poll_interval = 2.0
cluster_interval = 2.0

[metrics]
prometheus_listen = ""

[containers]
build = []

[[profiles]]
name = "pytorch"
display_name = "PyTorch"
environment = "pytorch"
max_gpus = 4
"""


NGINX_SITE = f"""# The site's web server in front of the portal (tests/site/test_site_install.py)
map $http_upgrade $connection_upgrade {{
    default upgrade;
    ''      close;
}}
server {{
    listen 443 ssl;
    server_name {PUBLIC} *.{PUBLIC};
    ssl_certificate {NGINX_TLS}/{PUBLIC}.crt;
    ssl_certificate_key {NGINX_TLS}/{PUBLIC}.key;
    location / {{
        proxy_pass http://127.0.0.1:{PORT};
        proxy_set_header Host $http_host;
        proxy_set_header X-Real-IP $remote_addr;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_http_version 1.1;
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection $connection_upgrade;
        proxy_buffering off;
        proxy_read_timeout 1d;
    }}
}}
"""


# ---------------------------------------------------------------- the host's side


def build_wheel(log=print):
    """The dsportal wheel, built from this checkout's files (tracked and
    new, as git lists them: no build/ leftovers), in DIST; its path."""
    DIST.mkdir(mode=0o755, parents=True, exist_ok=True)
    for old in DIST.iterdir():  # emptied, not made anew: a machine may see it bound
        old.unlink()
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in filter(None, files):
            source = REPO / name
            if source.is_file():
                (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, Path(tmp) / name)
        subprocess.run([HUB_PYTHON, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(DIST),
                        tmp], check=True, capture_output=True)  # fmt: skip
    [wheel] = DIST.glob("dsportal-*.whl")
    log(f"built {wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB")
    return wheel


def ensure_dependencies(log=print):
    """The wheels of the hub's dependencies, at the versions
    deploy/requirements-hub.txt pins, from PyPI once per content of that
    file: CACHE/wheels-KEY (pip wheel also builds any sdist)."""
    text = REQUIREMENTS.read_text()
    folder = CACHE / f"wheels-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    if folder.is_dir():
        return folder
    work = folder.with_name(f".{folder.name}.new")
    shutil.rmtree(work, ignore_errors=True)
    log(f"downloading the hub's dependencies into {folder}")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as reqs:
        reqs.write("\n".join(hub_requirements(text)) + "\n")
        reqs.flush()
        done = subprocess.run([HUB_PYTHON, "-m", "pip", "wheel", "-q", "-w", str(work), "-r",
                               reqs.name], capture_output=True, text=True)  # fmt: skip
    if done.returncode:
        shutil.rmtree(work, ignore_errors=True)
        raise MachineError(f"pip wheel of the hub's requirements failed: {done.stderr[-2000:]}")
    work.rename(folder)
    return folder


def make_ca(folder, name):
    """A small CA and a certificate for ``name`` and ``*.name`` signed by it
    (the site's own web certificate), in ``folder``: ca.crt, NAME.crt, NAME.key."""
    folder = Path(folder)

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=Site test CA", "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
            f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
    names = f"DNS:{name},DNS:*.{name}"  # the hub's host and the users' (NAME.HOST)
    (folder / "ext").write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "ext", "-out", f"{name}.crt")  # fmt: skip
    return folder


class Resolved:
    """NAME and every name under it resolve to the machine's address in this
    process (the browser's side), as a site's wildcard DNS would say:
    requests and tornado both ask socket.getaddrinfo."""

    def __init__(self, name, address):
        self.name, self.address = name, address
        self._real = socket.getaddrinfo

    def __enter__(self):
        def getaddrinfo(host, *args, **kwargs):
            ours = host == self.name or str(host).endswith(f".{self.name}")
            return self._real(self.address if ours else host, *args, **kwargs)

        socket.getaddrinfo = getaddrinfo
        return self

    def __exit__(self, *exc):
        socket.getaddrinfo = self._real


# ---------------------------------------------------------------- the machine's side


def listing(node, *folders):
    """Every path under ``folders`` inside, with its type (find -xdev)."""
    out = node.run(["find", *folders, "-xdev", "-printf", "%y %p\\n"], timeout=120).stdout
    return set(out.splitlines())


# Paths under /etc and /var/lib that the running system changes by itself
# (systemd's timers and its random seed, sssd's caches, dpkg's, nginx's),
# and the backups useradd and userdel keep of the account files.
VOLATILE = re.compile(
    r"^. /var/lib/(systemd|sss|dpkg|private|dhcp|nginx|sudo|logrotate|apt|ucf|pam)(/|$)"
    r"|^. /etc/(ld\.so\.cache|\.pwd\.lock|mtab|(passwd|group|shadow|gshadow)-)$"
)


def steady(paths):
    return {p for p in paths if not VOLATILE.search(p)}


@pytest.fixture(scope="module")
def site(cluster, accounts):
    """The machine at .32, joined to the demo cluster, with what a site
    installs by hand before the portal; the "before" snapshot taken; the
    portal not yet installed. Removed at the end, its jobs cancelled."""
    reason = why_not_here()
    if reason:
        pytest.skip(f"no site machine here: {reason}")
    if not CHP_ON_HOST.is_dir():
        pytest.skip(f"no configurable-http-proxy at {CHP_ON_HOST} to give the machine")
    wheel = build_wheel()
    FIGURES["wheel"] = f"{wheel.name}, {wheel.stat().st_size / 1024:.0f} KiB"
    try:
        deps = ensure_dependencies()
    except MachineError as e:
        pytest.skip(f"the hub's dependencies cannot be downloaded: {e}")
    network = site_settings.load()["cluster"]["network"]
    address = f"{network}.{HOST}"
    envs = site_settings.load()["envs"]["prefix"]
    machine = Machine(NAME, address, ro_binds=(envs, str(DIST), str(deps), str(REPO)),
                      packages=SITE_PACKAGES)  # fmt: skip
    machine.remove()  # one an interrupted run left
    try:
        machine.boot()
    except MachineError as e:
        machine.remove()
        pytest.skip(f"systemd-nspawn cannot boot a machine here: {e}")
    try:
        join_demo(machine, probe_user=USER)
        with tempfile.TemporaryDirectory() as tmp:
            ca = make_ca(tmp, PUBLIC)
            install_prerequisites(machine, ca, address)
            ca_bundle = STATE / NAME / "site-ca.crt"
            shutil.copy(ca / "ca.crt", ca_bundle)
        yield Site(machine, address, wheel, deps, ca_bundle)
    finally:
        subprocess.run(["scancel", f"--name={JOB_NAME}"], check=False)
        machine.remove()
        stop_ldap_relay_if_unused()


def install_prerequisites(node, ca, address):
    """What the site sets up by hand: configurable-http-proxy in
    /usr/local, its web certificate and nginx on 443 in front of the
    portal's proxy, and the portal's settings."""
    shutil.copytree(CHP_ON_HOST, node.root / CHP_IN_MACHINE.lstrip("/"), symlinks=True)
    node.run(["ln", "-sf", f"{CHP_IN_MACHINE}/bin/configurable-http-proxy",
              "/usr/local/bin/configurable-http-proxy"])  # fmt: skip
    node.run(["mkdir", "-p", NGINX_TLS, f"{ETC_PORTAL}/tls"])
    node.write(f"{NGINX_TLS}/{PUBLIC}.crt", (ca / f"{PUBLIC}.crt").read_text())
    node.write(f"{NGINX_TLS}/{PUBLIC}.key", (ca / f"{PUBLIC}.key").read_text(), mode="0600")
    node.write(f"{ETC_PORTAL}/tls/site-ca.crt", (ca / "ca.crt").read_text())
    node.write("/etc/nginx/sites-available/portal", NGINX_SITE)
    node.run(["ln", "-sf", "/etc/nginx/sites-available/portal", "/etc/nginx/sites-enabled/"])
    node.run(["nginx", "-t"])
    node.run(["systemctl", "reload", "nginx"])
    ldap = site_settings.load()["ldap"]
    node.write(SITE_TOML, site_settings_toml(address, socket.gethostname(),
                                             ldap["server_port"]))  # fmt: skip


class Site:
    def __init__(self, node, address, wheel, deps, ca_bundle):
        self.node, self.address, self.wheel, self.deps = node, address, wheel, deps
        self.ca_bundle = str(ca_bundle)
        self.base = f"https://{PUBLIC}:443"  # users' sessions on NAME.HOST:443 (HubClient)
        self.before = snapshot(node)
        self.before_paths = listing(node, "/etc", "/var/lib", "/usr/local")

    def portal(self, *args, check=True, timeout=300, env=()):
        """``portal ARGS`` as root inside, from the venv; its result."""
        return self.node.run(["env", *env, f"{VENV}/bin/portal", *args], check=check,
                             timeout=timeout)  # fmt: skip

    def get(self, path, **kwargs):
        return requests.get(self.base + path, verify=self.ca_bundle, timeout=10, **kwargs)

    def client(self):
        client = HubClient(self.base)
        client.session.verify = self.ca_bundle
        return client


@pytest.fixture(scope="module")
def browser(site):
    """PUBLIC and its users' hosts resolving to the machine, and the site's CA trusted, for the
    module's clients (kernelcells' requests and websocket too)."""
    with Resolved(PUBLIC, site.address), pytest.MonkeyPatch.context() as mp:
        mp.setenv("REQUESTS_CA_BUNDLE", site.ca_bundle)
        mp.setattr(kernelcells, "CA_CERT", site.ca_bundle)
        yield site


def wait_answering(site, path="/hub/login", timeout=60):
    """Seconds until ``path`` answers 200 through nginx."""
    began = time.monotonic()
    last = None
    while time.monotonic() - began < timeout:
        try:
            r = site.get(path)
            if r.status_code == 200:
                return time.monotonic() - began
            last = r.status_code
        except requests.RequestException as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{path} not answering through nginx after {timeout} s: {last}")


def pin_xsrf(client):
    """HubClient's API calls with the hub's latest _xsrf cookie in their
    header: the hub's own (on NAME, not on a session's host), whatever its path."""
    ours = [c for c in client.session.cookies if c.name == "_xsrf" and c.domain == PUBLIC]
    assert ours, [(c.name, c.domain, c.path) for c in client.session.cookies]
    token = ours[-1].value

    def api(method, path, **kwargs):
        headers = {**kwargs.pop("headers", {}), "X-XSRFToken": token}
        kwargs.setdefault("timeout", 30)
        url = client.url("/hub/api" + path)
        return client.session.request(method, url, headers=headers, **kwargs)

    client.api = api


def journal(node, unit, lines=60):
    return node.run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager"], check=False).stdout


def our_jobs():
    out = subprocess.run(["squeue", "--noheader", f"--name={JOB_NAME}", "--format=%i %u %T"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [line.split() for line in out.splitlines() if line.strip()]


# ---------------------------------------------------------------- the journey


def test_the_wheel_installs_with_pip_into_a_new_venv(browser):
    node = browser.node
    node.run(["python3", "-m", "venv", VENV])
    began = time.monotonic()
    node.run([f"{VENV}/bin/pip", "install", "--no-index", "--find-links", str(DIST),
              "--find-links", str(browser.deps), "--quiet", "--no-cache-dir", "dsportal"],
             timeout=600)  # fmt: skip
    FIGURES["pip install"] = f"{time.monotonic() - began:.0f} s"
    shown = node.run([f"{VENV}/bin/pip", "show", "dsportal"]).stdout
    assert "Version: 0.1.0" in shown
    # no checkout: the hub's configuration and the templates come from the venv
    where = node.run([f"{VENV}/bin/python", "-c",
                      "import spawners, portal; print(spawners.__file__, portal.__file__)"],
                     ).stdout  # fmt: skip
    assert where.split() and all(p.startswith(f"{VENV}/lib/") for p in where.split()), where


def test_portal_setup_under_systemd_serves_the_login_page_through_nginx(browser):
    node = browser.node
    done = browser.portal("setup", "--no-check", env=(f"PORTAL_CONFIG={SITE_TOML}",))
    lines = [line for line in done.stderr.splitlines() if line.startswith("[portal]")]
    FIGURES["portal setup"] = lines
    assert any("wrote /etc/systemd/system/portal-hub.service" in line for line in lines), lines
    assert any("/etc/sudoers.d/portal" in line for line in lines), lines
    # idempotent: a second run changes nothing
    again = browser.portal("setup", "--no-check", env=(f"PORTAL_CONFIG={SITE_TOML}",))
    assert [x for x in again.stderr.splitlines() if x.startswith("[portal]")] == []
    for unit in ("portal-proxy.service", "portal-hub.service"):
        verify = node.run(["systemd-analyze", "verify", unit], check=False)
        assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    began = time.monotonic()
    node.run(["systemctl", "enable", "--now", "portal-proxy", "portal-hub"])
    try:
        wait_answering(browser, timeout=90)
    except AssertionError:
        print(journal(node, "portal-proxy"), journal(node, "portal-hub"), sep="\n")
        raise
    FIGURES["setup to login page"] = f"{time.monotonic() - began:.1f} s"
    page = browser.get("/hub/login")
    assert 'name="username"' in page.text and 'name="password"' in page.text
    for unit in ("portal-proxy", "portal-hub"):
        state = node.run(["systemctl", "show", "-p", "User,ActiveState", unit]).stdout.split()
        assert "ActiveState=active" in state, state
    # each as its unprivileged account
    users = node.run(["ps", "-o", "user=", "-C", "node,jupyterhub"]).stdout.split()
    assert users and "root" not in users, users
    FIGURES["security"] = {
        unit: node.run(["systemd-analyze", "security", "--no-pager", unit], check=False).stdout
        for unit in ("portal-proxy.service", "portal-hub.service")
    }


def test_alice_starts_a_session_and_runs_a_cell(browser, accounts):
    client = browser.client()
    r = client.login(USER, accounts[USER]["password"])
    assert r.status_code == 302, f"login answered {r.status_code}: {r.text[:300]}"
    # the home page, as a browser lands on it: its _xsrf cookie is the logged-in user's
    home = client.session.get(client.url("/hub/home"), timeout=30)
    assert home.status_code == 200, home.status_code
    pin_xsrf(client)
    began = time.monotonic()
    r = client.api("POST", f"/users/{USER}/server", json={"profile": "pytorch", "gpus": 1})
    cookies = [(c.name, c.domain, c.path) for c in client.session.cookies]
    assert r.status_code in (201, 202), (r.text, cookies)
    try:
        client.wait_ready(USER, timeout=180)
    except AssertionError:
        print(journal(browser.node, "portal-hub", 120))
        raise
    FIGURES["spawn to ready, through nginx"] = f"{time.monotonic() - began:.1f} s"
    assert [job[1:] for job in our_jobs()] == [[USER, "RUNNING"]]
    lab = client.session.get(client.url(f"/user/{USER}/lab"), timeout=30)
    assert lab.status_code == 200 and "JupyterLab" in lab.text, (
        [(h.status_code, h.url) for h in lab.history],
        lab.status_code,
        lab.text[:300],
        journal(browser.node, "portal-proxy", 20),
    )
    scopes = [f"access:servers!user={USER}"]
    r = client.api("POST", f"/users/{USER}/tokens",
                   json={"scopes": scopes, "note": "site test", "expires_in": 900})  # fmt: skip
    assert r.status_code == 201, r.text
    browser.token, browser.alice = r.json()["token"], client
    cell = "import socket; print(6 * 7, socket.gethostname())"
    status, printed = run_cell(client.url(f"/user/{USER}/"), browser.token, cell)
    assert status == "ok", printed
    answer, host = printed.split()
    assert answer == "42" and host != NAME  # on a compute node


def run_cell(server_url, token, code):
    """``kernelcells.run_in_session``, in a loop of its own on a thread of
    its own: in the whole suite another test's event loop may be running
    in this thread (pytest-asyncio's session loop), where asyncio.run fails."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        cell = kernelcells.run_in_session(server_url, token, code)
        return pool.submit(asyncio.run, cell).result()


def test_the_hub_killed_runs_again_within_10_s_and_the_session_still_works(browser):
    node = browser.node
    pid = node.run(["systemctl", "show", "-p", "MainPID", "--value", "portal-hub"]).stdout.strip()
    assert pid.isdigit() and pid != "0"
    began = time.monotonic()
    node.run(["systemctl", "kill", "-s", "KILL", "portal-hub"])
    # the hub's API, through nginx and the proxy
    deadline = began + 30
    while time.monotonic() < deadline:
        try:
            if browser.get("/hub/api/").status_code == 200:
                new = node.run(["systemctl", "show", "-p", "MainPID", "--value",
                                "portal-hub"]).stdout.strip()  # fmt: skip
                if new not in ("0", pid):
                    break
        except requests.RequestException:
            pass
        time.sleep(0.2)
    took = time.monotonic() - began
    FIGURES["SIGKILL to the hub answering"] = f"{took:.1f} s"
    restarts = node.run(["systemctl", "show", "-p", "NRestarts", "--value", "portal-hub"]).stdout
    assert restarts.strip() == "1"
    assert took < 10, f"the hub answered {took:.1f} s after SIGKILL\n{journal(node, 'portal-hub')}"
    # the session kept running, and the hub found it again
    client = browser.alice
    assert client.wait_ready(USER, timeout=60)
    status, printed = run_cell(client.url(f"/user/{USER}/"), browser.token, "print(7 * 6)")
    assert (status, printed) == ("ok", "42")
    assert [job[1:] for job in our_jobs()] == [[USER, "RUNNING"]]


def test_the_session_stops_and_its_job_ends(browser):
    client = browser.alice
    r = client.api("DELETE", f"/users/{USER}/server")
    assert r.status_code in (202, 204), r.text
    client.wait_stopped(USER, timeout=60)
    deadline = time.monotonic() + 30
    while our_jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert our_jobs() == []


def test_the_sites_packages_files_and_services_are_as_before(browser):
    after = snapshot(browser.node)
    assert differences(browser.before, after) == []
    assert {"portal-hub.service", "portal-proxy.service"} <= set(after["running"])


def test_portal_uninstall_removes_only_the_portals_paths(browser):
    node = browser.node
    done = browser.portal("uninstall", "--purge", env=(f"PORTAL_CONFIG={SITE_TOML}",))
    FIGURES["portal uninstall"] = [x for x in done.stderr.splitlines() if x.startswith("[portal]")]
    active = node.run(["systemctl", "is-active", "portal-hub"], check=False).stdout.strip()
    assert active != "active"
    assert differences(browser.before, snapshot(node)) == []
    now = listing(node, "/etc", "/var/lib", "/usr/local")
    assert steady(now - browser.before_paths) == set()
    assert steady(browser.before_paths - now) == set()


def test_make_purge_with_state_dir_var_lib_jupyterhub_keeps_var_lib(browser):
    node = browser.node
    ldap = site_settings.load()["ldap"]
    other = f"{ETC_PORTAL}/portal-jupyterhub.toml"
    node.write(other, site_settings_toml(browser.address, socket.gethostname(),
                                         ldap["server_port"], "/var/lib/jupyterhub"))  # fmt: skip
    env = (f"PORTAL_CONFIG={other}",)
    browser.portal("setup", "--no-units", "--no-check", env=env)
    assert node.run(["test", "-d", "/var/lib/jupyterhub"], check=False).returncode == 0
    before = listing(node, "/var/lib", "/etc", "/usr/local")
    purge = node.run(["env", *env, f"PYTHONPATH={REPO}", "python3", "-P", "-m", "deploy.purge",
                      "files"], timeout=120)  # fmt: skip
    FIGURES["make purge (files)"] = (purge.stdout + purge.stderr).strip().splitlines()
    after = listing(node, "/var/lib", "/etc", "/usr/local")
    gone = {p.split(" ", 1)[1] for p in before - after}
    own = ("/var/lib/jupyterhub", "/var/lib/portal", "/etc/sudoers.d/portal",
           "/etc/portal/setup.json", "/etc/portal/extend.d", "/usr/local/libexec")  # fmt: skip
    assert all(p.startswith(own) for p in gone), sorted(p for p in gone if not p.startswith(own))
    assert "/var/lib/jupyterhub" in gone
    # /var/lib keeps everything else, and the site's files are as before
    assert node.run(["test", "-d", "/var/lib"], check=False).returncode == 0
    assert steady(browser.before_paths - after) == set()
    node.run(["rm", "-f", other])
    assert differences(browser.before, snapshot(node)) == []


def test_zz_figures(browser):
    """What the journey measured (shown with pytest -s)."""
    print("\n---- the site journey's figures ----", file=sys.stderr)
    for key, value in FIGURES.items():
        if key == "security":
            for unit, text in value.items():
                score = SECURITY.search(text)
                print(f"systemd-analyze security {unit}: {score.group(2) if score else text[-200:]}"
                      f" {score.group(3) if score else ''}", file=sys.stderr)  # fmt: skip
        elif isinstance(value, list):
            print(f"{key}:", *value, sep="\n  ", file=sys.stderr)
        else:
            print(f"{key}: {value}", file=sys.stderr)
