"""The two hubs of the benchmark, each with its own proxy, ports, state and job name.

The same approach as the tests' hub (``tests/support/testhub.py``): a settings file
(``PORTAL_CONFIG``, readable by the hub's account) that moves the hub to its
own ports, database and Slurm job name, so the demo hub (:8000) and the test
hub (:18000) are left alone.

The portal hub is started by ``deploy/hub.sh start``, exactly as the portal
runs: the hub as ``[hub] user`` and the proxy as ``[hub] proxy_user``, each with
a clean environment, HTTPS on the public port, the proxy's token in the state
folder only. For the lightweight sessions of the load figures, jupyterhub gets
extra options through ``hub.sh start OPTION...``.

The stock-batchspawner hub runs as root, since batchspawner runs sbatch with
``sudo -E`` (the session's environment travels in sbatch's), which the portal
account's sudoers rule refuses. Its proxy is started by ``deploy/hub.sh proxy``,
as the portal's: HTTPS, as ``[hub] proxy_user``, its token in the state folder.
Inside the cluster it speaks plain HTTP (``[tls] internal = false``): stock
batchspawner cannot hand its sessions a certificate. The portal hub speaks
mutual TLS there, as the portal runs; the benchmark reaches its proxy's API
and its sessions directly with the hub's internal certificate.
"""

import ssl
import subprocess
import time
from pathlib import Path

import requests

from portal import settings as site_settings
from tests.support.hubsettings import (
    CA_CERT,
    IMAGE_PROFILES,
    PYTORCH_PROFILE,
    fresh_state,
    hub_settings,
    write_settings,
)

REPO = Path(__file__).resolve().parents[1]
HUB_SH = REPO / "deploy" / "hub.sh"
HUB_ENV = Path("/opt/portal/envs/hub")
LITE_SESSION = REPO / "bench" / "lite_session.py"
# The stock hub's whole environment (deploy/hub.sh clean_env gives the portal's).
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}

PROFILES = (
    PYTORCH_PROFILE
    + """
[[profiles]]
name = "tensorflow"
display_name = "TensorFlow"
environment = "tensorflow"
max_gpus = 4

[[profiles]]
name = "mxnet"
display_name = "MXNet"
environment = "mxnet"
max_gpus = 2

[[profiles]]
name = "lite"
display_name = "Load test"
description = "One GPU, one core, 1 GB: the sessions of the Slurm load figures"
environment = "pytorch"
max_gpus = 1
cores_per_gpu = 1
mem_per_gpu_gb = 1
"""
    + IMAGE_PROFILES
)


class Hub:
    """A hub and its proxy on PORT (PORT+81: the hub's API, PORT+1: the proxy's).

    ``url`` is the public, HTTPS side (the proxy); ``localhost_url`` the same for
    clients that keep no cookies of an IP host (aiohttp); ``api_url`` the hub's
    own API, as the sessions reach it (over TLS with ``internal_tls``)."""

    internal_tls = True  # [tls] internal: mutual TLS inside the cluster

    def __init__(self, name, port, job_name, spawner_class):
        self.name = name
        self.port = port
        self.job_name = job_name
        self.spawner_class = spawner_class  # for --Class.trait options
        self.state = Path(f"/var/lib/portal/{name}-hub")
        self.settings_file = Path(f"/var/lib/portal/{name}-settings.toml")
        self.url = f"https://127.0.0.1:{port}"
        self.localhost_url = f"https://localhost:{port}"
        scheme = "https" if self.internal_tls else "http"
        self.api_url = f"{scheme}://{site_settings.hub_api_ip(site_settings.load())}:{port + 81}"
        self.proxy_token = ""

    def settings_text(self):
        internal = f"\n[tls]\ninternal = {str(self.internal_tls).lower()}\n"
        # sessions on the hub's own origin: the stock hub's proxy routes by path
        return hub_settings(self.port, self.state, self.job_name, domain="") + internal + PROFILES

    @property
    def internal_certs(self):
        return self.state / "internal-ssl"

    def internal_cert(self):
        """``(cert, key)`` of the hub's internal certificate, and the CAs it
        trusts: how the benchmark reaches the proxy's API and the sessions
        directly, as the hub does; None without internal TLS."""
        if not self.internal_tls:
            return None
        hub = self.internal_certs / "hub-internal" / "hub-internal"
        return (f"{hub}.crt", f"{hub}.key"), str(self.internal_certs / "hub-ca_trust.crt")

    def curl_tls(self):
        """curl's options to reach a session directly as the hub does."""
        if not self.internal_tls:
            return ()
        (cert, key), trust = self.internal_cert()
        return ("--cacert", trust, "--cert", cert, "--key", key)

    def lite_options(self):
        """jupyterhub options for ``lite``: sessions are ``bench/lite_session.py``."""
        return [f"--{self.spawner_class}.batchspawner_singleuser_cmd={LITE_SESSION}"]

    def hub_sh(self, *args):
        """``deploy/hub.sh ARGS`` with this hub's settings; raises with its output."""
        env = {**CLEAN_ENV, "PORTAL_CONFIG": str(self.settings_file)}
        result = subprocess.run(
            ["bash", str(HUB_SH), *args], env=env, capture_output=True, text=True
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr)[-3000:]
            raise RuntimeError(f"deploy/hub.sh {args[0]} of the {self.name} hub failed:\n{output}")

    def start(self, lite=False):
        """A fresh hub (new database); ``lite``: sessions are ``bench/lite_session.py``."""
        self.stop()
        self.cancel_jobs()
        write_settings(self.settings_file, self.settings_text())
        if self.state.exists():
            fresh_state(self.state)
        self._start(self.lite_options() if lite else [])
        self.proxy_token = (self.state / "proxy_token").read_text().strip()
        return self

    def _start(self, options):
        self.hub_sh("start", *options)

    def stop(self):
        if self.settings_file.exists():
            self.hub_sh("stop")

    def cancel_jobs(self, user=None):
        argv = ["scancel", "--name", f"{self.job_name},{self.job_name}-notebook"]
        if user:
            argv += ["--user", user]
        subprocess.run(argv, check=False, capture_output=True)

    def jobs(self, state=None):
        argv = ["squeue", "-h", "--name", self.job_name, "-o", "%i %u %T"]
        if state:
            argv += ["-t", state]
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        return [line.split() for line in out.splitlines() if line.strip()]

    def route_target(self, name):
        """Where the proxy sends /user/NAME/ (the server's own address), or None."""
        headers = {"Authorization": f"token {self.proxy_token}"}
        if self.internal_tls:  # its API takes the hub's certificate alone
            cert, trust = self.internal_cert()
            tls = {"cert": cert, "verify": trust}
        else:
            tls = {}
        scheme = "https" if self.internal_tls else "http"
        r = requests.get(
            f"{scheme}://127.0.0.1:{self.port + 1}/api/routes", headers=headers, timeout=10, **tls
        )
        r.raise_for_status()
        route = r.json().get(f"/user/{name}")
        return route["target"] if route else None

    def wait_no_jobs(self, timeout=120):
        deadline = time.monotonic() + timeout
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)


class StockHub(Hub):
    """The stock-batchspawner hub: its proxy by ``deploy/hub.sh proxy``, the hub
    itself run here, as root, with a clean environment."""

    config_file = REPO / "bench" / "stock_config.py"
    internal_tls = False  # its sessions could not get a certificate

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._hub = None

    def lite_options(self):
        cls = self.spawner_class  # the stock spawner's slice of the lite profile too
        return [*super().lite_options(), f"--{cls}.req_nprocs=1", f"--{cls}.req_memory=1G"]

    def _start(self, options):
        self.hub_sh("proxy")
        argv = [str(HUB_ENV / "bin" / "jupyterhub"), "-f", str(self.config_file), *options]
        env = {**CLEAN_ENV, "PORTAL_CONFIG": str(self.settings_file), "HOME": str(self.state)}
        with open(self.state / "jupyterhub.log", "ab") as log:
            self._hub = subprocess.Popen(
                argv,
                cwd=self.state,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                umask=0o077,  # as deploy/hub.sh runs the portal's
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and self._hub.poll() is None:
            try:
                r = requests.get(f"{self.url}/hub/login", timeout=5, verify=CA_CERT)
                if r.status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        self.stop()
        log = (self.state / "jupyterhub.log").read_text()[-3000:]
        raise RuntimeError(f"the {self.name} hub did not start; end of its log:\n{log}")

    def stop(self):
        if self._hub is not None:
            if self._hub.poll() is None:
                self._hub.terminate()
                try:
                    self._hub.wait(20)
                except subprocess.TimeoutExpired:
                    self._hub.kill()
                    self._hub.wait()
            self._hub = None
        super().stop()  # the proxy (hub.sh has no hub of this state to stop)


def ssl_context():
    """An ``ssl`` context that checks the portal's certificate against its CA."""
    return ssl.create_default_context(cafile=CA_CERT)


def portal_hub():
    return Hub("bench", 28000, "portal-bench", "PortalSpawner")


def stock_hub():
    return StockHub("stock", 29000, "portal-stock", "SlurmSpawner")
