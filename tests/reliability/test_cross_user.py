"""One user never reaches another's session: alice's server, her
TensorBoard and her job log are refused to bob every time, through the hub,
through bob's own server and as bob's Unix user. Nor does a non-admin change
a profile: every edit of bob's is refused, through the API and the pages."""

import pwd
import subprocess

import pytest

from tests.support.jobs import user_jobs
from tests.support.measure import figure

REPEAT = 20


def xsrf(client, base):
    return {"X-XSRFToken": client.session.cookies.get("_xsrf", path=base) or ""}


@pytest.mark.slow
def test_another_users_server_tensorboard_and_job_log_are_refused_every_time(
    session, login, capsys
):
    alice = session("alice", profile="pytorch", gpus=1)
    [(job_id, _)] = user_jobs("alice")
    log_rel = f".portal/logs/jupyter-{job_id}.log"
    log_abs = f"{pwd.getpwnam('alice').pw_dir}/{log_rel}"
    base = "/user/alice/"
    assert alice.session.get(alice.url(base + "lab"), timeout=60).status_code == 200
    tb = alice.session.post(
        alice.url(base + "portal/api/tensorboards"),
        json={"logdir": ""},
        headers=xsrf(alice, base),
        timeout=120,
    )
    assert tb.status_code in (200, 201), tb.text
    tb_url = tb.json()["url"]
    # alice herself gets her TensorBoard (her job log: see the test below)
    assert alice.session.get(alice.url(tb_url), timeout=60).ok

    bob = session("bob", profile="pytorch", gpus=1)
    bob.session.get(bob.url("/user/bob/lab"), timeout=60)  # bob's own server's cookie
    targets = {
        "alice's JupyterLab": ("GET", base + "lab"),
        "alice's server API": ("GET", base + "api/status"),
        "alice's job log": ("GET", f"{base}portal/joblog/{job_id}"),
        "alice's job log (contents)": ("GET", f"{base}api/contents/{log_rel}"),
        "alice's job log (files)": ("GET", f"{base}files/{log_rel}"),
        "alice's TensorBoard": ("GET", tb_url),
        "alice's TensorBoard data": ("GET", tb_url + "data/runs"),
        "alice's TensorBoard API": ("GET", base + "portal/api/tensorboards"),
        "start a TensorBoard for alice": ("POST", base + "portal/api/tensorboards"),
        "alice's user model": ("GET", "/hub/api/users/alice"),
        "start alice's server": ("POST", "/hub/api/users/alice/server"),
        "stop alice's server": ("DELETE", "/hub/api/users/alice/server"),
        "alice's log through bob's server": (
            "GET",
            f"/user/bob/api/contents/%2E%2E/alice/{log_rel}",
        ),
    }
    # What would really leak: the log's own text, TensorBoard's app, the
    # server's status. Never a bare job id: on a new cluster it is a small
    # number, found in any page (a static file's hash in a 404 page).
    leaks = (f"portal: job {job_id} on", "<tb-webapp", '"last_activity"')
    let_through = []
    for _ in range(REPEAT):
        for what, (method, path) in targets.items():
            headers = xsrf(bob, "/hub/") if path.startswith("/hub/") else {}
            r = bob.session.request(
                method, bob.url(path), headers=headers, allow_redirects=False, timeout=30
            )
            if r.status_code < 300 or any(leak in r.text for leak in leaks):
                let_through.append(f"{what}: HTTP {r.status_code}")
    # bob's Unix user (his terminal, his jobs): alice's home is closed
    unix = subprocess.run(["sudo", "-u", "bob", "cat", log_abs], capture_output=True, text=True)
    if unix.returncode == 0:
        let_through.append("alice's job log read as bob's Unix user")

    tried = REPEAT * len(targets) + 1
    figure(
        capsys,
        f"cross-user: {tried} tries of bob at alice's things, {len(let_through)} let through",
    )
    assert not let_through, sorted(set(let_through))
    # alice's session is untouched
    assert alice.user_model("alice")["servers"][""]["ready"]
    assert user_jobs("alice") == [[job_id, "RUNNING"]]


def test_the_owner_opens_her_job_log_but_no_dotfile(session):
    """The session card's link serves the job's log; the contents API still
    hides every dotfile (allow_hidden is off): ~/.ssh is not served."""
    alice = session("alice", profile="pytorch", gpus=1)
    [(job_id, _)] = user_jobs("alice")
    home = pwd.getpwnam("alice").pw_dir
    subprocess.run(
        [
            "sudo",
            "-u",
            "alice",
            "sh",
            "-c",
            f"mkdir -p -m 700 {home}/.ssh && echo KEY > {home}/.ssh/id_test",
        ],
        check=True,
    )
    # the server's own OAuth cookie first, as the browser gets it opening JupyterLab
    # (an API request without it is refused with 403, not redirected)
    assert alice.session.get(alice.url("/user/alice/lab"), timeout=60).status_code == 200
    r = alice.session.get(alice.url(f"/user/alice/portal/joblog/{job_id}"), timeout=30)
    assert r.status_code == 200, (r.status_code, r.text[:500])
    assert f"portal: job {job_id} on" in r.text
    assert r.headers["Content-Type"].startswith("text/plain")
    for path in (
        "api/contents/.ssh/id_test",
        "files/.ssh/id_test",
        "api/contents/.ssh",
        f"api/contents/.portal/logs/jupyter-{job_id}.log",
        "portal/joblog/..%2F..%2F.ssh%2Fid_test",
    ):
        r = alice.session.get(alice.url(f"/user/alice/{path}"), timeout=30)
        assert r.status_code >= 400 and "KEY" not in r.text, (path, r.status_code)


def test_a_non_admins_profile_edits_are_refused_every_time(portal, restore_profiles, capsys):
    bob, carol = portal("bob"), portal("carol")
    before = carol.get("api/profiles").json()
    form = {"_xsrf": bob.xsrf}  # bob's own and valid: the refusal is for who he is
    new = {"name": "bobs", "display_name": "Bob's", "environment": "pytorch", "max_gpus": 4}
    tries = [
        ("POST", "api/profiles", {"json": new}),
        ("POST", "api/check", {"json": new}),
        ("POST", "profiles/new", {"data": {**form, **new}}),
    ]
    for profile in before:  # the ones offered to bob, and vision, which is not
        name, current = profile["name"], {"revision": profile["revision"]}
        tries += [
            ("PUT", f"api/profiles/{name}", {"json": {**current, "max_gpus": 1}}),
            ("DELETE", f"api/profiles/{name}", {"params": current}),
            ("POST", f"profiles/{name}", {"data": {**form, **current, "max_gpus": "1"}}),
        ]
        tries += [
            ("POST", f"profiles/{name}/{action}", {"data": {**form, **current, "to": "1"}})
            for action in ("enable", "disable", "delete", "revert")
        ]
    let_through = []
    for _ in range(REPEAT):
        for method, path, kw in tries:
            r = bob.send(method, path, allow_redirects=False, **kw)
            if r.status_code != 403 or "Only portal admins may change profiles" not in r.text:
                let_through.append(f"{method} {path}: HTTP {r.status_code}")

    figure(
        capsys,
        f"profile edits by a non-admin: {REPEAT * len(tries)} tries, "
        f"{len(let_through)} let through",
    )
    assert not let_through, sorted(set(let_through))
    assert carol.get("api/profiles").json() == before
