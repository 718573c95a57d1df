"""What a site does to put the portal on its login node, and how a test
then uses it through the site's web server: shared by the site journeys
(tests/site/test_site_install.py on a login node joined to the demo,
tests/site/test_foreign_site.py on a cluster the portal did not build).

The host's side: the dsportal wheel built from this checkout (DIST), its
dependencies' wheels (a cache under CACHE keyed by
deploy/requirements-hub.txt), a small CA and a web certificate. The
machine's side: configurable-http-proxy copied from this host, nginx on
443 in front of the portal's proxy, ``pip install`` of the wheel into a new
venv. The client's side: the public name resolved to the machine
(``Resolved``), the hub's _xsrf pinned, a cell run in a session.
"""

import asyncio
import concurrent.futures
import hashlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import requests

from tests.site.join import REPO
from tests.site.machine import CACHE, STATE, MachineError
from tests.support import kernelcells

# The built dsportal wheel (each run anew) and its dependencies' wheels (a
# cache keyed by deploy/requirements-hub.txt), both seen read-only inside.
DIST = STATE.parent / "dist"
REQUIREMENTS = REPO / "deploy" / "requirements-hub.txt"
HUB_PYTHON = "/opt/portal/envs/hub/bin/python"
# What a site installs before the portal: Node.js from Debian, for
# configurable-http-proxy (copied from this host: npm is not reachable inside).
CHP_ON_HOST = Path("/usr/lib/node_modules/configurable-http-proxy")
CHP_IN_MACHINE = "/usr/local/lib/node_modules/configurable-http-proxy"
NGINX_TLS = "/etc/nginx/tls"


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


def nginx_site(public, port, tls_dir=NGINX_TLS, who="tests/site"):
    """The site's nginx server in front of the portal's proxy on loopback
    ``port``: TLS on 443 for ``public`` and every name under it (the users'
    hosts), the certificate ``tls_dir/PUBLIC.crt``, websockets passed on.

    >>> text = nginx_site("portal.example", 8100)
    >>> "server_name portal.example *.portal.example;" in text
    True
    >>> "proxy_pass http://127.0.0.1:8100;" in text
    True
    """
    return f"""# The site's web server in front of the portal ({who})
map $http_upgrade $connection_upgrade {{
    default upgrade;
    ''      close;
}}
server {{
    listen 443 ssl;
    server_name {public} *.{public};
    ssl_certificate {tls_dir}/{public}.crt;
    ssl_certificate_key {tls_dir}/{public}.key;
    location / {{
        proxy_pass http://127.0.0.1:{port};
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


def _openssl(folder, *args):
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def issue_certificate(folder, name, wildcard=True, days=2):
    """A certificate for ``name`` (and ``*.name``) signed by the CA in
    ``folder`` (ca.crt, ca.key): NAME.crt and NAME.key there."""
    _openssl(folder, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
             f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
    names = f"DNS:{name}" + (f",DNS:*.{name}" if wildcard else "")
    (Path(folder) / f"{name}.ext").write_text(
        f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", str(days), "-extfile", f"{name}.ext",
             "-out", f"{name}.crt")  # fmt: skip


def make_ca(folder, name, subject="/CN=Site test CA"):
    """A small CA and a certificate for ``name`` and ``*.name`` signed by it
    (the site's own web certificate), in ``folder``: ca.crt, NAME.crt, NAME.key."""
    folder = Path(folder)
    _openssl(folder, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             subject, "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    issue_certificate(folder, name)  # the hub's host and the users' (NAME.HOST)
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


def install_chp(node):
    """configurable-http-proxy in the machine's /usr/local, from this host's."""
    shutil.copytree(CHP_ON_HOST, node.root / CHP_IN_MACHINE.lstrip("/"), symlinks=True)
    node.run(["ln", "-sf", f"{CHP_IN_MACHINE}/bin/configurable-http-proxy",
              "/usr/local/bin/configurable-http-proxy"])  # fmt: skip


def install_nginx_site(node, public, port, ca_folder, who="tests/site"):
    """nginx on 443 for ``public`` with its certificate from ``ca_folder``
    (make_ca's), in front of the portal's proxy on loopback ``port``."""
    node.run(["mkdir", "-p", NGINX_TLS])
    node.write(f"{NGINX_TLS}/{public}.crt", (Path(ca_folder) / f"{public}.crt").read_text())
    node.write(f"{NGINX_TLS}/{public}.key", (Path(ca_folder) / f"{public}.key").read_text(),
               mode="0600")  # fmt: skip
    node.write("/etc/nginx/sites-available/portal", nginx_site(public, port, who=who))
    node.run(["ln", "-sf", "/etc/nginx/sites-available/portal", "/etc/nginx/sites-enabled/"])
    node.run(["nginx", "-t"])
    node.run(["systemctl", "reload-or-restart", "nginx"])


def pip_install(node, venv, deps, requirement="dsportal"):
    """The wheel in DIST installed with pip into a new venv ``venv``, from
    the folders the machine sees (no index); the seconds it took.
    ``requirement``: with extras, for example ``dsportal[postgresql]``."""
    node.run(["python3", "-m", "venv", venv])
    began = time.monotonic()
    node.run([f"{venv}/bin/pip", "install", "--no-index", "--find-links", str(DIST),
              "--find-links", str(deps), "--quiet", "--no-cache-dir", requirement],
             timeout=600)  # fmt: skip
    return time.monotonic() - began


def journal(node, unit, lines=60):
    return node.run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager"], check=False).stdout


# ---------------------------------------------------------------- the client's side


def wait_answering(site, path="/hub/login", timeout=60):
    """Seconds until ``path`` answers 200 through nginx (``site.get``)."""
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


def pin_xsrf(client, public):
    """HubClient's API calls with the hub's latest _xsrf cookie in their
    header: the hub's own (on ``public``, not on a session's host), whatever its path."""
    ours = [c for c in client.session.cookies if c.name == "_xsrf" and c.domain == public]
    assert ours, [(c.name, c.domain, c.path) for c in client.session.cookies]
    token = ours[-1].value

    def api(method, path, **kwargs):
        headers = {**kwargs.pop("headers", {}), "X-XSRFToken": token}
        kwargs.setdefault("timeout", 30)
        url = client.url("/hub/api" + path)
        return client.session.request(method, url, headers=headers, **kwargs)

    client.api = api


def run_cell(server_url, token, code):
    """``kernelcells.run_in_session``, in a loop of its own on a thread of
    its own: in the whole suite another test's event loop may be running
    in this thread (pytest-asyncio's session loop), where asyncio.run fails."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        cell = kernelcells.run_in_session(server_url, token, code)
        return pool.submit(asyncio.run, cell).result()
