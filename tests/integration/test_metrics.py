"""The portal's Prometheus series (issue 28), on the test hub: /hub/metrics
lists the portal_ series beside JupyterHub's, to a portal admin and to the
monitoring token (read:metrics alone), never to a user; a spawn is counted
by profile; and a real Prometheus (Debian's), configured as
deploy/prometheus_setup.py configures the login node's, scrapes them with
that token and answers for them on its query API."""

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

from deploy import prometheus_setup
from portal import settings as site_settings
from portal.store import REFUSALS_SECONDS
from tests.support.hubsettings import CA_CERT
from tests.support.testhub import SETTINGS_FILE

PROMETHEUS_PORT = 19090


def series(text):
    """The names of the portal_ series in a scrape (one per family)."""
    names = set()
    for line in text.splitlines():
        match = re.match(r"^# TYPE (portal_\w+) ", line)
        if match:
            names.add(match.group(1))
    return names


def refusals(text, reason):
    match = re.search(rf'^portal_refused_requests_total\{{reason="{reason}"\}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def monitoring_token():
    return site_settings.metrics_token_file(site_settings.load(str(SETTINGS_FILE))).read_text()


def test_the_portals_series_are_served_to_admins_and_the_monitoring_token_only(portal, hub):
    carol = portal("carol").client  # a portal admin
    r = carol.session.get(carol.url("/hub/metrics"), timeout=30)
    assert r.status_code == 200, r.text[:200]
    names = series(r.text)
    assert len(names) >= 5, names
    assert {"portal_spawn_duration_seconds", "portal_sessions", "portal_poll_age_seconds",
            "portal_slurm_command_seconds", "portal_gpus_held"} <= names  # fmt: skip
    assert "jupyterhub_running_servers" in r.text  # JupyterHub's own beside them
    assert "alice" not in r.text and "bob" not in r.text  # no user's name in any series

    alice = portal("alice").client
    assert alice.session.get(alice.url("/hub/metrics"), timeout=30).status_code == 403
    # a refused request is counted by its reason
    r = alice.api("POST", "/users/alice/server", json={"profile": "pytorch", "gpus": 99})
    assert r.status_code == 400, r.text
    text = carol.session.get(carol.url("/hub/metrics"), timeout=30).text
    assert re.search(r'^portal_refused_requests_total\{reason="options"\} [1-9]', text, re.M)
    # so is one refused by the admin service, a process of its own
    before = refusals(text, "notebook_job")
    r = portal("alice").send("POST", "api/jobs", json={"notebook": "../x.ipynb", "gpus": 1})
    assert r.status_code == 400, r.text
    deadline = time.monotonic() + REFUSALS_SECONDS + 10  # the service adds it soon after
    while refusals(carol.session.get(carol.url("/hub/metrics"), timeout=30).text,
                   "notebook_job") == before and time.monotonic() < deadline:  # fmt: skip
        time.sleep(0.5)
    text = carol.session.get(carol.url("/hub/metrics"), timeout=30).text
    assert refusals(text, "notebook_job") == before + 1
    headers = {"Authorization": f"Bearer {monitoring_token().strip()}"}
    r = requests.get(f"{hub}/hub/metrics", headers=headers, verify=CA_CERT, timeout=30)
    assert r.status_code == 200 and series(r.text) >= names
    # the monitoring token reads the metrics and nothing else
    r = requests.get(f"{hub}/hub/api/users", headers=headers, verify=CA_CERT, timeout=30)
    assert r.status_code == 403


@pytest.fixture
def prometheus(hub):
    """Debian's Prometheus on 127.0.0.1:19090, as its own account, scraping
    the test hub every second with the monitoring token."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed (deploy/packages.sh installs it)"
    settings = site_settings.load(str(SETTINGS_FILE))
    settings["metrics"]["scrape_seconds"] = 1.0
    folder = Path(tempfile.mkdtemp(prefix="portal-prometheus-"))  # its account enters it
    folder.chmod(0o755)
    token = folder / "token"
    token.write_text(monitoring_token())
    config = folder / "prometheus.yml"
    config.write_text(prometheus_setup.prometheus_yml(settings, token_file=token))
    subprocess.run(["chown", "-R", "prometheus:prometheus", str(folder)], check=True)
    proc = subprocess.Popen(
        ["setpriv", "--reuid=prometheus", "--regid=prometheus", "--init-groups", binary,
         f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}"],
        stdout=subprocess.DEVNULL, stderr=(folder / "log").open("w"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{PROMETHEUS_PORT}/-/ready", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, Path(folder / "log").read_text()[-2000:]
            time.sleep(0.5)
        yield f"http://127.0.0.1:{PROMETHEUS_PORT}"
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


def query(prometheus, expression):
    r = requests.get(f"{prometheus}/api/v1/query", params={"query": expression}, timeout=30)
    r.raise_for_status()
    return r.json()["data"]["result"]


def test_a_spawn_is_counted_and_prometheus_answers_for_it(session, portal, prometheus):
    session("alice", profile="pytorch", gpus=1)
    carol = portal("carol").client
    text = carol.session.get(carol.url("/hub/metrics"), timeout=30).text
    count = re.search(r'^portal_spawn_duration_seconds_count\{profile="pytorch"\} (\S+)$', text,
                      re.M)  # fmt: skip
    assert count and float(count.group(1)) >= 1, text[:2000]
    # no GPU model or account asked: Slurm's defaults, ""
    running = r'^portal_sessions\{account="",gpu_model="",profile="pytorch",state="running"\} 1\.0$'
    assert re.search(running, text, re.M)

    deadline = time.monotonic() + 60
    while not (
        found := query(prometheus, 'portal_spawn_duration_seconds_count{profile="pytorch"}')
    ):
        targets = requests.get(f"{prometheus}/api/v1/targets", timeout=30).json()
        assert time.monotonic() < deadline, targets
        time.sleep(1)
    assert float(found[0]["value"][1]) >= 1
    up = query(prometheus, 'up{job="portal-hub"}')
    assert up and up[0]["value"][1] == "1"
