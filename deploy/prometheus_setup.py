"""The login node's Prometheus (Debian's ``prometheus``), scraping the hub's
series at /hub/metrics ([metrics] settings; issue 28). deploy/prometheus.sh
starts and stops it; this module writes its configuration and its copy of
the monitoring token::

    deploy/prometheus.sh start    # write the configuration, start or reload it
    deploy/prometheus.sh stop
    deploy/prometheus.sh status   # exit 0 if it runs and is ready, else 3

What runs, as Debian's ``prometheus`` account: ``prometheus
--config.file=/etc/portal/prometheus/prometheus.yml`` listening on
[metrics] prometheus_listen (loopback), its series in
/var/lib/portal/prometheus for [metrics] retention. It scrapes the hub
through the proxy, the portal's certificate checked against [tls] ca_cert,
with the monitoring service's token (``read:metrics`` only; the hub's copy
is [hub] state_dir/metrics-token, made by deploy/hub.sh), as a site's
Prometheus would.
"""

import shlex
import sys
from pathlib import Path
from urllib.parse import urlparse

from deploy.base import DeployError, logger, main_of, make_dir, write_if_changed
from deploy.hub_setup import read_token
from portal import settings as site_settings

log = logger("prometheus")

CONF_DIR = Path("/etc/portal/prometheus")
CONF = CONF_DIR / "prometheus.yml"
TOKEN = CONF_DIR / "token"
DATA = Path("/var/lib/portal/prometheus")
PID = Path("/run/portal/prometheus.pid")
LOG = Path("/var/log/portal/prometheus.log")
USER = "prometheus"
MARKER = "# Written by deploy/prometheus_setup.py from the portal's [metrics] settings."


def hub_target(settings):
    """``(address, TLS server name)`` the hub is scraped at: the proxy's port
    on loopback, the portal's name for its certificate.

    >>> hub_target({"hub": {"bind_url": "https://0.0.0.0:8000", "domain": "portal.localhost"}})
    ('127.0.0.1:8000', 'portal.localhost')
    """
    url = urlparse(settings["hub"]["bind_url"])
    host = url.hostname
    if host in ("0.0.0.0", "", None):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    port = url.port or (443 if url.scheme == "https" else 80)
    name = settings["hub"]["domain"] or host
    return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}"), name


def prometheus_yml(settings, token_file=TOKEN):
    """The configuration: one job, the hub's /hub/metrics."""
    target, name = hub_target(settings)
    scheme = urlparse(settings["hub"]["bind_url"]).scheme
    every = f"{float(settings['metrics']['scrape_seconds']):g}s"
    return f"""{MARKER}
global:
  scrape_interval: {every}
  evaluation_interval: {every}
scrape_configs:
  - job_name: portal-hub
    scheme: {scheme}
    metrics_path: {urlparse(settings["hub"]["bind_url"]).path.rstrip("/")}/hub/metrics
    static_configs:
      - targets: ["{target}"]
    tls_config:
      ca_file: {settings["tls"]["ca_cert"]}
      server_name: {name}
    authorization:
      type: Bearer
      credentials_file: {token_file}
"""


def daemon_argv(settings):
    metrics = settings["metrics"]
    return [
        "prometheus", f"--config.file={CONF}", f"--storage.tsdb.path={DATA}",
        f"--storage.tsdb.retention.time={metrics['retention']}",
        f"--web.listen-address={metrics['prometheus_listen']}",
    ]  # fmt: skip


def cmd_shell(settings):
    listen = settings["metrics"]["prometheus_listen"]
    lines = {
        "PROM_LISTEN": listen, "PROM_PID": str(PID), "PROM_LOG": str(LOG),
        "PROM_USER": USER, "PROM_CONF": str(CONF),
    }  # fmt: skip
    print("\n".join(f"{k}={shlex.quote(v)}" for k, v in lines.items()))
    print(f"DAEMON=({' '.join(shlex.quote(a) for a in daemon_argv(settings))})")


def cmd_conf(settings):
    """Its configuration and token (prints "changed" when either changed)."""
    hub_token = site_settings.metrics_token_file(settings)
    token = read_token(hub_token)
    if token is None:
        raise DeployError(f"no monitoring token at {hub_token}: start the hub first (hub.sh)")
    make_dir(CONF_DIR, 0o750, "root", USER)
    make_dir(DATA, 0o750, USER)
    changed = write_if_changed(TOKEN, token + "\n", 0o640, "root", USER)
    changed |= write_if_changed(CONF, prometheus_yml(settings), 0o640, "root", USER)
    if changed:
        log(f"wrote {CONF}")
        print("changed")


main = main_of({"shell": cmd_shell, "conf": cmd_conf}, log)

if __name__ == "__main__":
    sys.exit(main())
