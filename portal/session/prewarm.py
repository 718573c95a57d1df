"""The session's pre-warmed kernel: started as the job starts, handed to the
first request for a kernel of its kernelspec.

The launcher (``portal-session``, ``launch.main``) calls ``start_from_environ``
just before it runs the Jupyter server, in the same process: a kernel of the
session's environment (``$PORTAL_ENVIRONMENT``, the kernelspec deploy/kernels.py
names after it) starts beside the server's own start, and imports the modules
the hub named (``$PORTAL_PREWARM``, from [session] prewarm_imports) before it
answers its first message (IPython's ``exec_lines``: nothing is bound in the
user's namespace, no execution count is spent; a failed import is printed to
the job's log). Its connection file and ipc sockets are in the session's
runtime folder, as every kernel's, and it starts with the TensorBoard API
the server extension tells kernels of (``tensorboard_api``).

The server's kernel manager (``portal.session.kernelpool``) hands it to the
first kernel start of that kernelspec: the kernel's process is adopted
(``take``) under the id of its connection file, then told, in one silent
execution (``handover_code``), the folder and the environment a kernel
started for that request would have had (``env_changes``: a notebook's
``JPY_SESSION_NAME``, what the server set after the kernel started).
Kernels after it start fresh: no other is pre-warmed (a second would cost
the memory of another import for the whole session, and compete for the
cores with the user's first cells). One never asked for stays out of the
session's list of kernels and ends with the server.

Standard library only at import; ``jupyter_core.paths`` (the server's)
when a kernel is started.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from string import Template

from portal.contract import TENSORBOARD_API, SessionEnv

MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# What jupyter_client's launcher adds to each kernel's environment itself.
LAUNCHER_VARIABLES = ("JPY_PARENT_PID",)
# IPython's pre-flight code (run before the kernel answers): the imports,
# each failure printed to the job's log, no name left in the user's namespace.
# The cyclic collector is off while they run: a framework's import makes
# millions of objects, few of them garbage, and the collector's passes over
# them were a fifth of TensorFlow's import here. What they made is then frozen
# (gc.freeze: out of every later pass), so the user's cells do not pay for
# scanning it either.
IMPORTS = """\
import gc, sys
gc.disable()
try:
    for name in modules:
        try:
            __import__(name)
        except Exception as e:
            print(f"portal: the pre-warmed kernel could not import {name}: {e!r}",
                  file=sys.__stderr__)
finally:
    gc.freeze()
    gc.enable()
"""
HANDOVER = """\
import os
os.chdir(cwd)
os.environ.update(changed)
for name in removed:
    os.environ.pop(name, None)
shell = get_ipython()
shell.user_ns["_dh"][:] = [cwd]
if "JPY_SESSION_NAME" in changed:
    shell.user_ns["__session__"] = changed["JPY_SESSION_NAME"]
"""


def modules_of(text):
    """The module names of ``$PORTAL_PREWARM``; anything else is left out.

    >>> modules_of("torch, matplotlib.pyplot,,os;rm -rf")
    ['torch', 'matplotlib.pyplot']
    """
    names = (name.strip() for name in text.split(","))
    return [name for name in names if MODULE_NAME.fullmatch(name)]


def prewarm_argv(argv, connection_file, modules, resource_dir="", prefix=sys.prefix):
    """The kernelspec's ``argv``, formatted as jupyter_client does, with the
    imports as IPython's ``exec_lines``.

    >>> argv = prewarm_argv(["python", "-m", "k", "-f", "{connection_file}"], "/r/k.json",
    ...                     ["torch"])
    >>> argv[0] == sys.executable, argv[4], argv[5].startswith("--IPKernelApp.exec_lines=exec(")
    (True, '/r/k.json', True)
    """
    values = {"connection_file": connection_file, "resource_dir": resource_dir, "prefix": prefix}
    pattern = re.compile(r"\{([A-Za-z0-9_]+)\}")
    cmd = [pattern.sub(lambda m: values.get(m.group(1), m.group()), arg) for arg in argv]
    if cmd and cmd[0] in ("python", f"python{sys.version_info[0]}"):
        cmd[0] = sys.executable
    line = f"exec({IMPORTS!r}, {{'modules': {list(modules)!r}}});"
    return [*cmd, f"--IPKernelApp.exec_lines={line}"]


def kernel_env(base, spec_env, language="python"):
    """The environment jupyter_client gives a kernel: ``base`` with the
    kernelspec's ``env`` (``${NAME}`` filled in from ``base``) over it.

    >>> kernel_env({"PATH": "/bin", "PYTHONEXECUTABLE": "x"}, {"PATH": "/e/bin:${PATH}"})
    {'PATH': '/e/bin:/bin'}
    """
    env = dict(base)
    env.update({k: Template(v).safe_substitute(base) for k, v in spec_env.items()})
    if language.lower().startswith("python"):
        env.pop("PYTHONEXECUTABLE", None)
    return env


def env_changes(started_with, wanted):
    """``(changed, removed)``: what turns the environment a kernel started
    with into the one ``wanted`` (the launcher's own variables aside).

    >>> env_changes({"A": "1", "B": "2", "JPY_PARENT_PID": "7"},
    ...             {"A": "1", "B": "3", "C": "4"})
    ({'B': '3', 'C': '4'}, [])
    >>> env_changes({"A": "1", "T": "x"}, {"A": "1"})
    ({}, ['T'])
    """
    changed = {k: v for k, v in wanted.items() if started_with.get(k) != v}
    removed = sorted(k for k in started_with if k not in wanted and k not in LAUNCHER_VARIABLES)
    for name in LAUNCHER_VARIABLES:
        changed.pop(name, None)
    return changed, removed


def handover_code(cwd, changed, removed):
    """The code a pre-warmed kernel runs, silently, when it is handed over:
    into ``cwd``, with the environment changed. One expression statement: it
    binds no name in the user's namespace.

    >>> ns = {}
    >>> class Shell:
    ...     user_ns = {"_dh": ["/home/u"]}
    >>> before = os.getcwd()
    >>> exec(handover_code("/", {"PORTAL_T": "1", "JPY_SESSION_NAME": "/n.ipynb"}, []),
    ...      {"get_ipython": Shell})
    >>> os.getcwd(), os.environ.pop("PORTAL_T"), Shell.user_ns
    ('/', '1', {'_dh': ['/'], '__session__': '/n.ipynb'})
    >>> os.chdir(before); del os.environ["JPY_SESSION_NAME"]
    """
    values = {"cwd": str(cwd), "changed": dict(changed), "removed": list(removed)}
    return f"exec({HANDOVER!r}, {{'get_ipython': get_ipython, **{values!r}}})"


@dataclass
class WarmKernel:
    """A pre-warmed kernel's process and what it was started with."""

    kernel_name: str
    process: object  # subprocess.Popen
    connection_file: str
    connection_info: dict
    env: dict
    cwd: str
    modules: list = field(default_factory=list)

    @property
    def kernel_id(self):
        """The id in its connection file's name, ``kernel-ID.json``: the id
        the kernel manager gives it, unless the request names one.

        >>> WarmKernel("k", None, "/r/kernel-3f2a.json", {}, {}, "/").kernel_id
        '3f2a'
        """
        name = os.path.basename(self.connection_file)
        return name.removeprefix("kernel-").removesuffix(".json")

    def alive(self):
        return self.process.poll() is None


class Pool:
    """At most one pre-warmed kernel per kernelspec, each handed out once."""

    def __init__(self):
        self._kernels = {}
        self._lock = threading.Lock()

    def put(self, kernel):
        with self._lock:
            self._kernels[kernel.kernel_name] = kernel

    def take(self, kernel_name):
        """The kernel of ``kernel_name``, out of the pool; None when there is
        none, or when it has ended (then forgotten)."""
        with self._lock:
            kernel = self._kernels.pop(kernel_name, None)
        if kernel is not None and not kernel.alive():
            print(
                f"portal: the pre-warmed {kernel_name} kernel had ended"
                f" ({kernel.process.returncode}): a new one is started",
                file=sys.stderr,
            )
            remove_files(kernel)
            return None
        return kernel

    def give_back(self, kernel):
        """Put back a kernel that was taken but not adopted."""
        with self._lock:
            self._kernels.setdefault(kernel.kernel_name, kernel)

    def names(self):
        with self._lock:
            return sorted(self._kernels)

    def close(self, timeout=5):
        """End every kernel still in the pool (its process group, as
        jupyter_client ends a kernel's), and remove its files."""
        with self._lock:
            kernels, self._kernels = list(self._kernels.values()), {}
        for kernel in kernels:
            stop(kernel, timeout)
            remove_files(kernel)


def stop(kernel, timeout=5):
    """End the kernel: SIGTERM to its process group, SIGKILL if it stays."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(kernel.process.pid, signum)
        except OSError:
            kernel.process.send_signal(signum)
        try:
            kernel.process.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            continue


def remove_files(kernel):
    """The kernel's connection file and its ipc sockets."""
    info = kernel.connection_info
    paths = [kernel.connection_file]
    if info.get("transport") == "ipc":
        ports = ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")
        paths += [f"{info['ip']}-{info[p]}" for p in ports if p in info]
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass


POOL = Pool()
"""The process's pool: filled by the launcher, emptied by the kernel manager."""


def find_kernelspec(kernel_name, dirs):
    """``(resource_dir, spec)`` of the kernelspec ``kernel_name``: the first
    of ``dirs`` holding a folder of that name (case aside, as jupyter_client
    lists them) with a ``kernel.json``, and that file read; None when none
    does. ``dirs``: Jupyter's kernel folders in jupyter_client's order of
    search (``jupyter_core.paths.jupyter_path("kernels")``), the user's own
    first."""
    for folder in dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name, "kernel.json")
            if name.lower() == kernel_name.lower() and os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    return os.path.join(folder, name), json.load(f)
    return None


def ipc_connection(ip, kernel_name, key):
    """The connection of a kernel over ipc at ``ip`` (a path prefix), as
    ``jupyter_client.connect.write_connection_file`` makes it: its five
    "ports" the first numbers N with no file ``ip-N`` yet, in its order.

    >>> ipc_connection("/nowhere/k-ipc", "pytorch", "s3cret")["control_port"]
    4
    """
    ports, number = [], 1
    for _ in range(5):
        while os.path.exists(f"{ip}-{number}"):
            number += 1
        ports.append(number)
        number += 1
    names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    return {
        **dict(zip(names, ports, strict=True)),
        "ip": ip,
        "key": key,
        "transport": "ipc",
        "signature_scheme": "hmac-sha256",
        "kernel_name": kernel_name,
    }


def start(kernel_name, modules, runtime_dir, environ=os.environ, cwd=None, dirs=None):
    """Start a kernel of ``kernel_name`` importing ``modules``, over ipc in
    ``runtime_dir``; None when the kernelspec is not a Python one.

    The standard library and ``jupyter_core.paths`` only (``dirs`` where the
    kernelspecs are, Jupyter's kernel folders unless given): the launcher
    runs this before the server, and importing jupyter_client (its package
    imports the whole client) took 0.12-0.27 s, which the kernel's own
    imports waited for. It does what jupyter_client does for the server's
    kernels: the kernelspec as ``KernelSpecManager`` finds it (not
    ``get_kernel_spec``, which makes its provisioner factory, a singleton,
    before the server's configuration is there), the connection file as
    ``write_connection_file`` writes it (mode 0600, never another's), the
    process as ``launch_kernel`` starts it (a session of its own, stdin
    closed, ``JPY_PARENT_PID``)."""
    import uuid

    if dirs is None:
        from jupyter_core.paths import jupyter_path

        dirs = jupyter_path("kernels")
    found = find_kernelspec(kernel_name, dirs)
    if found is None:
        raise LookupError(f"no kernelspec {kernel_name!r} in {', '.join(dirs)}")
    resource_dir, spec = found
    language = str(spec.get("language") or "")
    if not language.lower().startswith("python"):
        return None
    kernel_id = str(uuid.uuid4())
    connection_file = os.path.join(runtime_dir, f"kernel-{kernel_id}.json")
    ip = os.path.join(runtime_dir, f"kernel-{kernel_id}-ipc")
    info = ipc_connection(ip, kernel_name, str(uuid.uuid4()))
    descriptor = os.open(connection_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(descriptor, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    argv = prewarm_argv(spec["argv"], connection_file, modules, resource_dir)
    env = kernel_env(environ, spec.get("env") or {}, language)
    env["JPY_PARENT_PID"] = str(os.getpid())
    cwd = cwd or os.getcwd()
    process = subprocess.Popen(
        [os.path.expanduser(arg) for arg in argv],
        stdin=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    process.stdin.close()
    info = dict(info, key=info["key"].encode())
    return WarmKernel(kernel_name, process, connection_file, info, env, cwd, list(modules))


def tensorboard_api(environ):
    """What the server extension will tell its kernels of its TensorBoard API
    (``portal.session.extension.api_url``: the server's own address and
    prefix, from ``$JUPYTERHUB_SERVICE_URL`` once the launcher put the port
    in), so that the pre-warmed kernel starts with it as a later one would.

    >>> tensorboard_api({"JUPYTERHUB_SERVICE_URL": "https://10.0.0.2:4242/user/a/"})
    {'PORTAL_TENSORBOARD_API': 'https://10.0.0.2:4242/user/a/portal/api/tensorboards'}
    >>> tensorboard_api({"JUPYTERHUB_SERVICE_URL": "https://10.0.0.2:0/user/a/"})
    {}
    """
    url = environ.get("JUPYTERHUB_SERVICE_URL", "")
    if not re.fullmatch(r"https?://[^/]+:[1-9][0-9]*/(.*/)?", url):
        return {}
    return {TENSORBOARD_API: url + "portal/api/tensorboards"}


def start_from_environ(environ=os.environ, pool=POOL):
    """The launcher's part: the session's pre-warmed kernel, when the hub
    asked for one (``$PORTAL_PREWARM``) and the session has an environment."""
    told = SessionEnv.from_environ(environ)
    modules = modules_of(told.prewarm)
    if not modules or not told.environment:
        return None
    runtime_dir = environ.get("JUPYTER_RUNTIME_DIR")
    if not runtime_dir:
        from jupyter_core.paths import jupyter_runtime_dir

        runtime_dir = jupyter_runtime_dir()
        os.makedirs(runtime_dir, mode=0o700, exist_ok=True)
    kernel = start(told.environment, modules, runtime_dir, {**environ, **tensorboard_api(environ)})
    if kernel is None:
        print(
            f"portal: kernel {told.environment} is not a Python kernel: none pre-warmed",
            file=sys.stderr,
        )
        return None
    pool.put(kernel)
    print(f"portal: timeline prewarm {time.time():.6f}", file=sys.stderr)  # bench/timeline.py
    print(
        f"portal: pre-warmed kernel {told.environment} (pid {kernel.process.pid})"
        f" importing {', '.join(modules)}",
        file=sys.stderr,
    )
    return kernel
