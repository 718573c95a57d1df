"""Kernels of the portal's environments, for the single-user server.

Run by deploy/envs.sh with Debian's /usr/bin/python3 (standard library only)
once the environments are built::

    python3 deploy/kernels.py JUPYTER_ENV MODULEFILES_DIR FRAMEWORK_ENV...

It writes, into the data and config directories of the jupyter environment
(JUPYTER_ENV/share/jupyter/kernels, JUPYTER_ENV/etc/jupyter), which every
session's server reads:

- one kernel per framework environment, named after it (``pytorch``), shown as
  "Python 3 (PyTorch 2.13)" with the version installed in that environment;
- ``python3``, the jupyter environment's own ipykernel, shown as "Python 3";
- ``ir``, R from Debian's r-base-core and r-cran-irkernel, when installed;
- jupyter_server_config.py, which makes the kernel of the session's
  environment ($PORTAL_ENVIRONMENT) the default one;

``portal_tensorboard_magic`` (portal/session/tensorboard/magic.py) into the
site-packages of every Python environment with a kernel, which its kernel
loads: ``%tensorboard`` opens TensorBoard behind the session's login;

and an environment-modules modulefile per framework environment,
MODULEFILES_DIR/NAME/VERSION, for terminals (``module load pytorch``).

Kernels inherit the session's environment: the thread variables that the
batch script sets from the Slurm allocation (OMP_NUM_THREADS and the like)
are never set here. A framework kernel only puts its environment's bin first
on PATH, so ``!pip`` and ``%tensorboard`` find that environment's commands.

Files are written only when their content changes, so a run with nothing new
takes about a second. Kernels and modulefiles that this script wrote for an
environment no longer deployed are removed; nothing else is.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

DEPLOY_DIR = Path(__file__).resolve().parent
MAGIC_SOURCE = DEPLOY_DIR.parent / "portal" / "session" / "tensorboard" / "magic.py"
MAGIC_MODULE = "portal_tensorboard_magic"
# Starts the Python kernels with ipykernel's last TCP socket on ipc too.
LAUNCHER_SOURCE = DEPLOY_DIR.parent / "portal" / "session" / "kernel_launcher.py"
LAUNCHER_MODULE = "portal_kernel_launcher"

# Framework environment name -> (how people write it, the module it imports).
# An environment not listed here is shown under its own name.
FRAMEWORKS = {
    "pytorch": ("PyTorch", "torch"),
    "tensorflow": ("TensorFlow", "tensorflow"),
    "mxnet": ("MXNet", "mxnet"),
}

# Marks what this script wrote, so that it removes only its own files.
MARK = "portal"
MODULEFILE_HEADER = "#%Module1.0\n## Written by the portal's deploy/kernels.py.\n"

# Prints the version of the distribution that provides module argv[1].
VERSION_OF_MODULE = """
import importlib.metadata as md, sys
dists = md.packages_distributions().get(sys.argv[1], [])
print(md.version(dists[0]) if dists else "")
"""

# Prints R's bin directory, IRkernel's kernelspec folder and R's version.
R_FACTS = (
    'cat(R.home("bin"), system.file("kernelspec", package = "IRkernel"),'
    ' paste(R.version$major, R.version$minor, sep = "."), sep = "\\n")'
)


def log(message):
    print(f"[kernels] {message}", file=sys.stderr)


def write_if_changed(path, content):
    """Write ``content`` (str or bytes) to ``path`` unless it already holds it."""
    data = content.encode() if isinstance(content, str) else content
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o644)
    tmp.replace(path)
    return True


def short_version(version):
    """'2.13.0+cpu' -> '2.13'."""
    return ".".join(version.split("+")[0].split(".")[:2])


def installed_version(env, module):
    """The version of the distribution providing ``module`` in ``env``, or ''."""
    result = subprocess.run(
        [str(env / "bin" / "python"), "-c", VERSION_OF_MODULE, module],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout.strip()


def python_argv(env):
    """A Python kernel of ``env``, with the portal's ``%tensorboard``."""
    return [
        str(env / "bin" / "python"),
        "-m",
        LAUNCHER_MODULE,
        "-f",
        "{connection_file}",
        f"--ext={MAGIC_MODULE}",
    ]


def install_magic(env):
    """Copy portal/session/tensorboard/magic.py and the kernel launcher
    (portal/session/kernel_launcher.py) into the site-packages of ``env``."""
    purelib = subprocess.run(
        [
            str(env / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    if write_if_changed(Path(purelib) / f"{MAGIC_MODULE}.py", MAGIC_SOURCE.read_bytes()):
        log(f"%tensorboard of the portal in {env.name}")
    if write_if_changed(Path(purelib) / f"{LAUNCHER_MODULE}.py", LAUNCHER_SOURCE.read_bytes()):
        log(f"the portal's kernel launcher in {env.name}")


def kernel_json(spec):
    return json.dumps(spec, indent=1, sort_keys=True) + "\n"


def framework_kernel(env):
    """kernel.json of a framework environment, and its version."""
    label, module = FRAMEWORKS.get(env.name, (env.name, env.name))
    version = installed_version(env, module)
    display = f"{label} {short_version(version)}" if version else label
    spec = {
        "argv": python_argv(env),
        "display_name": f"Python 3 ({display})",
        "language": "python",
        # jupyter_client fills in ${PATH} from the session's environment.
        "env": {"PATH": f"{env / 'bin'}:${{PATH}}", "VIRTUAL_ENV": str(env)},
        "metadata": {"debugger": False, MARK: {"environment": env.name}},
    }
    return spec, label, version


def python3_kernel(jupyter_env):
    return {
        "argv": python_argv(jupyter_env),
        "display_name": "Python 3",
        "language": "python",
        "metadata": {"debugger": False, MARK: {"environment": "jupyter"}},
    }


def r_kernel():
    """kernel.json of IRkernel and the folder of its logos, or None without R."""
    if not shutil.which("Rscript"):
        return None
    result = subprocess.run(
        ["Rscript", "-e", R_FACTS],
        capture_output=True,
        text=True,
        timeout=60,
    )
    facts = result.stdout.split("\n")
    if result.returncode != 0 or len(facts) < 3 or not facts[1]:
        log("R has no IRkernel (Debian package r-cran-irkernel): no R kernel")
        return None
    r_bin, resources, version = facts[:3]
    spec = {
        "argv": [f"{r_bin}/R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"],
        "display_name": f"R {short_version(version)}",
        "language": "R",
        "metadata": {MARK: {"environment": "r"}},
    }
    return spec, Path(resources)


def install_kernel(kernels_dir, name, spec, resources=None):
    changed = write_if_changed(kernels_dir / name / "kernel.json", kernel_json(spec))
    if resources:
        for f in sorted(resources.iterdir()):
            if f.is_file() and f.name != "kernel.json":
                changed |= write_if_changed(kernels_dir / name / f.name, f.read_bytes())
    if changed:
        log(f"kernel {name}: {spec['display_name']}")


def is_ours(kernel_dir):
    try:
        spec = json.loads((kernel_dir / "kernel.json").read_text())
    except (OSError, ValueError):
        return False
    return MARK in spec.get("metadata", {})


def modulefile(env, label, version, others):
    """Puts ``env`` on PATH; one framework environment is loaded at a time."""
    return (
        f"{MODULEFILE_HEADER}"
        f'module-whatis "{label} {version} environment of the portal ({env})"\n'
        + "".join(f"conflict {other}\n" for other in others)
        + f"setenv VIRTUAL_ENV {env}\n"
        f"prepend-path PATH {env}/bin\n"
    )


def install_modulefiles(modules_dir, wanted):
    """``wanted``: {name: (version, content)}; stale files of ours go."""
    for name, (version, content) in wanted.items():
        if write_if_changed(modules_dir / name / version, content):
            log(f"modulefile {name}/{version}")
    if not modules_dir.is_dir():
        return
    for folder in modules_dir.iterdir():
        for f in folder.iterdir() if folder.is_dir() else []:
            if wanted.get(folder.name, (None,))[0] == f.name:
                continue
            if f.is_file() and f.read_text(errors="replace").startswith(MODULEFILE_HEADER):
                log(f"removing stale modulefile {f}")
                f.unlink()
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    jupyter_env, modules_dir = Path(argv[0]), Path(argv[1])
    framework_envs = [Path(a) for a in argv[2:]]
    kernels_dir = jupyter_env / "share" / "jupyter" / "kernels"

    kernels = {"python3": (python3_kernel(jupyter_env), None)}
    modulefiles = {}
    for env in framework_envs:
        spec, label, version = framework_kernel(env)
        kernels[env.name] = (spec, None)
        others = [e.name for e in framework_envs if e != env]
        modulefiles[env.name] = (version or "default", modulefile(env, label, version, others))
    r = r_kernel()
    if r:
        kernels["ir"] = r

    for env in [jupyter_env, *framework_envs]:
        install_magic(env)
    for name, (spec, resources) in kernels.items():
        install_kernel(kernels_dir, name, spec, resources)
    for kernel_dir in sorted(kernels_dir.iterdir()):
        if kernel_dir.name not in kernels and is_ours(kernel_dir):
            log(f"removing the kernel of an environment no longer deployed: {kernel_dir.name}")
            shutil.rmtree(kernel_dir)

    config = (DEPLOY_DIR / "jupyter_server_config.py").read_bytes()
    if write_if_changed(jupyter_env / "etc" / "jupyter" / "jupyter_server_config.py", config):
        log("server config: the session's environment is the default kernel")

    install_modulefiles(modules_dir, modulefiles)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
