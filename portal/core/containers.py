"""Container runtimes: the one interface through which a session or an
image's check runs a command inside an image.

A ``Runtime`` turns (image, command, what to bind) into an argument list;
nothing here runs anything. Charliecloud's ``ch-run`` (Debian's
charliecloud-runtime: unprivileged, user namespaces, the user's own uid) is
the runtime run and tested here; Apptainer's ``apptainer exec`` is what most
sites run, and is written out with its command line unit-tested only
(``tested_here`` is False: no Apptainer package reaches these machines).

What a session binds (``Binds``): the folder of the users' homes (each
home keeps its own mode: the others' stay closed, as outside), the site's
shared data, Slurm's configuration and munge's socket (the session's own
squeue and srun), and nothing else of the host's files but what the runtime
itself brings (Charliecloud binds /dev, /proc, /sys, /tmp, /etc/passwd and
/etc/group; the job's own GPU device files are in /dev, the device cgroup of
the Slurm job decides which open). An image has a folder at each of these
paths (a bind needs its mount point; the image's check looks). The
environment is the job's, passed through (ch-run), or given as
``APPTAINERENV_*`` variables (Apptainer, whose ``--cleanenv`` drops the
rest): never on the command line, where other users of the node read it.
"""

import re
from dataclasses import dataclass, field

# A bind's path: absolute, plain characters (no ``:`` or ``,``, which the
# runtimes' option syntax uses, and nothing a shell would expand).
PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]*$")
# Slurm's configuration and munge's socket: the session's squeue (its end)
# and srun (across its nodes) run inside the image with its slurm-client.
SLURM_BINDS = ("/etc/slurm", "/run/munge")


class ContainerError(ValueError):
    """A container request that cannot be run; the message names the fix."""


def checked_path(path, what):
    """``path`` when it is absolute and plain; ContainerError otherwise.

    >>> checked_path("/home/alice", "home")
    '/home/alice'
    >>> try:
    ...     checked_path("/data/a,b", "shared data")
    ... except ContainerError as e:
    ...     print(str(e)[:45], "...", str(e)[-15:])
    shared data must be an absolute path of lette ... not '/data/a,b'
    """
    if not isinstance(path, str) or not PATH_RE.fullmatch(path) or "/../" in f"{path}/":
        raise ContainerError(
            f"{what} must be an absolute path of letters, digits, '_', '.', '-' and '/', "
            f"not {str(path)[:80]!r}"
        )
    return path


@dataclass(frozen=True)
class Binds:
    """What a session's container sees of the host: ``(host, guest)`` pairs."""

    pairs: tuple = field(default_factory=tuple)

    @classmethod
    def for_session(cls, home_root, shared_data="", slurm=SLURM_BINDS):
        """The folder of the homes, the shared data and Slurm's client
        files, each at its own path.

        >>> Binds.for_session("/home", "/srv/data").guests()
        ['/home', '/srv/data', '/etc/slurm', '/run/munge']
        """
        paths = [checked_path(home_root, "the folder of the homes")]
        if shared_data:
            paths.append(checked_path(shared_data, "[data] shared_data"))
        paths += [checked_path(p, "a Slurm client path") for p in slurm]
        return cls(tuple((p, p) for p in paths))

    def guests(self):
        """The paths the image must have folders at."""
        return [guest for _, guest in self.pairs]


class Runtime:
    """A container runtime's command lines."""

    name = ""
    tested_here = False
    # The prefix of the variables that reach the container's environment
    # ("": the runtime passes the caller's whole environment through).
    env_prefix = ""

    def exec_argv(self, image, command, binds, cwd="", env_file=""):
        raise NotImplementedError


class Charliecloud(Runtime):
    """``ch-run IMAGE -- COMMAND`` with a directory image, as the user.

    >>> Charliecloud().exec_argv(
    ...     "/var/lib/portal/images/pytorch", ["python3", "-V"],
    ...     Binds.for_session("/home", "/srv/data", slurm=()), cwd="/home/alice")
    ... # doctest: +NORMALIZE_WHITESPACE
    ['ch-run', '--bind=/home:/home', '--bind=/srv/data:/srv/data',
     '--cd=/home/alice', '/var/lib/portal/images/pytorch', '--', 'python3', '-V']
    """

    name = "charliecloud"
    tested_here = True

    def exec_argv(self, image, command, binds, cwd="", env_file=""):
        checked_path(image, "the image")
        argv = ["ch-run", *(f"--bind={host}:{guest}" for host, guest in binds.pairs)]
        if cwd:
            argv.append(f"--cd={checked_path(cwd, 'the working folder')}")
        if env_file:  # the job's environment is passed through; a file adds to it
            argv.append(f"--set-env={checked_path(env_file, 'the environment file')}")
        return [*argv, image, "--", *command]


class Apptainer(Runtime):
    """``apptainer exec`` of a SIF image: the GPU driver's libraries (``--nv``),
    a clean environment with the job's given in a file. Not run here.

    A session's batch script exports its environment again as
    ``APPTAINERENV_NAME`` (``env_prefix``), which ``--cleanenv`` lets in as
    ``NAME``.

    >>> Apptainer().exec_argv(
    ...     "/images/pytorch.sif", ["python3", "-V"], Binds.for_session("/home", slurm=()),
    ...     cwd="/home/alice", env_file="/tmp/job/env")  # doctest: +NORMALIZE_WHITESPACE
    ['apptainer', 'exec', '--nv', '--cleanenv', '--env-file=/tmp/job/env',
     '--bind=/home:/home', '--pwd=/home/alice', '/images/pytorch.sif',
     'python3', '-V']
    """

    name = "apptainer"
    tested_here = False
    env_prefix = "APPTAINERENV_"

    def exec_argv(self, image, command, binds, cwd="", env_file=""):
        checked_path(image, "the image")
        argv = ["apptainer", "exec", "--nv", "--cleanenv"]
        if env_file:
            argv.append(f"--env-file={checked_path(env_file, 'the environment file')}")
        argv += [f"--bind={host}:{guest}" for host, guest in binds.pairs]
        if cwd:
            argv.append(f"--pwd={checked_path(cwd, 'the working folder')}")
        return [*argv, image, *command]


RUNTIMES = {runtime.name: runtime for runtime in (Charliecloud(), Apptainer())}


def runtime(name):
    """The runtime named ``name``; ContainerError naming those there are.

    >>> runtime("charliecloud").tested_here, runtime("apptainer").tested_here
    (True, False)
    """
    try:
        return RUNTIMES[name]
    except (KeyError, TypeError):
        raise ContainerError(
            f"no container runtime {str(name)[:40]!r}: use one of {', '.join(sorted(RUNTIMES))}"
        ) from None
