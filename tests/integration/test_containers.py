"""Sessions in a container image (issue 25), against the real parts: the
images `make test` built (deploy/images.py) in [containers] images, the
admin service's check of them, Slurm, and Charliecloud's ch-run.

ch-run sets up its namespaces and then execs the command: no ch-run process
stays. That the job's processes run under it shows in what it leaves them:
a user and a mount namespace of their own, and the image's root as theirs
(/proc/PID/root/etc/portal-image names the image).
"""

import asyncio
import json
import os
import pwd
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from portal import settings as portal_settings
from portal.helper.imagecheck import read_info
from tests.support.jobs import squeue, user_jobs
from tests.support.kernelcells import run_in_session
from tests.support.testhub import JOB_NAME

SETTINGS = portal_settings.load()
IMAGES = Path(SETTINGS["containers"]["images"])
PYTORCH = IMAGES / "pytorch"
PROFILE = "pytorch-image"

# What a kernel in the image sees: the image's own root, its user, the
# slice's cores, the GPU device files of its node, and another user's home.
INSIDE = r"""
import errno, json, os, socket
info = open("/etc/portal-image").read()
opened = {}
folder = f"/dev/portal-gpu/{socket.gethostname()}"
for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
    try:
        os.close(os.open(os.path.join(folder, name), os.O_RDWR))
        opened[name] = "opened"
    except OSError as e:
        opened[name] = errno.errorcode[e.errno]
try:
    os.listdir("/home/bob")
    bob = "listed"
except OSError as e:
    bob = errno.errorcode[e.errno]
import torch
print(json.dumps({"info": info, "uid": os.getuid(), "cores": len(os.sched_getaffinity(0)),
                  "opened": opened, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "bob_home": bob, "torch": torch.__version__,
                  "cgroups": open("/proc/self/cgroup").read(),
                  "image": os.environ.get("PORTAL_IMAGE"),
                  "data": sorted(os.listdir(os.path.expanduser("~/shared-data/")))}))
"""


def offered(client, name, profile):
    page = client.session.get(client.url(f"/hub/spawn/{name}"), timeout=30).text
    return f'value="{profile}"' in page


def wait_offered(client, name, profile, timeout=300):
    """The admin service checks the images at its start: the image profile
    is offered once its check has passed."""
    since = time.monotonic()
    while time.monotonic() - since < timeout:
        if offered(client, name, profile):
            return
        time.sleep(2)
    raise AssertionError(f"{profile} was not offered to {name} within {timeout} s")


def copy_image(image, dest, leave_out):
    """A copy of ``image`` at ``dest`` without the folder ``leave_out`` (a
    path inside the image)."""
    dest.mkdir(parents=True)
    tar = subprocess.Popen(["tar", "-C", str(image), f"--exclude=./{leave_out.strip('/')}",
                            "-cf", "-", "."], stdout=subprocess.PIPE)  # fmt: skip
    subprocess.run(["tar", "-C", str(dest), "-xf", "-"], stdin=tar.stdout, check=True)
    assert tar.wait() == 0


def job_processes(user):
    """PIDs of ``user``'s processes that belong to a Slurm job of the test hub."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != pwd.getpwnam(user).pw_uid:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_NAME={JOB_NAME}".encode() in environ:
            pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def image():
    if not (PYTORCH / "etc/portal-image").exists():
        pytest.fail(f"no image {PYTORCH}: `make test` builds it (deploy/images.py ensure)")
    return PYTORCH


def test_a_rest_spawn_of_an_image_profile_runs_the_session_in_the_image(session, login, image):
    wait_offered(login("alice"), "alice", PROFILE)
    alice = session("alice", profile=PROFILE, gpus=1)
    [(job_id, state)] = user_jobs("alice")
    assert state == "RUNNING"
    assert alice.lab_answers("alice")

    # the job's processes: ch-run's namespaces, the image's root
    pids = job_processes("alice")
    assert pids, "no process of alice's job found"
    ours = {name: os.readlink(f"/proc/self/ns/{name}") for name in ("user", "mnt")}
    for pid in pids:
        for name, host in ours.items():
            assert os.readlink(f"/proc/{pid}/ns/{name}") != host, (pid, name)
        assert read_info(f"/proc/{pid}/root")["NAME"] == "pytorch", pid
    log = Path(pwd.getpwnam("alice").pw_dir, ".portal/logs", f"jupyter-{job_id}.log")
    assert f"portal: image {image} (ch-run)" in log.read_text()

    # the home page's card names the image
    home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    assert re.search(r'id="session-image"><code>([^<]*)</code>', home).group(1) == str(image)

    # a kernel of the framework sees the image's own root; inside, as
    # outside, bob's home is closed and the slice holds
    r = alice.api(
        "POST", "/users/alice/tokens",
        json={"scopes": ["access:servers!user=alice"], "note": "containers", "expires_in": 600},
    )  # fmt: skip
    status, printed = asyncio.run(
        run_in_session(alice.url("/user/alice/"), r.json()["token"], INSIDE, kernel_name="pytorch")
    )
    assert status == "ok", printed
    seen = json.loads(printed.strip().splitlines()[-1])
    assert "NAME=pytorch" in seen["info"] and "FRAMEWORK=pytorch" in seen["info"]
    assert seen["uid"] == pwd.getpwnam("alice").pw_uid
    assert seen["image"] == str(image)
    assert seen["bob_home"] == "EACCES"
    # the job's cgroups (memory, devices, freezer: cores are not confined by
    # cgroup here, the nodes advertise more than the host has) hold it inside
    for controller in ("memory", "devices", "freezer"):
        line = next(x for x in seen["cgroups"].splitlines() if f":{controller}:" in x)
        assert f"/job_{job_id}/" in line, seen["cgroups"]
    assert seen["cores"] == len(os.sched_getaffinity(pids[0]))
    assert "fashion-mnist" in seen["data"]  # the shared data, bound, real files
    # the node's GPU device files (the embedded cluster's, as in
    # test_confinement): its own answers as the driver does (ENXIO here, no
    # driver), every other EPERM: the job's devices cgroup, inside the image
    answers = sorted(seen["opened"].values())
    assert len(answers) == SETTINGS["cluster"]["node_gpus"], seen["opened"]
    assert answers.count("ENXIO") == 1 and answers.count("EPERM") == len(answers) - 1
    assert seen["cuda"] == "0"


def test_the_service_check_says_what_a_bad_image_lacks_and_it_is_never_offered(
    portal, login, restore_profiles, image
):
    """An image without Jupyter (a copy of the good one without its
    environments) fails the check with its message: a profile naming it is
    refused, and nothing offers it."""
    bad = IMAGES / "no-jupyter"
    shutil.rmtree(bad, ignore_errors=True)
    copy_image(image, bad, f"{SETTINGS['envs']['prefix']}/envs")
    try:
        carol = portal("carol")
        r = carol.send("POST", "api/profiles", json={
            "name": "no-jupyter", "display_name": "No Jupyter", "environment": "pytorch",
            "image": "no-jupyter",
        })  # fmt: skip
        assert r.status_code == 400, r.text
        refusal = r.json()
        assert refusal["field"] == "image", refusal
        message = refusal["error"]
        assert "jupyter_server: no /opt/portal/envs/jupyter/bin/python in the image" in message
        assert "no-jupyter" in message, message
        assert carol.get("api/profiles/no-jupyter").status_code == 404  # nothing saved
        images = carol.get("images").text
        assert "no-jupyter" in images and "jupyter_server: no /opt/portal" in images
        assert not offered(login("alice"), "alice", "no-jupyter")
    finally:
        shutil.rmtree(bad, ignore_errors=True)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"profile": PROFILE, "image": "/var/lib/portal/images/pytorch/../tensorflow"}, "'..'"),
        ({"profile": PROFILE, "image": "/etc"}, "must be a folder in your home"),
        (
            {"profile": "tensorflow-image", "image": "/home/bob/x"},
            "does not run images of your own",
        ),
        ({"profile": "pytorch", "image": "/home/bob/x"}, "does not run images of your own"),
    ],
)
def test_image_paths_the_profile_does_not_allow_are_refused_and_nothing_is_submitted(
    login, image, options, message
):
    bob = login("bob")
    wait_offered(bob, "bob", PROFILE)
    r = bob.api("POST", "/users/bob/server", json={**options, "gpus": 1})
    assert r.status_code == 400, r.text
    assert message in r.json()["message"]
    time.sleep(0.2)
    assert not squeue("-n", JOB_NAME, "-u", "bob", "-o", "%i")
    assert not bob.user_model("bob")["servers"]


def test_a_users_own_image_is_checked_as_them_before_the_spawn(login, image):
    """bob's copy of the image without its framework: refused with the
    check's message, run as bob (his home is closed to the hub's account)."""
    home = Path(pwd.getpwnam("bob").pw_dir)
    own = home / "images" / "broken"
    shutil.rmtree(home / "images", ignore_errors=True)
    copy_image(image, own, f"{SETTINGS['envs']['prefix']}/envs/pytorch")
    try:
        subprocess.run(["chown", "-R", "bob:", str(home / "images")], check=True)
        bob = login("bob")
        wait_offered(bob, "bob", PROFILE)
        r = bob.api("POST", "/users/bob/server",
                    json={"profile": PROFILE, "gpus": 1, "image": str(own)})  # fmt: skip
        assert r.status_code == 400, r.text
        assert r.json()["message"].startswith("Your image was refused: image ")
        assert "torch" in r.json()["message"], r.json()["message"]
        assert not squeue("-n", JOB_NAME, "-u", "bob", "-o", "%i")

        # an image whose python3 floods its answer and leaves a daemon: the
        # check runs bob's code on the hub's host, outside Slurm; what comes
        # back is short, and nothing of it is left running
        python3 = own / "usr/bin/python3"
        python3.unlink()
        python3.write_text(
            "#!/bin/sh\nsetsid sleep 297 </dev/null >/dev/null 2>&1 &\n"
            "head -c 3000000 /dev/zero | tr '\\0' x; echo; exit 1\n"
        )
        python3.chmod(0o755)
        subprocess.run(["chown", "bob:", str(python3)], check=True)
        r = bob.api("POST", "/users/bob/server",
                    json={"profile": PROFILE, "gpus": 1, "image": str(own)})  # fmt: skip
        assert r.status_code == 400, r.text[:300]
        assert len(r.text) < 2000 and r.json()["message"].startswith("Your image was refused")
        left = subprocess.run(["pgrep", "-u", "bob", "-f", "sleep 297"], capture_output=True)
        assert left.returncode == 1, f"the check left bob's processes: {left.stdout}"
    finally:
        subprocess.run(["pkill", "-u", "bob", "-f", "sleep 297"], check=False)
        shutil.rmtree(home / "images", ignore_errors=True)


def test_bob_cannot_start_the_image_of_a_profile_of_a_group_he_is_not_in(
    portal, login, restore_profiles, image
):
    carol = portal("carol")
    current = carol.profile(PROFILE)
    r = carol.put(PROFILE, groups=["portal-admins"], revision=current["revision"])
    assert r.status_code == 200, r.text
    bob = login("bob")
    assert not offered(bob, "bob", PROFILE)
    r = bob.api("POST", "/users/bob/server", json={"profile": PROFILE, "gpus": 1})
    assert r.status_code == 400, r.text
    assert f"Profile '{PROFILE}' is not available to you" in r.json()["message"]
    assert not squeue("-n", JOB_NAME, "-u", "bob", "-o", "%i")


def test_srun_from_inside_the_image_runs_each_rank_in_the_image(cluster, image):
    """What the DDP template does in a container session: srun, run inside
    the image (its slurm-client, Slurm's files and munge's socket bound),
    starts one task on each node, and each task runs in the image too
    (PORTAL_CONTAINER_RUN between srun and the command)."""
    from portal.core.containers import Binds, runtime
    from tests.support.jobs import partition_nodes

    if len(partition_nodes("gpu")) < 2:
        pytest.skip("two nodes needed ([cluster] nodes >= 2)")
    home = pwd.getpwnam("alice").pw_dir
    run = runtime("charliecloud").exec_argv(
        str(image), [], Binds.for_session("/home", SETTINGS["data"]["shared_data"]), cwd=home
    )
    task = "echo rank $SLURM_PROCID on $SLURMD_NODENAME in $(grep ^NAME= /etc/portal-image)"
    inner = " ".join([*run, "sh", "-c", f"'{task}'"])
    script = f"#!/bin/bash\nexec {' '.join(run)} srun --ntasks=2 {inner}\n"
    out = Path(home, f"portal-srun-{os.getpid()}.out")
    try:
        done = subprocess.run(
            ["sudo", "-u", "alice", "sbatch", "--parsable", "--wait", "-J", JOB_NAME, "-N", "2",
             "--ntasks-per-node=1", "-c", "1", "--gres=gpu:1", "-p", "gpu", "-t", "5",
             f"--output={out}", f"--chdir={home}"],
            input=script, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        output = out.read_text() if out.exists() else ""
        assert done.returncode == 0, (done.stderr, output)
        ranks = sorted(re.findall(r"rank (\d) on (\S+) in NAME=(\S+)", output))
        assert [(rank, name) for rank, _, name in ranks] == [("0", "pytorch"), ("1", "pytorch")]
        assert len({node for _, node, _ in ranks}) == 2, output
    finally:
        out.unlink(missing_ok=True)
