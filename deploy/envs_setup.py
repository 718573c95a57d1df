"""The Python environments, built from Debian's /usr/bin/python3 under the
world-readable [envs] prefix (jobs run them as the LDAP user, who cannot
read /root). Each is rebuilt only when its requirements (or, for the hub,
the repository's path or setup.cfg) changed: a stamp file in it holds what
it was built from. Then the kernels of the framework environments and R go
into the jupyter environment (deploy/kernels.py). deploy/envs.sh runs this.

The portal package goes into the jupyter environment too, for its server
extensions (portal.session, enabled by the etc/jupyter file it
installs): a copy, not editable (users cannot read this checkout),
re-installed when a file of the package changes. Into the hub's it goes
editable, from this checkout (re-done when the checkout moves).

One environment per framework; [envs] framework_build picks CPU or CUDA
builds (deploy/frameworks/NAME-BUILD.txt). The two builds are different
distributions of the same modules (tensorflow-cpu and tensorflow, mxnet and
mxnet-cu117): an environment whose build changes is made afresh, not
installed over. Environments without a .portal-build file were built before
there was a choice: CPU.

jsonschema imports rfc3987-syntax, when installed (jupyter-events asks for
jsonschema[format-nongpl]), at its own import, and rfc3987-syntax compiles
~35 Lark parsers then: 1.5 s of every Jupyter server's and hub's start on
this machine. No Jupyter or JupyterHub schema uses the iri formats it checks
(jupyter_server#1559): it is removed.

A session's terminal is a login shell, whose /etc/profile resets PATH:
deploy/profile-portal.sh, installed as /etc/profile.d/portal.sh, loads the
session's environment again there.
"""

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.base import DEPLOY_DIR, REPO_DIR, DeployError, logger, main_of, run

log = logger("envs")

# What the jupyter environment's copy of the portal package is made of.
PACKAGE_FILES = (
    "portal",
    "spawners",
    "setup.cfg",
    "pyproject.toml",
    "README.md",
    "deploy/portal.toml",
)
# The files in an environment that say what it was built from, each
# written once its part of the build is done: the requirements' stamp, the
# framework's build (cpu or cuda), the portal package's stamp.
STAMP_FILES = (".portal-stamp", ".portal-build", ".portal-package")
# pip's noise about this machine's missing local index folders.
PIP_NOISE = "is ignored: it is neither"
MODULESPATH = Path("/etc/environment-modules/modulespath")
PROFILE = Path("/etc/profile.d/portal.sh")


# ---------------------------------------------------------------- pure


def requirements_stamp(text):
    """What an environment's .portal-stamp holds: the requirements' sha256,
    and a space (where extra pip arguments once followed)."""
    return f"{hashlib.sha256(text).hexdigest()} "


def package_stamp(repo):
    """The sha256 of ``sha256sum`` over the package's files, sorted by path,
    outside __pycache__ (as ``find | sort -z | xargs sha256sum | sha256sum``)."""
    paths = []
    for name in PACKAGE_FILES:
        if (repo / name).is_file():
            paths.append(name)
        for folder, _, files in os.walk(repo / name):
            rel = Path(folder).relative_to(repo)
            if "__pycache__" not in rel.parts:
                paths += [str(rel / f) for f in files]
    lines = "".join(
        f"{hashlib.sha256((repo / p).read_bytes()).hexdigest()}  {p}\n"
        for p in sorted(paths, key=os.fsencode)
    )
    return hashlib.sha256(lines.encode()).hexdigest()


def hub_stamp(repo, setup_cfg):
    return f"{repo} {hashlib.sha256(setup_cfg).hexdigest()}"


# ---------------------------------------------------------------- builders


def read(path, default=""):
    try:
        return Path(path).read_text().rstrip("\n")
    except OSError:
        return default


def built_from(env):
    """What ``env`` was built from: ``{stamp file: its content}``, of the
    STAMP_FILES it has (deploy/images.py rebuilds an image when this changes
    for an environment it copied)."""
    return {name: read(Path(env) / name) for name in STAMP_FILES if (Path(env) / name).is_file()}


def pip(env, *args):
    proc = subprocess.Popen(
        [f"{env}/bin/python", "-m", "pip", "-q", *args], stderr=subprocess.PIPE, text=True
    )
    for line in proc.stderr:
        if PIP_NOISE not in line:
            sys.stderr.write(line)
    if proc.wait():
        raise DeployError(f"pip {' '.join(args)} failed in {env}")


def build_env(env, reqs):
    stamp, want = env / ".portal-stamp", requirements_stamp(reqs.read_bytes())
    if read(stamp) == want:
        return
    log(f"building {env}")
    if not os.access(env / "bin" / "python", os.X_OK):
        run(["/usr/bin/python3", "-m", "venv", str(env)])
    pip(env, "install", "--upgrade", "pip")
    pip(env, "install", "-r", str(reqs))
    stamp.write_text(want + "\n")


def without_slow_iri_check(env):
    if glob.glob(f"{env}/lib/python3*/site-packages/rfc3987_syntax"):
        log(f"removing rfc3987-syntax from {env} (1.5 s of each start)")
        pip(env, "uninstall", "-y", "rfc3987-syntax")


def install_package_copy(env):
    # the server extension was portal.tensorboard before it became portal.session
    stale = env / "etc" / "jupyter" / "jupyter_server_config.d" / "portal-tensorboard.json"
    if stale.exists():
        log(f"removing {stale} (the extension is portal.session now)")
        stale.unlink()
    stamp, want = env / ".portal-package", package_stamp(REPO_DIR)
    if read(stamp) == want:
        return
    log(f"installing the portal package into {env}")
    with tempfile.TemporaryDirectory() as src:
        for name in PACKAGE_FILES:
            if (REPO_DIR / name).is_dir():
                ignore = shutil.ignore_patterns("__pycache__")
                shutil.copytree(REPO_DIR / name, Path(src, name), ignore=ignore)
            else:
                Path(src, name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO_DIR / name, Path(src, name))
        pip(env, "install", "--no-deps", "--force-reinstall", src)
    stamp.write_text(want + "\n")


def framework_envs(settings):
    prefix, build = Path(settings["envs"]["prefix"]), settings["envs"]["framework_build"]
    envs = []
    for fw in settings["envs"]["frameworks"]:
        reqs = DEPLOY_DIR / "frameworks" / f"{fw}-{build}.txt"
        if not reqs.is_file():
            raise DeployError(
                f"no {reqs}: check [envs] frameworks and framework_build (cpu or cuda)"
            )
        env = prefix / "envs" / fw
        built = read(env / ".portal-build", "cpu")
        if env.is_dir() and built != build:
            log(f"removing {env} ({built} build) for the {build} build")
            shutil.rmtree(env)
        build_env(env, reqs)
        if read(env / ".portal-build") != build:
            (env / ".portal-build").write_text(build + "\n")
        envs.append(env)
    return envs


def cmd_build(settings):
    os.umask(0o022)
    prefix, jupyter = Path(settings["envs"]["prefix"]), Path(settings["envs"]["jupyter"])
    (prefix / "envs").mkdir(parents=True, exist_ok=True)
    for folder in (prefix, prefix / "envs"):
        folder.chmod(0o755)
    build_env(jupyter, DEPLOY_DIR / "requirements-jupyter.txt")
    without_slow_iri_check(jupyter)
    install_package_copy(jupyter)
    fw_envs = framework_envs(settings)
    # Their kernels (and R's) in the jupyter environment, the session's
    # default kernel, and modulefiles for terminals.
    modulefiles = prefix / "modulefiles"
    kernels = ["/usr/bin/python3", str(DEPLOY_DIR / "kernels.py"), str(jupyter), str(modulefiles)]
    run([*kernels, *map(str, fw_envs)])
    if MODULESPATH.is_file() and str(modulefiles) not in MODULESPATH.read_text().splitlines():
        log(f"adding {modulefiles} to {MODULESPATH}")
        with MODULESPATH.open("a") as f:
            f.write(f"{modulefiles}\n")
    profile = DEPLOY_DIR / "profile-portal.sh"
    if not PROFILE.is_file() or PROFILE.read_bytes() != profile.read_bytes():
        run(["install", "-m", "644", str(profile), str(PROFILE)])
    hub = prefix / "envs" / "hub"
    build_env(hub, DEPLOY_DIR / "requirements-hub.txt")
    without_slow_iri_check(hub)
    stamp, want = (
        hub / ".portal-package",
        hub_stamp(REPO_DIR, (REPO_DIR / "setup.cfg").read_bytes()),
    )
    if read(stamp) != want:
        log(f"installing the portal package from {REPO_DIR}")
        pip(hub, "install", "--no-deps", "-e", str(REPO_DIR))
        stamp.write_text(want + "\n")


main = main_of({"build": cmd_build}, log)

if __name__ == "__main__":
    sys.exit(main())
