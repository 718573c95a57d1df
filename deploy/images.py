"""Container images for sessions: Charliecloud directory images, built from
Debian and this host's own environments, and the check an image passes
before sessions are offered it (issue 25)::

    PYTHONPATH=REPO /usr/bin/python3 -P -m deploy.images ensure
    PYTHONPATH=REPO /usr/bin/python3 -P -m deploy.images build NAME --framework pytorch
    PYTHONPATH=REPO /usr/bin/python3 -P -m deploy.images check DEST/NAME --user alice

``ensure`` (deploy/envs.sh runs it, so ``make up`` and ``make test`` do)
builds each image of ``[containers] build`` (named after its framework) that
is missing or stale: an image keeps, in /etc/portal-image-source.json, what
it was built from (this module's recipe, the mount points, deploy/kernels.py,
and the stamps of the environments it copied, deploy/envs_setup.py's), and
is built again when that differs. A folder of that name without
/etc/portal-image is a site's own image: kept. With two images or more to
build, the Debian base is made once (DEST/.debian-base, removed after) and
copied into each.

``build`` makes DEST/NAME (DEST: [containers] images):

1. a minimal Debian of the host's release, with its python3, by mmdebstrap
   from the mirror (and security updates) this host's apt uses, straight into a folder (as fast as
   a tarball, about 16 s here, and no unpacking after);
2. the session's environments copied in at their host paths: the jupyter
   environment ([envs] jupyter) and the framework's (PREFIX/envs/NAME).
   They are venvs of Debian's /usr/bin/python3, which the image has too, so
   they run unchanged; deploy/kernels.py, run inside, keeps the kernels of
   the environments the image holds and drops the others';
3. /etc/portal-image, which says what the image is (``NAME=``,
   ``FRAMEWORK=``, ``BUILT=``), for its users and the tests;
4. the folders that ch-run binds the host's into (a bind needs its mount
   point in the image): /home, [data] shared_data, and /etc/slurm and
   /run/munge for the image's own Slurm client (squeue, which tells the
   session its end). The GPU devices need none: ch-run binds the host's
   /dev whole;
5. built as DEST/.NAME.new and checked (as ``nobody``, as below), then
   renamed over DEST/NAME, world-readable (ch-run runs it as the user): an
   image that fails its check replaces none.

``check`` runs the image as a user, as a session would, and says in one
line what works or what does not: the image starts, its python3 runs, and
the jupyter environment's python imports Jupyter Server and the portal's
session launcher, the framework's its module. Exit status 0 or 1.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from deploy.base import DEPLOY_DIR, REPO_DIR, DeployError, logger, main_of, run
from deploy.envs_setup import built_from
from portal.helper.imagecheck import (
    INFO_FILE,
    ch_run_argv,
    check_steps,
    mount_points,
    run_check,
)

log = logger("images")

# What a build makes of the same environments: bump it when that changes in
# a way the record (image_source) does not see, so each image is rebuilt.
RECIPE = 3  # 2: no setuid/setgid file, no folder writable by all; 3: no device
# file, everything root's and writable by root alone, no munge key
SOURCE_FILE = "etc/portal-image-source.json"  # inside the image: what it was built from
BASE = ".debian-base"  # in DEST, while ensure builds several images
CHECK_USER = "nobody"  # who checks a new image: anyone may run it
SUITE = "bookworm"
# The session's python, and Slurm's client for its squeue of the job's end
# (portal.session.jobend): the host's /etc/slurm and munge socket are bound.
PACKAGES = ("python3", "ca-certificates", "slurm-client")
SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list",
           "/etc/apt/sources.list.d/*.sources")  # fmt: skip
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# ---------------------------------------------------------------- pure


def valid_name(name):
    """An image's name, which is its folder's: letters, digits, ``._-``.

    >>> valid_name("pytorch-2.13")
    'pytorch-2.13'
    >>> valid_name("../etc")
    Traceback (most recent call last):
    ...
    deploy.base.DeployError: image name '../etc': use letters, digits, '.', '_' and '-'
    """
    if not NAME.fullmatch(name):
        raise DeployError(f"image name {name!r}: use letters, digits, '.', '_' and '-'")
    return name


def debian_sources(sources, suite=SUITE):
    """apt's one-line entries for ``suite`` and its -updates and -security
    suites (``main``), each from the first URI that serves it in the host's
    sources (one-line ``deb`` entries or deb822 stanzas): the image gets the
    host's mirror and its security updates.

    >>> debian_sources("deb http://ftp.de.debian.org/debian bookworm main contrib")
    ['deb http://ftp.de.debian.org/debian bookworm main']
    >>> debian_sources('''Types: deb
    ... URIs: http://deb.debian.org/debian-security
    ... Suites: bookworm-security
    ... Components: main
    ...
    ... Types: deb
    ... URIs: http://deb.debian.org/debian
    ... Suites: bookworm bookworm-updates
    ... Components: main''')  # doctest: +NORMALIZE_WHITESPACE
    ['deb http://deb.debian.org/debian bookworm main',
     'deb http://deb.debian.org/debian bookworm-updates main',
     'deb http://deb.debian.org/debian-security bookworm-security main']
    """
    found = {}
    for stanza in re.split(r"\n\s*\n", sources):
        fields, entries = {}, []
        for line in stanza.splitlines():
            line = line.split("#", 1)[0].strip()
            words = re.sub(r"\[[^]]*\]", "", line).split()
            if words and words[0] == "deb":
                entries.append((words[1:2], words[2:3], words[3:]))
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.split()
        if "deb" in fields.get("types", ()):
            entries.insert(0, (fields.get("uris", []), fields.get("suites", []),
                               fields.get("components", [])))  # fmt: skip
        for uris, suites, components in entries:
            for name in suites:
                if uris and "main" in components:
                    found.setdefault(name, uris[0].rstrip("/"))
    if suite not in found:
        return []
    wanted = (suite, f"{suite}-updates", f"{suite}-security")
    return [f"deb {found[name]} {name} main" for name in wanted if name in found]


def mmdebstrap_argv(root, sources, suite=SUITE, packages=PACKAGES):
    """mmdebstrap's command line: a minbase Debian ``suite`` with ``packages``
    into ``root`` (a folder, or a tarball if it ends in .tar), from apt's
    ``sources`` (entries or mirror URIs).

    >>> mmdebstrap_argv("/x/.pt.new", ["deb http://m.example/debian bookworm main"])[2:]
    ... # doctest: +NORMALIZE_WHITESPACE
    ['--variant=minbase', '--include=python3,ca-certificates,slurm-client', 'bookworm',
     '/x/.pt.new', 'deb http://m.example/debian bookworm main']
    """
    include = f"--include={','.join(packages)}"
    return ["mmdebstrap", "--quiet", "--variant=minbase", include, suite, str(root), *sources]


def session_envs(settings, framework):
    """The environments a session of ``framework`` runs: the jupyter one, the framework's."""
    if framework not in settings["envs"]["frameworks"]:
        raise DeployError(f"no framework {framework!r}: [envs] frameworks has "
                          f"{', '.join(settings['envs']['frameworks'])}")  # fmt: skip
    prefix = Path(settings["envs"]["prefix"])
    return Path(settings["envs"]["jupyter"]), prefix / "envs" / framework


def image_info(name, framework, built):
    """/etc/portal-image: what the image is, in os-release's ``KEY=value`` form.

    >>> print(image_info("pytorch", "pytorch", "2025-11-25T03:50:00Z"), end="")
    NAME=pytorch
    FRAMEWORK=pytorch
    BUILT=2025-11-25T03:50:00Z
    BASE="Debian bookworm"
    """
    return f'NAME={name}\nFRAMEWORK={framework}\nBUILT={built}\nBASE="Debian {SUITE}"\n'


def image_source(framework, envs, points, kernels):
    """What an image is built from, as its record keeps it: the recipe
    (RECIPE, the Debian suite and packages, deploy/kernels.py's sha256
    ``kernels``, the mount ``points``) and ``envs``, each environment copied
    in with what it was built from (``{path: {stamp file: content}}``).

    >>> src = image_source("pytorch", {"/e/jupyter": {".portal-stamp": "ab "}}, ["/home"], "k1")
    >>> src["framework"], src["environments"], src["mount_points"]
    ('pytorch', {'/e/jupyter': {'.portal-stamp': 'ab '}}, ['/home'])
    """
    return {
        "recipe": RECIPE,
        "suite": SUITE,
        "packages": list(PACKAGES),
        "kernels": kernels,
        "framework": framework,
        "mount_points": list(points),
        "environments": {str(env): dict(stamps) for env, stamps in envs.items()},
    }


def rebuild_reason(recorded, wanted):
    """Why an image recorded as built from ``recorded`` (None: no record) is
    built again for ``wanted``; "" when it is up to date.

    >>> wanted = image_source("pytorch", {"/e/pytorch": {".portal-stamp": "2 "}}, [], "k")
    >>> rebuild_reason(wanted, wanted)
    ''
    >>> rebuild_reason(image_source("pytorch", {"/e/pytorch": {".portal-stamp": "1 "}}, [], "k"),
    ...                wanted)
    '/e/pytorch changed'
    >>> rebuild_reason(None, wanted)
    'it has no record of what it was built from'
    """
    if not isinstance(recorded, dict):
        return "it has no record of what it was built from"
    if recorded == wanted:
        return ""
    changed = [env for env, stamps in wanted["environments"].items()
               if recorded.get("environments", {}).get(env) != stamps]  # fmt: skip
    if changed:
        return f"{', '.join(changed)} changed"
    if recorded.get("mount_points") != wanted["mount_points"]:
        return "its mount points changed ([data] shared_data)"
    if recorded.get("framework") != wanted["framework"]:
        return "its framework changed"
    return "the way images are built changed (deploy/images.py, deploy/kernels.py)"


def as_user(user, argv, home=None):
    """``argv`` run as ``user`` by root, with a clean environment of its own
    (ch-run passes the caller's environment into the container; it needs $USER).

    >>> as_user("alice", ["ch-run", "/img", "--", "id"])  # doctest: +NORMALIZE_WHITESPACE
    ['runuser', '-u', 'alice', '--', 'env', '-i', 'USER=alice', 'LOGNAME=alice',
     'HOME=/home/alice', 'PATH=/usr/bin:/bin', 'LANG=C.UTF-8', 'ch-run', '/img', '--', 'id']
    """
    home = home or f"/home/{user}"
    env = [f"USER={user}", f"LOGNAME={user}", f"HOME={home}", "PATH=/usr/bin:/bin",
           "LANG=C.UTF-8"]  # fmt: skip
    return ["runuser", "-u", user, "--", "env", "-i", *env, *argv]


# ---------------------------------------------------------------- commands


def host_sources():
    texts = [Path(p).read_text() for pattern in SOURCES for p in sorted(glob.glob(pattern))]
    sources = debian_sources("\n\n".join(texts))
    if not sources:
        raise DeployError(f"no Debian {SUITE} main in /etc/apt/sources.list*: pass --mirror")
    return sources


def copy_into(root, path):
    """``path`` of the host into the image ``root``, at the same path."""
    target = root / path.relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    run(["cp", "-a", str(path), str(target)])


def need_tools():
    for tool, package in (("mmdebstrap", "mmdebstrap"), ("ch-run", "charliecloud-runtime")):
        if not shutil.which(tool):
            raise DeployError(f"no {tool}: install {package} (deploy/packages.sh)")


def remove_tree(path):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def wanted_source(settings, framework):
    """What an image of ``framework`` built now would be built from."""
    envs = session_envs(settings, framework)
    for env in envs:
        if not (env / "bin" / "python").exists():
            raise DeployError(f"no {env}: run deploy/envs.sh first")
    kernels = hashlib.sha256((DEPLOY_DIR / "kernels.py").read_bytes()).hexdigest()
    stamps = {env: built_from(env) for env in envs}
    return image_source(framework, stamps, mount_points(settings), kernels)


def recorded_source(image):
    """The record of what ``image`` was built from; None without one."""
    try:
        return json.loads((image / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None


def debian_base(root, sources):
    log(f"debootstrapping {SUITE} from {', '.join(sources)} into {root}")
    run(mmdebstrap_argv(root, sources))


def size_of(path):
    du = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True)
    return du.stdout.split()[0] if du.returncode == 0 and du.stdout else "?"


def harden(root):
    """Nothing of the image ``root`` acts on the host: the image sits there,
    world-readable, where any user could run a setuid copy of su or mount
    with its real effect (long after the host's own are patched), open its
    device files (mmdebstrap's /dev/console is 0666: the host's console,
    to any user; the host's is root's alone), or leave files in a folder
    writable by all (its /var/tmp) or by another account (munge's, uid 100
    here, mail's, staff's) for the next user's session. So: no setuid or
    setgid file, no device file, every file root's and writable by root
    alone, and no munge key (the session binds the host's /run/munge, whose
    socket it uses). Inside ch-run none of these did anything (no setuid in
    its namespace, the host's /dev and /tmp bound over the image's)."""
    run(["find", str(root), "-xdev", "(", "-type", "b", "-o", "-type", "c", ")",
         "-delete"])  # fmt: skip
    run(["rm", "-f", str(root / "etc/munge/munge.key")])
    run(["chown", "-hR", "root:root", str(root)])
    run(["find", str(root), "-xdev", "-type", "f", "-perm", "/6000",
         "-exec", "chmod", "ug-s", "{}", "+"])  # fmt: skip
    run(["find", str(root), "-xdev", "!", "-type", "l", "-perm", "/0022",
         "-exec", "chmod", "go-w,-t", "{}", "+"])  # fmt: skip


def build_image(settings, dest, name, framework, sources, base=None):
    """DEST/NAME built (from a copy of the Debian root ``base`` when given),
    checked, and put in place; the seconds it took."""
    source = wanted_source(settings, framework)
    jupyter_env, framework_env = session_envs(settings, framework)
    began = time.monotonic()
    final, work = dest / name, dest / f".{name}.new"
    remove_tree(work)
    if base:
        run(["cp", "-a", "--reflink=auto", str(base), str(work)])
    else:
        debian_base(work, sources)
    for env in (jupyter_env, framework_env):
        log(f"copying {env}")
        copy_into(work, env)
    # The kernels of the environments in the image only (the repository,
    # where deploy/kernels.py finds its files, bound at /mnt).
    modulefiles = Path(settings["envs"]["prefix"]) / "modulefiles"
    kernels = ["/usr/bin/python3", "/mnt/deploy/kernels.py", str(jupyter_env), str(modulefiles),
               str(framework_env)]  # fmt: skip
    run(ch_run_argv(work, kernels, write=True, binds=[f"{REPO_DIR}:/mnt"]),
        env={**os.environ, "USER": "root"})  # fmt: skip
    built = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (work / INFO_FILE).write_text(image_info(name, framework, built))
    (work / SOURCE_FILE).write_text(json.dumps(source, indent=1, sort_keys=True) + "\n")
    for point in mount_points(settings):
        (work / point.lstrip("/")).mkdir(mode=0o755, parents=True, exist_ok=True)
    harden(work)
    work.chmod(0o755)
    result = check_image(settings, str(work), CHECK_USER, framework)
    if not result.ok:
        raise DeployError(f"{result.message} (checked as {CHECK_USER}; left for a look: "
                          f"{work})")  # fmt: skip
    old = dest / f".{name}.old"
    remove_tree(old)
    if final.exists():
        final.rename(old)
    work.rename(final)
    remove_tree(old)
    seconds = time.monotonic() - began
    log(f"built {final} in {seconds:.0f} s, {size_of(final)}: {result.message.split(': ', 1)[-1]}")
    return seconds


def images_dir(settings, dest=None):
    """The images folder, made world-readable (ch-run runs an image as its user)."""
    dest = Path(dest or settings["containers"]["images"])
    os.umask(0o022)
    dest.mkdir(mode=0o755, parents=True, exist_ok=True)
    dest.chmod(0o755)
    return dest


def cmd_build(settings, *args):
    parser = argparse.ArgumentParser(prog="deploy.images build")
    parser.add_argument("name", type=valid_name)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--dest", help="the images folder (default: [containers] images)")
    parser.add_argument("--mirror", help="the Debian mirror (default: this host's apt's)")
    opts = parser.parse_args(args)
    need_tools()
    wanted_source(settings, opts.framework)  # the environments are there
    sources = [opts.mirror] if opts.mirror else host_sources()
    build_image(settings, images_dir(settings, opts.dest), opts.name, opts.framework, sources)


def cmd_ensure(settings, *args):
    """Each image of [containers] build that is missing or stale, built."""
    parser = argparse.ArgumentParser(prog="deploy.images ensure")
    parser.add_argument("--dest", help="the images folder (default: [containers] images)")
    opts = parser.parse_args(args)
    names, runtime = settings["containers"]["build"], settings["containers"]["runtime"]
    if not names:
        return
    if runtime != "charliecloud":
        log(f"[containers] runtime is {runtime}: the images built here are Charliecloud's; "
            "none built ([containers] build)")  # fmt: skip
        return
    dest = images_dir(settings, opts.dest)
    todo = []
    for name in map(valid_name, names):
        try:
            wanted = wanted_source(settings, name)
        except DeployError as e:
            raise DeployError(f"[containers] build names {name}: {e}") from None
        image = dest / name
        if not image.is_dir():
            reason = "it is missing"
        elif not (image / INFO_FILE).is_file():
            log(f"{image} has no /etc/portal-image: a site's own image, kept (it is not "
                f"built while [containers] build names {name})")  # fmt: skip
            continue
        else:
            reason = rebuild_reason(recorded_source(image), wanted)
        if reason:
            todo.append((name, reason))
    if not todo:
        return
    need_tools()
    began, sources = time.monotonic(), host_sources()
    base = dest / BASE if len(todo) > 1 else None
    try:
        if base:
            remove_tree(base)
            debian_base(base, sources)
        for name, reason in todo:
            log(f"building the image {name}: {reason}")
            build_image(settings, dest, name, name, sources, base)
    finally:
        if base:
            remove_tree(base)
    log(f"{len(todo)} image(s) built in {dest} in {time.monotonic() - began:.0f} s")


def cmd_check(settings, *args):
    parser = argparse.ArgumentParser(prog="deploy.images check")
    parser.add_argument("image")
    parser.add_argument("--framework")
    parser.add_argument("--user", required=True, help="run the image as this user")
    opts = parser.parse_args(args)
    result = check_image(settings, opts.image, opts.user, opts.framework)
    for line in result.lines:
        print(line)
    log(result.message)
    return 0 if result.ok else 1


def check_image(settings, image, user, framework=None):
    """Run the check of ``image`` as ``user`` (portal/helper/imagecheck.py): a CheckResult."""
    jupyter_env, framework_env = Path(settings["envs"]["jupyter"]), None
    if framework:
        jupyter_env, framework_env = session_envs(settings, framework)
    steps = check_steps(jupyter_env, framework_env, framework, mount_points(settings))
    env = {"USER": user, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}  # runuser
    return run_check(image, steps, argv_prefix=as_user(user, []), env=env)


main = main_of({"ensure": cmd_ensure, "build": cmd_build, "check": cmd_check}, log,
               usage="ensure [--dest DIR] | build NAME --framework F [--dest DIR] "
                     "| check IMAGE --user U")  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
