"""A fresh Debian login node with systemd as PID 1: a ``systemd-nspawn
--boot`` machine on the demo cluster's bridge.

The root is made once by ``mmdebstrap --variant=minbase`` with PACKAGES (a
login node's: systemd, sssd, the Slurm client, munge, sudo, nginx, ssh,
python3 and its venv) and kept under CACHE (root's alone), keyed by what it
is made of (the suite, the packages, this host's apt sources and RECIPE), so
``make purge`` keeps it and a changed list makes a new one (about 30 s).
Each boot lays an overlay over it (STATE/NAME/upper), so the cached root is
never written to: a machine always starts from the same fresh node.

The host runs no systemd, so the machine is not registered with machined
(``--register=no --keep-unit``) and ``systemd-run --machine`` or
``machinectl`` cannot reach it; commands run inside through ``nsenter``
into every namespace of the machine's PID 1 (``Machine.run``). Its network
is a veth on the bridge ([cluster] bridge, ``--network-bridge``), given its
address by the machine's own systemd-networkd. /home is bound from the
host, as a site's shared homes are.

    with Machine("login2", "10.200.0.30") as node:   # boots, waits for systemd
        node.run(["systemctl", "is-system-running"])
    # stopped (systemd's own poweroff), overlay and veth gone
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

SUITE = "bookworm"
PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "libpam-systemd",
    "python3", "python3-venv",
    "sssd-ldap", "libnss-sss", "libpam-sss", "ldap-utils",
    "slurm-client", "munge", "sudo",
    "nginx-light", "openssh-server", "cron",
    "ca-certificates", "iproute2", "procps", "curl",
)  # fmt: skip
# What a root is made of beyond the packages: bump it when ensure_root's
# steps change, so a root is made again.
RECIPE = 1  # 1: systemd-networkd enabled
CACHE = Path("/var/cache/portal-site")
STATE = Path("/var/lib/portal-site/machines")
KEEP_DAYS = 14  # a cached root not booted for this long is removed
# A machine's name is its hostname and the host's end of its veth, vb-NAME
# (an interface name has at most 15 characters).
NAME = re.compile(r"[a-z][a-z0-9-]{0,11}")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BOOTED = ("running", "degraded")


class MachineError(Exception):
    """The machine cannot be made, booted or reached; the message says why."""


# ---------------------------------------------------------------- pure


def root_key(sources, suite=SUITE, packages=PACKAGES, recipe=RECIPE):
    """The cached root's name: what it is made of, hashed.

    >>> key = root_key(["deb http://m.example/debian bookworm main"], packages=("systemd",))
    >>> key.startswith("bookworm-"), len(key)
    (True, 25)
    >>> key == root_key(["deb http://m.example/debian bookworm main"], packages=("sudo",))
    False
    """
    made_of = {"suite": suite, "packages": sorted(packages), "sources": list(sources),
               "recipe": recipe}  # fmt: skip
    digest = hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()
    return f"{suite}-{digest[:16]}"


def mmdebstrap_argv(root, sources, suite=SUITE, packages=PACKAGES):
    """mmdebstrap's command line for the login node's root.

    >>> mmdebstrap_argv("/c/.r.new", ["deb http://m.example/debian bookworm main"],
    ...                 packages=("systemd", "sudo"))  # doctest: +NORMALIZE_WHITESPACE
    ['mmdebstrap', '--quiet', '--variant=minbase', '--include=systemd,sudo', 'bookworm',
     '/c/.r.new', 'deb http://m.example/debian bookworm main']
    """
    include = f"--include={','.join(packages)}"
    return ["mmdebstrap", "--quiet", "--variant=minbase", include, suite, str(root), *sources]


def network_unit(address, prefix=24):
    """systemd-networkd's configuration of the machine's end of the veth:
    a fixed address on the cluster network, no DHCP (nothing serves it).

    >>> print(network_unit("10.200.0.30"), end="")
    [Match]
    Virtualization=container
    Name=host0
    <BLANKLINE>
    [Network]
    Address=10.200.0.30/24
    LinkLocalAddressing=no
    IPv6AcceptRA=no
    """
    return (
        "[Match]\nVirtualization=container\nName=host0\n\n"
        f"[Network]\nAddress={address}/{prefix}\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n"
    )


def nspawn_argv(root, name, bridge, binds=(), ro_binds=()):
    """systemd-nspawn's command line: ``root`` booted as machine ``name``
    on ``bridge``, with the host's ``binds`` (read-write) and ``ro_binds``
    (read-only), each at the same path, or at DST when given as ``SRC:DST``.

    >>> nspawn_argv("/m/root", "login2", "portal0", ["/home"], ["/opt/wheels"])
    ... # doctest: +NORMALIZE_WHITESPACE
    ['systemd-nspawn', '--quiet', '--directory=/m/root', '--boot', '--register=no',
     '--keep-unit', '--machine=login2', '--network-bridge=portal0', '--bind=/home',
     '--bind-ro=/opt/wheels']
    """
    argv = ["systemd-nspawn", "--quiet", f"--directory={root}", "--boot", "--register=no",
            "--keep-unit", f"--machine={name}", f"--network-bridge={bridge}"]  # fmt: skip
    return argv + [f"--bind={path}" for path in binds] + [f"--bind-ro={p}" for p in ro_binds]


def inside_argv(leader, argv, user=None):
    """``argv`` run in every namespace of the machine whose PID 1 is the
    host's ``leader``, with a clean environment (as root, or as ``user``).

    >>> inside_argv(42, ["id"], user="alice")  # doctest: +NORMALIZE_WHITESPACE
    ['nsenter', '--target=42', '--all', '--root', '--wd', 'env', '-i',
     'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'LANG=C.UTF-8',
     'TERM=dumb', 'HOME=/root', 'runuser', '-u', 'alice', '--', 'id']
    """
    env = ["env", "-i", f"PATH={PATH}", "LANG=C.UTF-8", "TERM=dumb", "HOME=/root"]
    as_user = ["runuser", "-u", user, "--"] if user else []
    return ["nsenter", f"--target={leader}", "--all", "--root", "--wd", *env, *as_user, *argv]


def valid_name(name):
    """
    >>> valid_name("login2")
    'login2'
    >>> valid_name("a-much-too-long-name")
    Traceback (most recent call last):
    ...
    tests.site.machine.MachineError: machine name 'a-much-too-long-name': lower-case letters, \
digits and '-', at most 12
    """
    if not NAME.fullmatch(name):
        raise MachineError(f"machine name {name!r}: lower-case letters, digits and '-', at most 12")
    return name


# ---------------------------------------------------------------- the root


def host_sources():
    """The Debian mirror (and security updates) this host's apt uses."""
    from deploy.images import host_sources as sources

    return sources()


def why_not_here():
    """Why no machine can boot on this host ("" when one can)."""
    if os.geteuid() != 0:
        return "systemd-nspawn needs root"
    for tool, package in (("systemd-nspawn", "systemd-container"), ("mmdebstrap", "mmdebstrap"),
                          ("nsenter", "util-linux")):  # fmt: skip
        if not shutil.which(tool):
            return f"no {tool}: install {package} (deploy/packages.sh)"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no /sys/fs/cgroup: systemd in the machine needs the host's cgroups"
    return ""


@contextmanager
def locked(path):
    """An exclusive lock on ``path`` (made if missing) while the block runs."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_root(packages=PACKAGES, log=print):
    """The cached root of ``packages``, made when missing: CACHE/roots/KEY.
    Roots of other lists (another machine's, an older one) are kept, and
    removed once unused for KEEP_DAYS."""
    sources = host_sources()
    key = root_key(sources, packages=packages)
    roots = CACHE / "roots"
    root = roots / key
    with locked(CACHE / ".lock"):
        os.chmod(CACHE, 0o700)  # the roots hold setuid files of their own: root's alone
        roots.mkdir(mode=0o700, exist_ok=True)
        if not root.is_dir():
            work = roots / f".{key}.new"
            shutil.rmtree(work, ignore_errors=True)
            log(f"making the root {root} ({SUITE}, {len(packages)} packages)")
            began = time.monotonic()
            subprocess.run(mmdebstrap_argv(work, sources, packages=packages), check=True)
            # offline: only the links of the unit's [Install]
            subprocess.run(["systemctl", f"--root={work}", "enable", "systemd-networkd"],
                           check=True, capture_output=True)  # fmt: skip
            work.rename(root)
            log(f"made {root} in {time.monotonic() - began:.0f} s")
        os.utime(root)  # its last use
        for old in roots.iterdir():
            if old != root and time.time() - old.stat().st_mtime > KEEP_DAYS * 86400:
                log(f"removing {old}, unused for {KEEP_DAYS} days")
                shutil.rmtree(old, ignore_errors=True)
    return root


# ---------------------------------------------------------------- a network of its own


def ensure_bridge(name, address, prefix=24):
    """The host's bridge ``name`` with ``address``/``prefix``, up: a network
    of its own for machines that are not the demo's (tests/site/foreign.py).
    True when it made it."""
    if Path(f"/sys/class/net/{name}/bridge").is_dir():
        return False
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
    subprocess.run(["ip", "address", "add", f"{address}/{prefix}", "dev", name], check=True)
    subprocess.run(["ip", "link", "set", name, "up"], check=True)
    return True


def remove_bridge(name):
    """The host's bridge ``name`` gone (nothing when there is none)."""
    if Path(f"/sys/class/net/{name}/bridge").is_dir():
        subprocess.run(["ip", "link", "delete", name, "type", "bridge"], check=True)


# ---------------------------------------------------------------- processes


def proc_status(pid):
    """{field: value} of /proc/PID/status; {} when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def nspawn_alive(pid):
    """The process ``pid`` is a live systemd-nspawn (not a zombie, not another's pid)."""
    status = proc_status(pid)
    return status.get("Name") == "systemd-nspawn" and not status.get("State", "Z").startswith("Z")


def leader_of(nspawn_pid):
    """The host's pid of the machine's PID 1 under ``nspawn_pid``; None before it exists."""
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            status = proc_status(entry.name)
            if status:
                children.setdefault(int(status["PPid"]), []).append((int(entry.name), status))
    todo = [nspawn_pid]
    while todo:
        for pid, status in children.get(todo.pop(), []):
            ns_pids = status.get("NSpid", "").split()
            if len(ns_pids) > 1 and ns_pids[-1] == "1":
                return pid
            todo.append(pid)
    return None


# ---------------------------------------------------------------- the machine


class Machine:
    """A machine NAME at ``address`` on ``bridge`` (from the demo's settings
    when not given: [cluster] network .30 and [cluster] bridge), from the
    root of ``packages``, with the host's ``binds`` (read-write) and
    ``ro_binds`` (read-only) at the same paths."""

    def __init__(self, name="login2", address=None, bridge=None, binds=("/home",), ro_binds=(),
                 packages=PACKAGES, log=print):  # fmt: skip
        from portal import settings as site_settings

        cluster = site_settings.load()["cluster"]
        self.name = valid_name(name)
        self.address = address or f"{cluster['network']}.30"
        self.bridge = bridge or cluster["bridge"]
        self.binds = tuple(binds)
        self.ro_binds = tuple(ro_binds)
        self.packages = tuple(packages)
        self.log = log
        self.dir = STATE / name
        self.root = self.dir / "root"  # the machine's / (the overlay), seen from the host
        self.console = self.dir / "console.log"
        self.pid_file = self.dir / "nspawn.pid"
        self._process = None

    def __enter__(self):
        self.boot()
        return self

    def __exit__(self, *exc):
        self.remove()

    # ------------------------------------------------ state

    @property
    def nspawn_pid(self):
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        return pid if self._alive(pid) else None

    def _alive(self, pid):
        # Our own child: by its exit status (Popen may return before its
        # exec shows in /proc); one booted by another process: by /proc.
        if self._process is not None and self._process.pid == pid:
            return self._process.poll() is None
        return nspawn_alive(pid)

    @property
    def leader(self):
        """The host's pid of the machine's systemd (PID 1 inside)."""
        pid = self.nspawn_pid
        leader = pid and leader_of(pid)
        if not leader:
            raise MachineError(f"machine {self.name} is not running ({self.console})")
        return leader

    def is_running(self):
        return self.nspawn_pid is not None

    def console_tail(self, lines=30):
        try:
            text = self.console.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # ------------------------------------------------ boot and stop

    def boot(self, timeout=120):
        """Boot a fresh machine (a new overlay over the cached root) and wait
        until its systemd says running or degraded; the seconds it took."""
        reason = why_not_here()
        if reason:
            raise MachineError(reason)
        if not Path(f"/sys/class/net/{self.bridge}/bridge").is_dir():
            raise MachineError(f"no bridge {self.bridge}: start the demo cluster (make up), "
                               "or make a network of its own (ensure_bridge)")  # fmt: skip
        if self.is_running():
            raise MachineError(f"machine {self.name} is already running: stop it first")
        lower = ensure_root(self.packages, self.log)
        self.remove()
        began = time.monotonic()
        for sub in ("upper", "work", "root"):
            (self.dir / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(STATE, 0o700)
        options = f"lowerdir={lower},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}"
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(self.root)],
                       check=True)  # fmt: skip
        os.chmod(self.root, 0o755)
        (self.root / "etc/hostname").write_text(f"{self.name}\n")
        # as Debian's installer writes it (minbase has none)
        (self.root / "etc/hosts").write_text(
            f"127.0.0.1 localhost\n127.0.1.1 {self.name}\n"
            "::1 localhost ip6-localhost ip6-loopback\n"
        )
        (self.root / "etc/systemd/network/80-container-host0.network").write_text(
            network_unit(self.address)
        )
        argv = nspawn_argv(self.root, self.name, self.bridge, self.binds, self.ro_binds)
        self.log(f"booting {self.name} at {self.address}: {' '.join(argv)}")
        with open(self.console, "wb") as console:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                start_new_session=True,  # a machine booted by the CLI outlives it
            )  # fmt: skip
        self.pid_file.write_text(f"{self._process.pid}\n")
        self.wait_booted(timeout)
        took = time.monotonic() - began
        self.log(f"{self.name} booted in {took:.1f} s")
        return took

    def system_state(self):
        """``systemctl is-system-running`` inside: starting, running, degraded, ..."""
        result = self.run(["systemctl", "is-system-running"], check=False, timeout=15)
        return result.stdout.strip() or result.stderr.strip()

    def wait_booted(self, timeout=120):
        deadline = time.monotonic() + timeout
        state = "not started"
        while time.monotonic() < deadline:
            if not self.is_running():
                raise MachineError(f"systemd-nspawn exited while booting {self.name}; "
                                   f"its console:\n{self.console_tail()}")  # fmt: skip
            pid = self.nspawn_pid
            if pid and leader_of(pid):
                state = self.system_state()
                if state in BOOTED:
                    return state
            time.sleep(0.5)
        raise MachineError(f"{self.name} not booted after {timeout} s (systemd: {state}); "
                           f"its console:\n{self.console_tail()}")  # fmt: skip

    def failed_units(self):
        result = self.run(["systemctl", "--failed", "--plain", "--no-legend"], check=False)
        return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]

    def stop(self, timeout=60):
        """Power the machine off (SIGTERM to nspawn: systemd's own shutdown),
        killing it after ``timeout`` s; then unmount its overlay."""
        pid = self.nspawn_pid
        if pid:
            self.log(f"stopping {self.name}")
            leader = leader_of(pid)
            deadline = time.monotonic() + timeout
            asked = 0.0
            while self._alive(pid) and time.monotonic() < deadline:
                # again every 5 s: a machine still booting may miss the first
                if time.monotonic() - asked > 5:
                    os.kill(pid, signal.SIGTERM)
                    asked = time.monotonic()
                time.sleep(0.2)
            if self._alive(pid):
                self.log(f"{self.name} did not power off in {timeout} s: killing it")
                if leader and proc_status(leader):
                    os.kill(leader, signal.SIGKILL)  # the whole PID namespace with it
                os.kill(pid, signal.SIGKILL)
                while self._alive(pid):
                    time.sleep(0.1)
        if os.path.ismount(self.root):
            subprocess.run(["umount", str(self.root)], check=True)
        veth = f"vb-{self.name}"
        if Path(f"/sys/class/net/{veth}").exists():
            subprocess.run(["ip", "link", "delete", veth], check=False)
        self.pid_file.unlink(missing_ok=True)

    def remove(self):
        """Stop the machine and remove everything it wrote (its overlay)."""
        self.stop()
        if self.dir.exists():
            shutil.rmtree(self.dir)

    # ------------------------------------------------ inside

    def run(self, argv, input=None, check=True, timeout=60, user=None):
        """``argv`` run inside the machine (as root, or ``user``); its
        CompletedProcess, with text output. MachineError when ``check`` and
        it fails, with what it printed."""
        result = subprocess.run(inside_argv(self.leader, argv, user), input=input,
                                capture_output=True, text=True, timeout=timeout)  # fmt: skip
        if check and result.returncode != 0:
            raise MachineError(f"in {self.name}, {' '.join(argv)} exited {result.returncode}: "
                               f"{(result.stderr or result.stdout).strip()}")  # fmt: skip
        return result

    def sh(self, script, **kwargs):
        """A shell script run inside as root (``sh -ec``)."""
        return self.run(["sh", "-ec", script], **kwargs)

    def write(self, path, content, mode="0644", owner="root:root"):
        """The file ``path`` inside, holding ``content`` (text or bytes, by
        stdin: never in an argv), owned by the machine's ``owner`` (its own
        users' ids)."""
        data = content.encode() if isinstance(content, str) else content
        script = 'umask 077; cat >"$1.new"; chown "$2" "$1.new"; chmod "$3" "$1.new"; mv "$1.new" "$1"'  # noqa: E501  # fmt: skip
        argv = inside_argv(self.leader, ["sh", "-ec", script, "sh", path, owner, mode])
        result = subprocess.run(argv, input=data, capture_output=True, timeout=60)
        if result.returncode != 0:
            raise MachineError(f"in {self.name}, writing {path} failed: "
                               f"{result.stderr.decode(errors='replace').strip()}")  # fmt: skip

    def read(self, path):
        return self.run(["cat", path]).stdout

    def wait_for(self, what, argv, timeout=30, user=None):
        """Run ``argv`` inside until it succeeds; its result. MachineError
        naming ``what`` and the last output after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.run(argv, check=False, user=user)
            if result.returncode == 0:
                return result
            if time.monotonic() > deadline:
                said = (result.stderr or result.stdout).strip()
                raise MachineError(f"in {self.name}, {what} not after {timeout} s: "
                                   f"{' '.join(argv)}: {said}")  # fmt: skip
            time.sleep(0.5)
