"""TensorBoard per user, in a real session, through the test hub.

alice's session (a Slurm job, as alice) starts a TensorBoard on a log folder
of hers through the API of her Jupyter server; it is served under her
server's URL, behind the hub's login, from a Unix socket. bob, logged in to
the same hub, gets neither the API nor TensorBoard's pages.
"""

import os
import pwd
import re
import statistics
import subprocess
import time

import pytest
import requests

from tests.conftest import REPO

USER = "alice"
HOME = pwd.getpwnam(USER).pw_dir
LOGS = f"{HOME}/logs"
RUN = f"{LOGS}/run1"
PYTORCH = "/opt/portal/envs/pytorch/bin/python"
TAGS = ("loss", "accuracy")

WRITE_EVENTS = f"""
from torch.utils.tensorboard import SummaryWriter
with SummaryWriter({RUN!r}) as writer:
    for step in range(50):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.add_scalar("accuracy", step / 50, step)
"""


def as_user(user, *cmd, timeout=120):
    result = subprocess.run(
        ["sudo", "-u", user, *cmd], cwd="/tmp", capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{cmd} as {user}: {result.stderr[-2000:]}"
    return result


def server_url(client, user):
    """Open the user's server as a browser does (the hub's OAuth sets its cookie)."""
    base = client.user_model(user)["servers"][""]["url"]
    page = client.session.get(client.url(base + "lab"), timeout=60)
    return base, page


def xsrf_headers(client, base):
    # as JupyterLab: the server's _xsrf cookie, sent back as a header
    token = client.session.cookies.get("_xsrf", path=base)
    assert token, f"no _xsrf cookie for {base}: {client.session.cookies}"
    return {"X-XSRFToken": token}


def tensorboard_processes(user):
    out = subprocess.run(
        ["pgrep", "-u", user, "-f", "-a", "portal.tensorboard.serve"],
        capture_output=True,
        text=True,
    ).stdout
    return {int(line.split()[0]): line for line in out.splitlines()}


def tcp_listeners():
    out = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True, check=True).stdout
    return {int(pid): line for line in out.splitlines() for pid in re.findall(r"pid=(\d+)", line)}


def curl_seconds(*args):
    out = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0] == "200", f"curl {args[-1]} answered {out[0]}"
    return float(out[1])


def kernel_environ(kernel_id, timeout=60):
    """The environment of a kernel of alice's, found by its connection file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in subprocess.run(
            ["pgrep", "-u", USER, "-f", f"kernel-{kernel_id}.json"], capture_output=True, text=True
        ).stdout.split():
            with open(f"/proc/{pid}/environ") as f:
                return dict(kv.split("=", 1) for kv in f.read().split("\0") if "=" in kv)
        time.sleep(0.3)
    raise AssertionError(f"kernel {kernel_id} did not start")


def env_port(env):
    return re.search(r":(\d+)/", env["PORTAL_TENSORBOARD_API"]).group(1)


def run_readme_snippet(env, then):
    """The README's TensorBoard snippet, as alice, with a kernel's variables."""
    readme = (REPO / "README.md").read_text().split("## TensorBoard", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    names = ("PORTAL_TENSORBOARD_API", "JUPYTERHUB_API_TOKEN")
    return subprocess.run(
        ["sudo", f"--preserve-env={','.join(names)}", "-u", USER, PYTORCH, "-c", snippet + then],
        env={**os.environ, **{name: env[name] for name in names}},
        cwd="/tmp",
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def alice_logs():
    """A fresh event file of alice's in ~/logs/run1, written as alice with PyTorch."""
    as_user(USER, "rm", "-rf", RUN)
    as_user(USER, "mkdir", "-p", LOGS)
    as_user(USER, PYTORCH, "-c", WRITE_EVENTS)
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(RUN))
    return RUN


@pytest.mark.slow
def test_tensorboard_per_user(session, login, alice_logs, capsys):
    alice = session(USER)
    base, page = server_url(alice, USER)
    assert page.status_code == 200 and "JupyterLab" in page.text
    api = alice.url(base + "portal/api/tensorboards")
    headers = xsrf_headers(alice, base)

    # -- refused log folders: 400 with a message, nothing started ---------
    refused = {
        "/etc": "outside your home",
        "../bob": "..",
        "/home/bob": "outside your home",
        "logs/../../bob": "..",
        "no-such-logs": "No such folder: no-such-logs",
        ".bashrc": "Not a folder",
        42: "must be a folder name",
    }
    for logdir, message in refused.items():
        r = alice.session.post(api, json={"logdir": logdir}, headers=headers, timeout=30)
        assert r.status_code == 400, f"{logdir!r}: {r.status_code} {r.text}"
        assert message in r.json()["message"], r.text
    r = alice.session.post(api, data="not json", headers=headers, timeout=30)
    assert r.status_code == 400 and "JSON" in r.json()["message"]
    # a POST without the XSRF header (a cross-site form) is refused by the server
    r = alice.session.post(api, json={"logdir": "logs"}, timeout=30)
    assert r.status_code == 403
    assert alice.session.get(api, timeout=30).json() == []

    # -- start, reuse, list ------------------------------------------------
    r = alice.session.post(api, json={"logdir": "logs"}, headers=headers, timeout=120)
    assert r.status_code == 201, r.text
    tb = r.json()
    assert tb["logdir"] == "logs"
    assert re.fullmatch(r"[0-9a-f]{12}", tb["id"])
    assert tb["url"] == f"{base}portal/tensorboard/{tb['id']}/"
    r = alice.session.post(api, json={"logdir": f"{HOME}/logs/"}, headers=headers, timeout=30)
    assert r.status_code == 200 and r.json()["id"] == tb["id"]
    listed = alice.session.get(api, timeout=30).json()
    assert [t["id"] for t in listed] == [tb["id"]]
    assert {"started", "last_activity"} <= set(listed[0])

    # -- TensorBoard's page and data, through the hub ---------------------
    url = alice.url(tb["url"])
    page = alice.session.get(url, timeout=60)
    assert page.status_code == 200, page.text[:500]
    assert "<title>TensorBoard</title>" in page.text and "<tb-webapp" in page.text
    tags = alice.session.get(url + "data/plugin/scalars/tags", timeout=60)
    assert tags.status_code == 200
    assert set(TAGS) <= set(tags.json()["run1"]), tags.text
    scalars = alice.session.get(
        url + "data/plugin/scalars/scalars", params={"run": "run1", "tag": "loss"}, timeout=60
    )
    assert scalars.status_code == 200 and len(scalars.json()) == 50
    # TensorBoard's own POST queries pass (same origin, no XSRF token of Jupyter's) ...
    form = [("tag", (None, "loss")), ("runs", (None, "run1"))]
    origin = {"Origin": alice.base}
    multirun = alice.session.post(
        url + "data/plugin/scalars/scalars_multirun", files=form, headers=origin, timeout=60
    )
    assert multirun.status_code == 200 and "run1" in multirun.json(), multirun.text[:300]
    # ... but not from another site
    evil = alice.session.post(
        url + "data/plugin/scalars/scalars_multirun",
        files=form,
        headers={"Origin": "http://evil.example"},
        timeout=60,
    )
    assert evil.status_code == 403

    # -- no TCP port: only the Unix socket in a private folder -------------
    processes = tensorboard_processes(USER)
    assert len(processes) == 1, processes
    ((pid, cmdline),) = processes.items()
    socket_path = re.search(r"--socket (\S+)", cmdline).group(1)
    st = os.stat(os.path.dirname(socket_path))
    assert st.st_uid == pwd.getpwnam(USER).pw_uid and st.st_mode & 0o777 == 0o700
    children = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True
    ).stdout.split()
    listeners = tcp_listeners()
    for p in [pid, *map(int, children)]:
        assert p not in listeners, f"TensorBoard process {p} listens on TCP: {listeners[p]}"

    # -- bob: neither the API nor TensorBoard ------------------------------
    bob = login("bob")
    for target in (url, url + "data/plugin/scalars/tags", api):
        r = bob.session.get(target, timeout=60)
        assert r.status_code in (403, 404), f"bob got {r.status_code} from {target}"
        assert "run1" not in r.text and "<tb-webapp" not in r.text
    r = bob.session.post(api, json={"logdir": "logs"}, timeout=30)
    assert r.status_code in (403, 404), r.status_code
    # no login at all: redirected to the hub's login, never TensorBoard
    r = requests.get(url, allow_redirects=False, timeout=30)
    assert r.status_code in (302, 403) and "run1" not in r.text

    # -- from a notebook: the README's snippet, with a kernel's environment --
    kernel = alice.session.post(
        alice.url(base + "api/kernels"), json={"name": "pytorch"}, headers=headers, timeout=60
    ).json()
    env = kernel_environ(kernel["id"])
    alice.session.delete(alice.url(f"{base}api/kernels/{kernel['id']}"), headers=headers)
    assert env.get("PORTAL_TENSORBOARD_API") == f"http://127.0.0.1:{env_port(env)}{base}" + (
        "portal/api/tensorboards"
    )
    shown = run_readme_snippet(env, 'print(tensorboard("logs").data)\ntensorboard("/etc")')
    assert f'<a href="{tb["url"]}" target="_blank">TensorBoard: logs</a>' in shown.stdout
    assert "RuntimeError: /etc is outside your home folder" in shown.stderr

    # -- timing: one scalars request through the hub vs. on the socket ----
    query = "data/plugin/scalars/scalars?run=run1&tag=loss"
    cookie = "; ".join(f"{c.name}={c.value}" for c in alice.session.cookies)
    via_hub = [curl_seconds("-H", f"Cookie: {cookie}", url + query) for _ in range(20)]
    direct_url = f"http://tensorboard{tb['url']}{query}"
    direct = [curl_seconds("--unix-socket", socket_path, direct_url) for _ in range(20)]
    with capsys.disabled():
        print(
            f"\nTensorBoard scalars request, median of 20: through the hub (:18000) "
            f"{statistics.median(via_hub) * 1000:.1f} ms, direct on the Unix socket "
            f"{statistics.median(direct) * 1000:.1f} ms"
        )

    # -- stop ------------------------------------------------------------
    r = alice.session.delete(f"{api}/{tb['id']}", headers=headers, timeout=30)
    assert r.status_code == 204, r.text
    deadline = time.monotonic() + 10
    while tensorboard_processes(USER) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tensorboard_processes(USER), "TensorBoard outlived DELETE"
    assert not os.path.exists(socket_path)
    assert alice.session.get(url, timeout=30).status_code == 404
    r = alice.session.delete(f"{api}/{tb['id']}", headers=headers, timeout=30)
    assert r.status_code == 404 and "No TensorBoard" in r.json()["message"]

    # -- the server's stop stops its TensorBoards and removes their folder --
    r = alice.session.post(api, json={"logdir": "logs/run1"}, headers=headers, timeout=120)
    assert r.status_code == 201, r.text
    ((_, cmdline),) = tensorboard_processes(USER).items()
    socket_dir = os.path.dirname(re.search(r"--socket (\S+)", cmdline).group(1))
    r = alice.api("DELETE", f"/users/{USER}/server")
    assert r.status_code in (202, 204), r.text
    alice.wait_stopped(USER)
    deadline = time.monotonic() + 30
    while (tensorboard_processes(USER) or os.path.exists(socket_dir)) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.3)
    assert not tensorboard_processes(USER), "TensorBoard outlived its server"
    assert not os.path.exists(socket_dir), f"{socket_dir} outlived the server"
