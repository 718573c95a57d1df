"""Where a portal spawn's time goes: one timeline from the hub's log and the job's.

The spawner logs ``Spawn timeline of NAME, job ID, began at WALL: EVENT T s, ...``
once the server answers (``spawners.spawner.PortalSpawner.start``), and the batch
script writes ``portal: timeline EVENT EPOCH`` marks into the job's log, where
Jupyter Server's own lines follow (``... is running at:``). Every mark becomes
seconds since the spawner's ``start`` began, on one clock (the login node and the
compute nodes share this host's); ``request``, the spawn request's arrival at
the hub (its answer's time in the hub's log, less tornado's request time), is
the one before it.
"""

import re
from datetime import datetime
from pathlib import Path

HUB_LINE = re.compile(r"Spawn timeline of (\S+), job (\d+), began at ([0-9.]+): (.*)$")
HUB_EVENT = re.compile(r"([a-zA-Z ]+) ([0-9.]+) s")
JOB_MARK = re.compile(r"^portal: timeline (\w+) (\d+\.\d+)$", re.M)
JUPYTER_UP = re.compile(
    r"^\[I (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) ServerApp\] Jupyter Server .* is running at",
    re.M,
)

HUB_STAMP = r"^\[I (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) JupyterHub \S+\] "
# the spawn request's own answer (tornado's request time): when it arrived,
# before the spawner's start (negative)
REQUEST = r"20[12] POST /hub/api/users/{name}/server\S* \(.*\) ([0-9.]+)ms$"
# JupyterHub's own lines after the spawner's start returned: its check that
# the server is up (``Server.wait_up``), then the proxy's route asked for
HUB_AFTER = {
    "hub saw it up": "User {name} took [0-9.]+ seconds to start",
    "route asked": "Adding user {name} to proxy",
}

# the order a spawn goes through, for printing
ORDER = (
    "request", "submitted", "script", "activate", "exec", "port reported", "running seen",
    "GPU indices", "jupyter listening", "answered", "hub saw it up", "route asked",
    "ready through the proxy",
)  # fmt: skip


def spawn_timeline(hub_log, home, log_dir=".portal/logs", name=None):
    """``{event: seconds}`` of the last spawn in ``hub_log`` (of ``name``), with
    the job's marks from its log in ``home``/``log_dir``; {} if none is logged."""
    lines = Path(hub_log).read_text(errors="replace").splitlines()
    match = None
    for at in range(len(lines) - 1, -1, -1):
        match = HUB_LINE.search(lines[at])
        if match and (name is None or match.group(1) == name):
            break
        match = None
    if not match:
        return {}
    user, job_id, began, events = match.groups()
    began = float(began)
    timeline = {event.strip(): float(t) for event, t in HUB_EVENT.findall(events)}
    for event, pattern in HUB_AFTER.items():
        wanted = re.compile(HUB_STAMP + pattern.format(name=re.escape(user)))
        for line in lines[at + 1 : at + 200]:
            found = wanted.search(line)
            if found:
                timeline[event] = _stamp(found.group(1)) - began
                break
    request = re.compile(HUB_STAMP + REQUEST.format(name=re.escape(user)))
    for line in lines[at + 1 : at + 200]:
        found = request.search(line)
        if found:
            timeline["request"] = _stamp(found.group(1)) - float(found.group(2)) / 1000 - began
            break
    job_log = Path(home) / log_dir / f"jupyter-{job_id}.log"
    try:
        text = job_log.read_text(errors="replace")
    except OSError:
        return timeline
    for event, epoch in JOB_MARK.findall(text):
        timeline[event] = float(epoch) - began
    up = JUPYTER_UP.search(text)
    if up:
        timeline["jupyter listening"] = _stamp(up.group(1)) - began
    return timeline


def _stamp(text):
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def describe(timeline):
    """One line: the events in spawn order with their seconds."""
    known = [e for e in ORDER if e in timeline] + [e for e in timeline if e not in ORDER]
    return ", ".join(f"{event} {timeline[event]:.2f}" for event in known)
