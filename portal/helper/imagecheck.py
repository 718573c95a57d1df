#!/usr/bin/python3 -I
"""portal-image-check: whether a container image runs a portal session.

The one check an image passes before sessions are offered it (issue 25),
run three ways, always through ``ch-run`` as an unprivileged user:

- by the admin service (as the hub's account), for the site's images in
  ``[containers] images``, when an admin adds one or a profile names it;
- by ``deploy/images.py check``, after a build;
- by the hub, for a user's own image (a folder in their home, where a
  profile allows one), as that user through its sudoers rule (an image in a
  home is the user's to read only)::

      sudo -n -u bob /usr/local/libexec/portal/portal-image-check \\
          --jupyter /opt/portal/envs/jupyter --framework pytorch \\
          --framework-env /opt/portal/envs/pytorch --in-home /home/bob/img/pt

What it checks, each step one line, ``ok WHAT DETAIL`` or ``FAIL WHAT:
REASON``, then ``done``: the image starts, its /usr/bin/python3 runs; the
jupyter environment's python imports Jupyter Server and the portal's session
launcher; the framework environment's python imports the framework; the
folders the session binds the host's into exist (ch-run binds only onto a
folder the image has). ``check_result`` turns that into one line for the
admin or the user. Exit status 0 (it works), 1 (it does not), 2 (a
malformed command line, or an image outside the caller's home with
``--in-home``).

This file imports nothing but Python's standard library and runs under
``/usr/bin/python3 -I``, so the installed copy runs only root-owned code
whoever can write the repository it came from; the hub, the service and
the deploy tool import it for its functions.
"""

import argparse
import ctypes
import json
import os
import pwd
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

INSTALLED_AT = "/usr/local/libexec/portal/portal-image-check"
CH_RUN = "ch-run"
INFO_FILE = "etc/portal-image"  # inside the image: NAME=, FRAMEWORK=, BUILT=
# Framework environment name -> the module its kernel imports.
FRAMEWORK_MODULES = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}
CHECK_TIMEOUT = 300  # seconds: importing TensorFlow from a cold disk is slow
# A site image's name, which is its folder's in [containers] images.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# A path the check takes: absolute, plain characters (ch-run's and the
# shell's syntax need none of the others), no ``..``.
PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]{0,4095}$")
FRAMEWORK_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
# What is kept of an image's answer (its code writes it: a user's own image
# could write gigabytes to the hub's log and memory otherwise).
OUTPUT_CAP = 32 * 1024  # bytes read from the check; the rest is read and dropped
LINE_CAP, LINES_CAP, MESSAGE_CAP = 300, 60, 1000  # characters of a line, lines, the verdict
# The check's own limits, for an image's code run outside any Slurm job
# (a user's, on the hub's host): CPU seconds, the largest file it may write,
# the memory of each process (its data: importing TensorFlow takes 0.3 GB),
# and the processes of its user (a fork bomb's ceiling).
CPU_SECONDS, FILE_BYTES = CHECK_TIMEOUT, 64 * 2**20
DATA_BYTES, PROCESSES = 8 * 2**30, 4096
# How long the check's leftovers may take to stop before they are killed anyway.
END_SECONDS = 10.0
# Control characters of an image's answer (C0 but tab, DEL, C1): a terminal
# that shows the hub's log would obey them.
CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Where a session binds the host's Slurm client files (the image's squeue
# reads its configuration, and reaches munged through its socket).
SLURM_BINDS = ("/etc/slurm", "/run/munge")


class ImageError(ValueError):
    """An image path or name that is refused; the message says why."""


def plain_path(path, what="the image"):
    """``path``, normalised, when absolute and plain; ImageError otherwise.

    >>> plain_path("/home/bob/images/pt/")
    '/home/bob/images/pt'
    >>> plain_path("/home/bob/../alice/pt")
    Traceback (most recent call last):
    ...
    portal.helper.imagecheck.ImageError: the image must be an absolute path of letters, \
digits, '_', '.', '-' and '/', without '..': not '/home/bob/../alice/pt'
    """
    if (not isinstance(path, str) or not PATH_RE.fullmatch(path)
            or ".." in path.split("/")):  # fmt: skip
        raise ImageError(
            f"{what} must be an absolute path of letters, digits, '_', '.', '-' and '/', "
            f"without '..': not {str(path)[:80]!r}"
        )
    return os.path.normpath(path)


def site_image(images_dir, name):
    """The path of the site's image ``name`` in ``images_dir``.

    >>> site_image("/var/lib/portal/images", "pytorch")
    '/var/lib/portal/images/pytorch'
    >>> site_image("/var/lib/portal/images", "../../etc")
    Traceback (most recent call last):
    ...
    portal.helper.imagecheck.ImageError: image '../../etc' is not an image name: \
letters, digits, '.', '_' and '-' (a folder of /var/lib/portal/images)
    """
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ImageError(f"image {str(name)[:64]!r} is not an image name: letters, digits, "
                         f"'.', '_' and '-' (a folder of {images_dir})")  # fmt: skip
    return os.path.join(plain_path(images_dir, "[containers] images"), name)


def in_home(path, home):
    """``path`` when it is a folder inside ``home`` once every link is
    followed (a user's own image); ImageError otherwise.

    >>> in_home("/etc", "/home/bob")
    Traceback (most recent call last):
    ...
    portal.helper.imagecheck.ImageError: your image must be a folder in your home \
(/home/bob), not /etc
    """
    path = plain_path(path, "your image")
    real, real_home = os.path.realpath(path), os.path.realpath(home)
    if os.path.commonpath([real, real_home]) != real_home or real == real_home:
        raise ImageError(f"your image must be a folder in your home ({home}), not {path}")
    if not os.path.isdir(real):
        raise ImageError(f"your image {path} is not a folder (an unpacked image: "
                         f"ch-convert -o dir)")  # fmt: skip
    return path


def site_images(images_dir):
    """The names of the image folders in ``images_dir`` (those being built,
    ``.NAME.new``, and anything not a folder left out), sorted."""
    try:
        entries = sorted(os.scandir(images_dir), key=lambda e: e.name)
    except OSError:
        return []
    return [e.name for e in entries if NAME_RE.fullmatch(e.name) and e.is_dir()]


def read_info(image):
    """/etc/portal-image of ``image`` as a dict ({} when it has none)."""
    try:
        with open(os.path.join(image, INFO_FILE)) as f:
            return dict(
                (key, value.strip().strip('"'))
                for key, _, value in (line.rstrip("\n").partition("=") for line in f)
                if key and value
            )
    except (OSError, UnicodeDecodeError):
        return {}


def image_stamp(image):
    """What changes when an image is rebuilt or replaced: the modification
    times of its folder and its /etc/portal-image (a check holds for one
    stamp); "" when the image is not there."""
    stamps = []
    for path in (image, os.path.join(image, INFO_FILE)):
        try:
            stamps.append(str(os.stat(path).st_mtime_ns))
        except OSError:
            stamps.append("-")
    return "" if stamps[0] == "-" else ":".join(stamps)


def mount_points(settings):
    """The image's folders that ch-run binds the host's into: each must be
    in the image (ch-run binds only onto a folder the image has).

    >>> mount_points({"data": {"shared_data": "/srv/portal/datasets"}})
    ['/home', '/srv/portal/datasets', '/etc/slurm', '/run/munge']

    None for GPUs: ch-run binds the host's /dev whole, its GPU devices with it
    (a node's /dev/nvidia*, the embedded cluster's /dev/portal-gpu/NODE).
    """
    points = ["/home", settings["data"]["shared_data"], *SLURM_BINDS]
    return [p for p in points if p]


def offer_problem(images_dir, image, framework, checks):
    """``(stamp, problem)``: the site's ``image``'s stamp now, and why a
    profile of it with the environment ``framework`` is not offered ("" when
    it is: its latest check, ``checks[(image, framework)]``, a dict with
    ``ok``, ``stamp`` and ``message``, passed at that stamp). The hub's offer
    and the admin service's profiles list both ask this.

    >>> offer_problem("/nowhere", "pytorch", "pytorch", {})
    ('', "image 'pytorch' is not in /nowhere")
    """
    try:
        stamp = image_stamp(site_image(images_dir, image))
    except ImageError as e:
        return "", str(e)
    check = checks.get((image, framework))
    if not stamp:
        problem = f"image {image!r} is not in {images_dir}"
    elif check is None:
        problem = f"image {image!r} has not been checked with {framework!r} yet"
    elif check["stamp"] != stamp:
        problem = f"image {image!r} changed after its check with {framework!r}: not checked since"
    elif not check["ok"]:
        problem = f"the check of image {image!r} with {framework!r} failed: {check['message']}"
    else:
        problem = ""
    return stamp, problem


# Run by the image's own /usr/bin/python3: each step prints ``ok WHAT
# DETAIL`` or ``FAIL WHAT: REASON``, then ``done``.
CHECK_SCRIPT = r"""
import json, os, subprocess, sys
steps = json.loads(sys.argv[1])
print("ok python3", sys.version.split()[0], flush=True)
try:
    with open("/etc/portal-image") as f:
        info = dict(l.rstrip("\n").split("=", 1) for l in f if "=" in l)
    print("ok image", info.get("NAME", "?"), info.get("FRAMEWORK", "?"), flush=True)
except OSError:
    print("ok image (no /etc/portal-image)", flush=True)
for what, python, code in steps["imports"]:
    if not os.path.exists(python):
        print(f"FAIL {what}: no {python} in the image", flush=True)
        continue
    p = subprocess.run([python, "-c", code], capture_output=True, text=True)
    last = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
    if p.returncode:
        print(f"FAIL {what}: {last} ({python})", flush=True)
    else:
        print(f"ok {what} {p.stdout.strip()}".rstrip(), flush=True)
for folder in steps["mount_points"]:
    if not os.path.isdir(folder):
        print(f"FAIL mount point {folder}: missing (ch-run binds the host's there)")
print("done")
"""


def version_of(module):
    return f"import {module} as m; print(getattr(m, '__version__', ''))"


def check_steps(jupyter_env, framework_env=None, framework=None, points=()):
    """What the check imports with which python, and the folders it looks for.

    >>> steps = check_steps("/opt/e/jupyter", "/opt/e/pytorch", "pytorch", ["/home"])
    >>> [(what, python) for what, python, _ in steps["imports"]]  # doctest: +NORMALIZE_WHITESPACE
    [('jupyter_server', '/opt/e/jupyter/bin/python'),
     ('portal.session.launch', '/opt/e/jupyter/bin/python'),
     ('torch', '/opt/e/pytorch/bin/python')]
    """
    python = f"{jupyter_env}/bin/python"
    imports = [
        ["jupyter_server", python, version_of("jupyter_server")],
        ["portal.session.launch", python, "import portal.session.launch"],
    ]
    if framework:
        module = FRAMEWORK_MODULES.get(framework, framework)
        imports.append([module, f"{framework_env}/bin/python", version_of(module)])
    given = {"jupyter": str(jupyter_env), "framework": framework or "",
             "framework_env": str(framework_env or "")}  # fmt: skip
    return {"imports": imports, "mount_points": [str(p) for p in points], "given": given}


def ch_run_argv(image, command, write=False, binds=()):
    """``ch-run`` of ``command`` in ``image``, the bind mounts ``binds``
    (SRC or SRC:DST).

    >>> ch_run_argv("/img/pt", ["python3", "-V"], binds=["/home"])
    ['ch-run', '-b', '/home', '/img/pt', '--', 'python3', '-V']
    """
    argv = [CH_RUN, *(["-w"] if write else [])]
    for bind in binds:
        argv += ["-b", bind]
    return [*argv, str(image), "--", *command]


def check_argv(image, steps):
    """The check's command line: the image's python3 running CHECK_SCRIPT,
    with a /tmp of its own (``-t``: nothing of the host's /tmp)."""
    argv = ch_run_argv(image, ["/usr/bin/python3", "-c", CHECK_SCRIPT, json.dumps(steps)])
    return [argv[0], "-t", *argv[1:]]


def clean_env(user=None):
    """The environment the check runs in, of ``user`` (default: the caller):
    nothing of the caller's but who it is (ch-run needs $USER)."""
    entry = pwd.getpwnam(user) if user else pwd.getpwuid(os.getuid())
    return {"USER": entry.pw_name, "LOGNAME": entry.pw_name, "HOME": entry.pw_dir,
            "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # fmt: skip


@dataclass
class CheckResult:
    ok: bool
    message: str
    lines: list = field(default_factory=list)

    def to_dict(self):
        return asdict(self)


def check_result(image, returncode, output):
    """What the check's output says: ``ok`` when every step passed, and a
    one-line ``message`` naming what failed.

    >>> out = "ok python3 3.11.2\\nok image pt pytorch\\nok jupyter_server 2.17.0\\n"
    >>> out += "ok portal.session.launch\\nok torch 2.13.0+cpu\\ndone\\n"
    >>> print(check_result("/img/pt", 0, out).message)  # doctest: +NORMALIZE_WHITESPACE
    image /img/pt works: python3 3.11.2, jupyter_server 2.17.0, portal.session.launch,
    torch 2.13.0+cpu
    >>> r = check_result("/img/x", 0, "ok python3 3.11.2\\nFAIL torch: ModuleNotFoundError: "
    ...                  "No module named 'torch' (/e/bin/python)\\ndone\\n")
    >>> r.ok, r.message
    (False, "image /img/x: torch: ModuleNotFoundError: No module named 'torch' (/e/bin/python)")
    >>> print(check_result("/img/y", 1, "ch-run[7]: error: can't execve(2): "
    ...                    "/usr/bin/python3: No such file or directory\\n").message)
    ... # doctest: +NORMALIZE_WHITESPACE
    image /img/y does not run: ch-run[7]: error: can't execve(2): /usr/bin/python3:
    No such file or directory
    >>> check_result("/img/z", 1, "FAIL torch: \x1b[2Jfake\\x9b").message
    'image /img/z: torch: ?[2Jfake?'
    """
    output = CONTROL_RE.sub("?", output)
    lines = [line[:LINE_CAP] for line in output.splitlines() if line.strip()][-LINES_CAP:]
    failed = [line[len("FAIL ") :] for line in lines if line.startswith("FAIL ")]
    if failed:
        return CheckResult(False, f"image {image}: {'; '.join(failed)}"[:MESSAGE_CAP], lines)
    if returncode or "done" not in lines:
        last = lines[-1] if lines else f"exit status {returncode}, no output"
        return CheckResult(False, f"image {image} does not run: {last}", lines)
    passed = [line[len("ok ") :] for line in lines if line.startswith("ok ")]
    passed = [p for p in passed if not p.startswith("image ")]
    return CheckResult(True, f"image {image} works: {', '.join(passed)}", lines)


def run_check(image, steps, argv_prefix=(), env=None, timeout=CHECK_TIMEOUT):
    """Run the check of ``image`` (``argv_prefix``: e.g. runuser or sudo as
    a user); a CheckResult."""
    argv = [*argv_prefix, *check_argv(image, steps)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=clean_env() if env is None else env)  # fmt: skip
    except subprocess.TimeoutExpired:
        return CheckResult(False, f"image {image}: the check took over {timeout} s")
    except OSError as e:
        return CheckResult(False, f"image {image}: cannot run {argv[0]}: {e.strerror}")
    return check_result(image, proc.returncode, proc.stdout + proc.stderr)


# The account the admin service checks the site's images as: their code
# (an image from elsewhere, NGC's for instance) never runs as the hub's
# account, which holds the hub's secrets. sudo lets the hub's account run
# INSTALLED_AT as it and nothing else (deploy/templates/sudoers).
SITE_CHECK_USER = "nobody"


def sudo_runner(user=SITE_CHECK_USER, sudo="sudo"):
    """A check runner (``runner(image, steps)`` -> CheckResult) that runs the
    installed helper as ``user`` through sudo, with the arguments that
    ``steps`` were made of.

    >>> steps = check_steps("/opt/e/jupyter", "/opt/e/pytorch", "pytorch", ["/home"])
    >>> sudo_argv("/img/pt", steps)  # doctest: +NORMALIZE_WHITESPACE
    ['sudo', '-n', '-u', 'nobody', '/usr/local/libexec/portal/portal-image-check',
     '--jupyter', '/opt/e/jupyter', '--framework', 'pytorch', '--framework-env',
     '/opt/e/pytorch', '--mount-point', '/home', '/img/pt']
    """

    def runner(image, steps, timeout=CHECK_TIMEOUT + 10):
        argv = sudo_argv(image, steps, user, sudo)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})  # fmt: skip
        except subprocess.TimeoutExpired:
            return CheckResult(False, f"image {image}: the check took over {timeout} s")
        except OSError as e:
            return CheckResult(False, f"image {image}: cannot run {argv[0]}: {e.strerror}")
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        if proc.returncode in (0, 1) and lines and lines[-1].startswith(f"image {image}"):
            return CheckResult(proc.returncode == 0, lines[-1], lines[:-1])
        last = lines[-1] if lines else f"exit status {proc.returncode}, no output"
        return CheckResult(False, f"image {image}: the check did not run as {user}: {last}",
                           lines)  # fmt: skip

    return runner


def sudo_argv(image, steps, user=SITE_CHECK_USER, sudo="sudo"):
    given = steps["given"]
    args = ["--jupyter", given["jupyter"]]
    if given["framework"]:
        args += ["--framework", given["framework"], "--framework-env", given["framework_env"]]
    for point in steps["mount_points"]:
        args += ["--mount-point", point]
    return [sudo, "-n", "-u", user, INSTALLED_AT, *args, image]


def helper_argv(image, jupyter_env, framework=None, framework_env=None, points=()):
    """The installed helper's arguments for a user's own image (after
    ``sudo -n -u USER INSTALLED_AT``).

    >>> helper_argv("/home/bob/pt", "/opt/e/jupyter", "pytorch", "/opt/e/pytorch", ["/home"])
    ... # doctest: +NORMALIZE_WHITESPACE
    ['--jupyter', '/opt/e/jupyter', '--framework', 'pytorch', '--framework-env',
     '/opt/e/pytorch', '--mount-point', '/home', '--in-home', '/home/bob/pt']
    """
    argv = ["--jupyter", jupyter_env]
    if framework:
        argv += ["--framework", framework, "--framework-env", framework_env]
    for point in points:
        argv += ["--mount-point", point]
    return [*argv, "--in-home", image]


def _limits():
    """In the check's process, before ch-run: its CPU time, file sizes,
    memory and processes."""
    for limit, value in (
        (resource.RLIMIT_CPU, CPU_SECONDS),
        (resource.RLIMIT_FSIZE, FILE_BYTES),
        (resource.RLIMIT_DATA, DATA_BYTES),
        (resource.RLIMIT_NPROC, PROCESSES),
    ):
        soft, hard = resource.getrlimit(limit)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))


def _descendants():
    """``{pid: state}`` of every process below this one (``/proc/PID/stat``'s
    state: "T" stopped, "Z" a zombie, ...)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        parents[int(entry)] = (int(ppid), state)
    below, found = {os.getpid()}, {}
    while True:
        new = {pid: state for pid, (ppid, state) in parents.items()
               if ppid in below and pid not in below}  # fmt: skip
        if not new:
            return found
        found.update(new)
        below.update(new)


def _signal(pids, number):
    for pid in pids:
        try:
            os.kill(pid, number)
        except OSError:
            pass


def end_descendants(seconds=END_SECONDS):
    """End every process left of the check. This process is their
    subreaper: one that left its parent (a daemon, a double fork) is a
    child of this one. Killed one round after another, a chain of forks
    outran the kills (a new child each time its parent was killed); so
    every one is first stopped (SIGSTOP, which it cannot catch: a stopped
    process forks no more), round after round until none of them runs
    (or ``seconds`` have passed), then all are killed and reaped."""
    deadline = time.monotonic() + seconds
    while True:
        found = _descendants()
        if not found:
            return
        running = [pid for pid, state in found.items() if state not in "TtZX"]
        if running and time.monotonic() < deadline:
            _signal(running, signal.SIGSTOP)
            continue
        _signal(found, signal.SIGKILL)
        while True:  # reap: the killed, and what they leave to this subreaper
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    break
            except ChildProcessError:
                break
        time.sleep(0.01)


def confined_check(image, steps, env, timeout=CHECK_TIMEOUT):
    """``run_check`` for an image's code outside any Slurm job: CPU and file
    size limits, at most OUTPUT_CAP bytes of its answer kept, a timeout, and
    no process of it left after (this process is the subreaper of them all,
    PR_SET_CHILD_SUBREAPER, and kills what is left); a CheckResult."""
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    kept = bytearray()

    def read(stream):
        for chunk in iter(lambda: stream.read(8192), b""):
            if len(kept) < OUTPUT_CAP:
                kept.extend(chunk[: OUTPUT_CAP - len(kept)])

    try:
        proc = subprocess.Popen(check_argv(image, steps), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, preexec_fn=_limits)  # fmt: skip
    except OSError as e:
        return CheckResult(False, f"image {image}: cannot run {CH_RUN}: {e.strerror}")
    reader = threading.Thread(target=read, args=(proc.stdout,), daemon=True)
    reader.start()
    began, timed_out = time.monotonic(), False
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        proc.wait()
    end_descendants()  # what it left: their end closes the pipe too
    reader.join(max(1.0, timeout - (time.monotonic() - began)))
    if timed_out:
        return CheckResult(False, f"image {image}: the check took over {timeout} s")
    return check_result(image, proc.returncode, kept.decode(errors="replace"))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="portal-image-check")
    parser.add_argument("--jupyter", required=True)
    parser.add_argument("--framework")
    parser.add_argument("--framework-env")
    parser.add_argument("--mount-point", action="append", default=[])
    parser.add_argument("--in-home", help="a user's image: refused outside the caller's home")
    parser.add_argument("image", nargs="?")
    opts = parser.parse_args(argv)
    try:
        if bool(opts.in_home) == bool(opts.image):
            raise ImageError("name one image: IMAGE, or --in-home IMAGE")
        env = clean_env()
        image = in_home(opts.in_home, env["HOME"]) if opts.in_home else plain_path(opts.image)
        jupyter = plain_path(opts.jupyter, "--jupyter")
        points = [plain_path(p, "--mount-point") for p in opts.mount_point]
        framework_env = None
        if opts.framework:
            if not FRAMEWORK_RE.fullmatch(opts.framework) or not opts.framework_env:
                raise ImageError("--framework needs a plain name and --framework-env")
            framework_env = plain_path(opts.framework_env, "--framework-env")
    except ImageError as e:
        print(f"portal-image-check: {e}", file=sys.stderr)
        return 2
    steps = check_steps(jupyter, framework_env, opts.framework, points)
    result = confined_check(image, steps, env)
    for line in result.lines:
        print(line)
    print(result.message)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
