"""Is the portal up, part by part (issue 28): the same checks behind the admin
service's ``GET /services/portal/health`` (JSON for monitors, a page for
people; HTTP 503 naming what is down) and ``make health`` (``python -m
portal.health``: one line per part, exit status 0, or 1 naming the parts
that are down).

Parts, each ``ok`` with what it saw or down with why:

- ``login page``: the hub's login page through the proxy, its certificate
  checked against [tls] ca_cert;
- ``ldap``: a bind to the directory with its TLS ([ldap] tls_strategy:
  StartTLS first), certificate checked;
- ``slurmctld``: ``scontrol ping``;
- ``slurmdbd``: ``sacctmgr show cluster`` (it answers through slurmdbd);
- ``shared poll``: the hub's poll wrote what it sees within three of its
  intervals (the cluster snapshot's age);
- ``nodes``: each node's state, as that poll saw it; down when no node of a
  partition can run anything;
- ``proxy routes``: the hub's last comparison of the proxy's routes with
  its running sessions (``spawners.route_check``, in ``[hub]
  state_dir/proxy-routes.json``): down when a running session has no route
  or a route leads to no running session (in two checks in a row), when the
  proxy's table could not be read, or when the hub has not checked within
  three of its intervals (with ``route_check_seconds = 0`` the hub checks
  only as it starts, and the part is information);
- ``free GPUs``: per partition (information: a full cluster is not down);
- ``disk``: free space where the hub keeps its state (down under 1 GB).

Nothing of a user's is in the answer. The service tells an anonymous
visitor up or down alone (``portal.service.health``).
"""

import asyncio
import json
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from portal import settings as site_settings
from portal.slurm import commands as slurm
from portal.slurm.model import snapshot_from_json
from portal.slurm.parse import SlurmError

MIN_FREE_BYTES = 2**30
TIMEOUT = 10.0


@dataclass
class Part:
    name: str
    ok: bool
    detail: str
    critical: bool = True  # a down part makes the portal down (503)


def _fetch(url, cafile, timeout):
    context = None
    if url.startswith("https"):
        # the system's CAs (a site's web server in front, [hub] public_url,
        # may hold a public certificate) and the portal's own
        context = ssl.create_default_context()
        context.load_verify_locations(cafile=cafile)
    request = urllib.request.Request(url, headers={"User-Agent": "portal-health"})
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        return response.status, response.read(200_000).decode(errors="replace")


async def login_page(settings):
    url = site_settings.public_url(settings) + "hub/login"
    try:
        status, body = await asyncio.to_thread(_fetch, url, settings["tls"]["ca_cert"], TIMEOUT)
    except (urllib.error.URLError, OSError, ssl.SSLError) as e:
        return Part("login page", False, f"{url}: {getattr(e, 'reason', e)}")
    ok = status == 200 and "password" in body.lower()
    return Part("login page", ok, f"{url}: HTTP {status}" + ("" if ok else ", no login form"))


def _ldap_bind(settings):
    import ldap3

    ldap = settings["ldap"]
    ca = site_settings.ldap_ca_cert(settings)
    tls = ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=ca)
    strategy = ldap["tls_strategy"]
    server = ldap3.Server(
        ldap["server_address"], port=ldap["server_port"], use_ssl=strategy == "on_connect",
        tls=tls, connect_timeout=int(TIMEOUT),
    )  # fmt: skip
    conn = ldap3.Connection(server, receive_timeout=int(TIMEOUT), raise_exceptions=True)
    try:
        conn.open()
        if strategy == "before_bind":
            conn.start_tls()
        conn.bind()
        return f"{ldap['server_address']}:{ldap['server_port']}, {strategy}, bound"
    finally:
        conn.unbind()


async def ldap_bind(settings):
    try:
        return Part("ldap", True, await asyncio.to_thread(_ldap_bind, settings))
    except Exception as e:  # noqa: BLE001 (what the directory said is the answer)
        return Part("ldap", False, f"{type(e).__name__}: {str(e)[:200]}")


async def slurmctld(settings):
    problem = slurm.missing_commands(settings["slurm"]["bin_dir"])
    if problem:
        return Part("slurmctld", False, problem)
    try:
        out = await slurm.ping(TIMEOUT, settings["slurm"]["bin_dir"])
    except SlurmError as e:
        return Part("slurmctld", False, f"does not answer ({str(e)[:300]})")
    return Part("slurmctld", "is UP" in out, out.splitlines()[0][:200] if out else "no answer")


async def slurmdbd(settings):
    try:
        out = await slurm.clusters(TIMEOUT, settings["slurm"]["bin_dir"])
    except SlurmError as e:
        return Part("slurmdbd", False, str(e)[:300])
    return Part("slurmdbd", bool(out.strip()), f"clusters: {', '.join(out.split()) or 'none'}")


def poll_parts(settings, now=None):
    """The shared poll's age, the nodes it saw and their free GPUs."""
    path = Path(site_settings.cluster_snapshot(settings))
    limit = 3 * max(settings["slurm"]["cluster_interval"], settings["slurm"]["poll_interval"])
    try:
        written, partitions, _, errors = snapshot_from_json(path.read_text())
    except (OSError, ValueError, KeyError) as e:
        return [Part("shared poll", False, f"{path}: {e}")]
    age = ((now or datetime.now()) - written).total_seconds()
    said = f"{age:.0f} s ago (at most {limit:.0f})"
    said += f"; {errors['jobs']}" if errors["jobs"] else ""
    poll = Part("shared poll", age <= limit and not errors["jobs"], said)
    states, empty, free = [], [], []
    for name, partition in sorted(partitions.items()):
        nodes = partition.nodes
        states += [f"{n.name} {n.state}" for n in nodes if f"{n.name} {n.state}" not in states]
        if not any(n.available for n in nodes):
            empty.append(name)
        gpus = sum(max(0, n.gpus - n.gpus_used) for n in nodes if n.available)
        free.append(f"{name} {gpus} of {sum(n.gpus for n in nodes)}")
    nodes = Part(
        "nodes", not empty,
        ", ".join(states) + (f"; no node can run partition {', '.join(empty)}" if empty else ""),
    )  # fmt: skip
    return [poll, nodes, Part("free GPUs", True, ", ".join(free) or "none", critical=False)]


ROUTES_FILE = "proxy-routes.json"  # spawners.route_check's


def proxy_routes(settings, now=None):
    """The hub's last check of the proxy's routes (counts of mismatches only:
    served without a login)."""
    path = Path(settings["hub"]["state_dir"]) / ROUTES_FILE
    try:
        seen = json.loads(path.read_text())
        checked = datetime.fromisoformat(seen["checked_at"])
        interval = float(seen["interval"])
    except FileNotFoundError:
        return Part("proxy routes", False, "the hub has not checked them yet")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return Part("proxy routes", False, f"{path}: {e}")
    age = ((now or datetime.now(checked.tzinfo)) - checked).total_seconds()
    periodic = interval > 0  # [metrics] route_check_seconds = 0: only as the hub starts
    limit = 3 * max(interval, 1.0)
    if periodic and age > limit:
        return Part("proxy routes", False, f"the hub's last check is {age:.0f} s old "
                                           f"(at most {limit:.0f})")  # fmt: skip
    if seen.get("error"):
        return Part("proxy routes", False, str(seen["error"])[:300], critical=periodic)
    missing, stale = int(seen.get("missing", 0)), int(seen.get("stale", 0))
    detail = (
        f"{missing} running session(s) without a route, {stale} route(s) to no running "
        f"session; checked {age:.0f} s ago"
    )
    if not periodic:
        detail += " (only as the hub started: [metrics] route_check_seconds = 0)"
    return Part("proxy routes", not missing and not stale, detail, critical=periodic)


def disk(settings):
    state = settings["hub"]["state_dir"]
    try:
        free = shutil.disk_usage(state).free
    except OSError as e:
        return Part("disk", False, f"{state}: {e}")
    return Part("disk", free >= MIN_FREE_BYTES, f"{free / 2**30:.1f} GB free in {state}")


async def guarded(name, check_part, settings):
    """``check_part(settings)``, or the part down with whatever it raised."""
    try:
        return await check_part(settings)
    except Exception as e:  # noqa: BLE001 (a missing command, a protocol error: said)
        return Part(name, False, f"{type(e).__name__}: {str(e)[:200]}")


async def check(settings=None):
    """Every part, checked at once: ``{"ok", "down", "parts", "checked_at"}``."""
    settings = settings or site_settings.load()
    began = time.time()
    checks = {"login page": login_page, "ldap": ldap_bind, "slurmctld": slurmctld,
              "slurmdbd": slurmdbd}  # fmt: skip
    parts = list(await asyncio.gather(*(guarded(n, f, settings) for n, f in checks.items())))
    try:
        parts += poll_parts(settings)
    except Exception as e:  # noqa: BLE001 (a snapshot no parser expected)
        parts.append(Part("shared poll", False, f"{type(e).__name__}: {str(e)[:200]}"))
    parts.append(proxy_routes(settings))
    parts.append(disk(settings))
    down = [p.name for p in parts if not p.ok and p.critical]
    return {
        "ok": not down,
        "down": down,
        "parts": [asdict(p) for p in parts],
        "checked_at": datetime.fromtimestamp(began).astimezone().isoformat(timespec="seconds"),
        "seconds": round(time.time() - began, 2),
    }


def main():
    result = asyncio.run(check())
    for part in result["parts"]:
        mark = "ok  " if part["ok"] else ("FAIL" if part["critical"] else "warn")
        print(f"{mark} {part['name']}: {part['detail']}")
    if result["down"]:
        print(f"portal: down: {', '.join(result['down'])}", file=sys.stderr)
        return 1
    print(f"portal: up ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--json"]:
        answer = asyncio.run(check())
        print(json.dumps(answer, indent=1))
        sys.exit(0 if answer["ok"] else 1)
    sys.exit(main())
