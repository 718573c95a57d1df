"""The two hubs of the benchmark, each with its own proxy, ports, state and job name.

The same approach as the tests' hub (``tests/conftest.py``): a settings file
(``PORTAL_CONFIG``) that moves the hub to its own ports, database and Slurm job
name, so the demo hub (:8000) and the test hub (:18000) are left alone. The
processes are started here rather than by ``deploy/hub.sh`` so that extra
command-line options (the lightweight sessions of the load figures) can be
given; what is started is what ``deploy/hub.sh start`` starts.
"""

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import requests

from tests.hubsettings import fresh_state, hub_settings

REPO = Path(__file__).resolve().parents[1]
HUB_ENV = Path("/opt/portal/envs/hub")
JUPYTER_ENV = Path("/opt/portal/envs/jupyter")
LITE_SESSION = REPO / "bench" / "lite_session.py"

PROFILES = """
[[profiles]]
name = "pytorch"
display_name = "PyTorch"
environment = "pytorch"
max_gpus = 4

[[profiles]]
name = "lite"
display_name = "Load test"
description = "One GPU, one core, 1 GB: the sessions of the Slurm load figures"
environment = "pytorch"
max_gpus = 1
cores_per_gpu = 1
mem_per_gpu_gb = 1
"""


class Hub:
    """A hub and its proxy on PORT (PORT+81: the hub's API, PORT+1: the proxy's)."""

    def __init__(self, name, port, job_name, config_file, spawner_class):
        self.name = name
        self.port = port
        self.job_name = job_name
        self.config_file = config_file
        self.spawner_class = spawner_class  # for --Class.trait options
        self.state = Path(f"/var/lib/portal/{name}-hub")
        self.url = f"http://127.0.0.1:{port}"
        self.api_url = f"http://127.0.0.1:{port + 81}"
        self.proxy_token = ""
        self._procs = []

    def settings_text(self):
        return hub_settings(self.port, self.state, self.job_name) + PROFILES

    def start(self, lite=False):
        """A fresh hub (new database); ``lite``: sessions are ``bench/lite_session.py``."""
        self.stop()
        self.cancel_jobs()
        self.state.mkdir(mode=0o700, parents=True, exist_ok=True)
        fresh_state(self.state)
        settings = self.state / "portal.toml"
        settings.write_text(self.settings_text())
        token = self.proxy_token = secrets.token_hex(32)
        env = {**os.environ, "PORTAL_CONFIG": str(settings), "CONFIGPROXY_AUTH_TOKEN": token}
        proxy = [
            shutil.which("configurable-http-proxy"),
            "--ip", "127.0.0.1", "--port", str(self.port),
            "--api-ip", "127.0.0.1", "--api-port", str(self.port + 1),
            "--default-target", self.api_url,
            "--error-target", f"{self.api_url}/hub/error",
        ]  # fmt: skip
        hub = [str(HUB_ENV / "bin" / "jupyterhub"), "-f", str(self.config_file)]
        if lite:
            cls = self.spawner_class
            hub += [f"--{cls}.batchspawner_singleuser_cmd={LITE_SESSION}"]
            if cls == "SlurmSpawner":  # the stock spawner's slice of the lite profile
                hub += [f"--{cls}.req_nprocs=1", f"--{cls}.req_memory=1G"]
        for argv, log in ((proxy, "proxy.log"), (hub, "jupyterhub.log")):
            with open(self.state / log, "ab") as out:
                self._procs.append(
                    subprocess.Popen(
                        argv,
                        cwd=self.state,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self._procs):
                break
            try:
                if requests.get(f"{self.url}/hub/login", timeout=5).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.3)
        self.stop()
        log = (self.state / "jupyterhub.log").read_text()[-3000:]
        raise RuntimeError(f"the {self.name} hub did not start; end of its log:\n{log}")

    def stop(self):
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._procs = []

    def cancel_jobs(self, user=None):
        argv = ["scancel", "--name", self.job_name]
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
        r = requests.get(
            f"http://127.0.0.1:{self.port + 1}/api/routes",
            headers={"Authorization": f"token {self.proxy_token}"},
            timeout=10,
        )
        r.raise_for_status()
        route = r.json().get(f"/user/{name}")
        return route["target"] if route else None

    def wait_no_jobs(self, timeout=120):
        deadline = time.monotonic() + timeout
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)


def portal_hub():
    return Hub("bench", 28000, "portal-bench", REPO / "jupyterhub_config.py", "PortalSpawner")


def stock_hub():
    return Hub("stock", 29000, "portal-stock", REPO / "bench" / "stock_config.py", "SlurmSpawner")
