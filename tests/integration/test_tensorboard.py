"""TensorBoard per user, in a real session, through the test hub.

alice's session (a Slurm job, as alice) starts a TensorBoard on a log folder
of hers through the API of her Jupyter server; it is served under her
server's URL, behind the hub's login, from a Unix socket. bob, logged in to
the same hub, gets neither the API nor TensorBoard's pages.
"""

import json
import os
import pwd
import re
import statistics
import subprocess
import time
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest
import requests

from tests.support import REPO
from tests.support.kernelcells import RUN_CELLS
from tests.support.measure import curl_seconds
from tests.support.testhub import PORT

USER = "alice"
HOME = pwd.getpwnam(USER).pw_dir
LOGS = f"{HOME}/logs"
LAYOUT = f"{HOME}/logs-layout"  # a copy of the run as logs/tensorflow/DATE
JUPYTER = "/opt/portal/envs/jupyter"
PYTORCH = "/opt/portal/envs/pytorch/bin/python"
# The PyTorch template as a user runs it, short: it logs under logs/pytorch/DATE.
TEMPLATE = "/opt/portal/notebook_templates/pytorch/mnist-pytorch.ipynb"
TEMPLATE_PARAMETERS = {"epochs": 1, "max_steps": 60, "log_every": 20}
TAGS = ("train/loss", "train/accuracy", "test/accuracy")


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
    # (base may be the server's whole URL, on its own host: the cookie's path is its path)
    token = client.session.cookies.get("_xsrf", path=urlparse(base).path or base)
    assert token, f"no _xsrf cookie for {base}: {client.session.cookies}"
    return {"X-XSRFToken": token}


def tensorboard_processes(user):
    out = subprocess.run(
        ["pgrep", "-u", user, "-f", "-a", "portal.session.tensorboard.serve"],
        capture_output=True,
        text=True,
    ).stdout
    return {int(line.split()[0]): line for line in out.splitlines()}


def tcp_listeners():
    out = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True, check=True).stdout
    return {int(pid): line for line in out.splitlines() for pid in re.findall(r"pid=(\d+)", line)}


def kernel_environ(kernel_id, timeout=60):
    """``(pid, environment)`` of a kernel of alice's, found by its connection file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in subprocess.run(
            ["pgrep", "-u", USER, "-f", f"kernel-{kernel_id}.json"], capture_output=True, text=True
        ).stdout.split():
            with open(f"/proc/{pid}/environ") as f:
                return pid, dict(kv.split("=", 1) for kv in f.read().split("\0") if "=" in kv)
        time.sleep(0.3)
    raise AssertionError(f"kernel {kernel_id} did not start")


# What a kernel needs to reach its session's API: where, its token, and, with
# TLS inside the cluster, the session's certificate (files in the job's /tmp).
KERNEL_VARIABLES = (
    "PORTAL_TENSORBOARD_API",
    "JUPYTERHUB_API_TOKEN",
    "JUPYTERHUB_SSL_KEYFILE",
    "JUPYTERHUB_SSL_CERTFILE",
    "JUPYTERHUB_SSL_CLIENT_CA",
)


def as_alice_in_the_job(pid, env, *argv):
    """``argv`` as alice with the kernel's variables, in the mount namespace
    of its process ``pid`` (the job's own /tmp, where the session's TLS files are)."""
    names = [name for name in KERNEL_VARIABLES if name in env]
    return subprocess.run(
        ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "sudo", f"--preserve-env={','.join(names)}"]
        + ["-u", USER, *argv],
        env={**os.environ, **{name: env[name] for name in names}},
        cwd="/tmp",
        capture_output=True,
        text=True,
        timeout=300,
    )


def env_port(env):
    return re.search(r":(\d+)/", env["PORTAL_TENSORBOARD_API"]).group(1)


def run_readme_snippet(pid, env, then):
    """The docs' TensorBoard snippet (docs/users/tensorboard.md), as alice,
    with a kernel's variables."""
    readme = (REPO / "docs" / "users" / "tensorboard.md").read_text().split("## TensorBoard", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    return as_alice_in_the_job(pid, env, PYTORCH, "-c", snippet + then)


@pytest.fixture(scope="module")
def alice_logs():
    """alice's ~/logs, written by the PyTorch template run with papermill as alice.

    Returns the run's name as TensorBoard lists it (``pytorch/DATE``).
    """
    as_user(USER, "rm", "-rf", LOGS, f"{HOME}/tb-template.ipynb")
    argv = [f"{JUPYTER}/bin/papermill", "--kernel", "pytorch", "--cwd", HOME, "--no-progress-bar"]
    for key, value in TEMPLATE_PARAMETERS.items():
        argv += ["-p", key, str(value)]
    as_user(USER, *argv, TEMPLATE, f"{HOME}/tb-template.ipynb", timeout=600)
    (run,) = os.listdir(f"{LOGS}/pytorch")
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(f"{LOGS}/pytorch/{run}"))
    return f"pytorch/{run}"


def run_cells_in_kernel(pid, env, kernel, *cells):
    """Cells in a new kernel of alice's with a session kernel's variables: [[status, shown]]."""
    argv = [f"{JUPYTER}/bin/python", "-c", RUN_CELLS, "text/html", kernel, *cells]
    result = as_alice_in_the_job(pid, env, *argv)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow
def test_tensorboard_per_user(session, login, alice_logs, capsys):
    run = alice_logs
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
    assert tb["url"] == f"{urlparse(base).path}portal/tensorboard/{tb['id']}/"
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
    # its fonts, which TensorBoard's page names from the site's root, come from it too
    fonts = re.findall(r"url\(([^)]+\.woff2)\)", page.text)
    assert fonts and all(not font.startswith("/") for font in fonts), fonts[:3]
    font = alice.session.get(urljoin(url, fonts[0]), allow_redirects=False, timeout=60)
    assert font.status_code == 200, f"{fonts[0]}: {font.status_code}"
    assert font.headers["Content-Type"] == "font/woff2"
    tags = alice.session.get(url + "data/plugin/scalars/tags", timeout=60)
    assert tags.status_code == 200
    assert set(TAGS) <= set(tags.json()[run]), tags.text
    scalars = alice.session.get(
        url + "data/plugin/scalars/scalars", params={"run": run, "tag": "train/loss"}, timeout=60
    )
    # one point every log_every steps of max_steps
    assert scalars.status_code == 200 and len(scalars.json()) == 3, scalars.text
    # TensorBoard's own POST queries pass (same origin, no XSRF token of Jupyter's) ...
    form = [("tag", (None, "train/loss")), ("runs", (None, run))]
    origin = {"Origin": f"{urlparse(url).scheme}://{urlparse(url).netloc}"}  # the session's
    multirun = alice.session.post(
        url + "data/plugin/scalars/scalars_multirun", files=form, headers=origin, timeout=60
    )
    assert multirun.status_code == 200 and run in multirun.json(), multirun.text[:300]
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
    # in the job's own /tmp (job_container/tmpfs), seen through its server's process
    server_pid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    socket_path = f"/proc/{server_pid}/root" + re.search(r"--socket (\S+)", cmdline).group(1)
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
        assert run not in r.text and "<tb-webapp" not in r.text
    r = bob.session.post(api, json={"logdir": "logs"}, timeout=30)
    assert r.status_code in (403, 404), r.status_code
    # no login at all: redirected to the hub's login, never TensorBoard
    r = requests.get(url, allow_redirects=False, timeout=30)
    assert r.status_code in (302, 403) and run not in r.text

    # -- from a notebook: the docs' snippet, with a kernel's environment --
    kernel = alice.session.post(
        alice.url(base + "api/kernels"), json={"name": "pytorch"}, headers=headers, timeout=60
    ).json()
    pid, env = kernel_environ(kernel["id"])
    # the session's own address, on its compute node (over TLS: [tls] internal)
    server = re.match(r"(https?)://([\d.]+):(\d+)/", env["JUPYTERHUB_SERVICE_URL"])
    scheme = "https" if env.get("JUPYTERHUB_SSL_CERTFILE") else "http"
    assert server[1] == scheme
    path = urlparse(base).path  # base: the server's URL on its own host
    assert env.get("PORTAL_TENSORBOARD_API") == f"{scheme}://{server[2]}:{env_port(env)}{path}" + (
        "portal/api/tensorboards"
    )
    shown = run_readme_snippet(pid, env, 'print(tensorboard("logs").data)\ntensorboard("/etc")')
    assert f'<a href="{tb["url"]}" target="_blank">TensorBoard: logs</a>' in shown.stdout
    assert "RuntimeError: /etc is outside your home folder" in shown.stderr
    # %tensorboard in a session's kernel: the same TensorBoard, inline, behind the login,
    # also after `%load_ext tensorboard` (which registers TensorBoard's own TCP magic)
    cells = run_cells_in_kernel(
        pid,
        env,
        "pytorch",
        "%load_ext tensorboard",
        "%tensorboard --logdir logs",
        "%tensorboard --logdir ../bob",
        "%tensorboard",
    )
    assert cells[:2] == [["ok", ""], ["ok", cells[1][1]]]
    assert f'<iframe src="{tb["url"]}"' in cells[1][1] and "new tab" in cells[1][1]
    assert cells[2][0] == "error" and "UsageError" in cells[2][1] and ".." in cells[2][1]
    assert cells[3][0] == "error" and "usage: %tensorboard --logdir" in cells[3][1]
    assert len(tensorboard_processes(USER)) == 1, "%tensorboard started a second TensorBoard"
    alice.session.delete(alice.url(f"{base}api/kernels/{kernel['id']}"), headers=headers)

    # -- timing: one scalars request through the hub vs. on the socket ----
    query = f"data/plugin/scalars/scalars?run={run}&tag=train/loss"
    cookie = "; ".join(f"{c.name}={c.value}" for c in alice.session.cookies)
    via_hub = [curl_seconds("-H", f"Cookie: {cookie}", url + query) for _ in range(20)]
    direct_url = f"http://tensorboard{tb['url']}{query}"
    direct = [curl_seconds("--unix-socket", socket_path, direct_url) for _ in range(20)]
    with capsys.disabled():
        print(
            f"\nTensorBoard scalars request, median of 20: through the hub (:{PORT}) "
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

    # -- runs in a folder named like a module, as the TensorFlow template's --
    # logs/tensorflow/DATE: TensorBoard, started in the log folder, must not
    # take that folder for TensorFlow (it then loads no run at all)
    as_user(USER, "rm", "-rf", LAYOUT)
    as_user(USER, "mkdir", "-p", f"{LAYOUT}/tensorflow")
    as_user(USER, "cp", "-r", f"{LOGS}/{run}", f"{LAYOUT}/tensorflow/")
    copied = "tensorflow/" + os.path.basename(run)
    r = alice.session.post(api, json={"logdir": LAYOUT}, headers=headers, timeout=120)
    assert r.status_code == 201, r.text
    layout_tb = r.json()
    layout_url = alice.url(layout_tb["url"])
    deadline = time.monotonic() + 30  # the first load runs in the background
    while (runs := alice.session.get(layout_url + "data/runs", timeout=60).json()) != [copied]:
        assert time.monotonic() < deadline, f"TensorBoard of {LAYOUT} lists {runs}"
        time.sleep(0.5)
    tags = alice.session.get(layout_url + "data/plugin/scalars/tags", timeout=60)
    assert set(TAGS) <= set(tags.json()[copied]), tags.text
    r = alice.session.delete(f"{api}/{layout_tb['id']}", headers=headers, timeout=30)
    assert r.status_code == 204, r.text
    deadline = time.monotonic() + 10
    while tensorboard_processes(USER) and time.monotonic() < deadline:
        time.sleep(0.2)
    as_user(USER, "rm", "-rf", LAYOUT)

    # -- the server's stop stops its TensorBoards and removes their folder --
    r = alice.session.post(api, json={"logdir": f"logs/{run}"}, headers=headers, timeout=120)
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
