"""Container runtimes: the one interface through which a session or an
image's check runs a command inside an image.

A ``Runtime`` turns (image, command, what to bind) into an argument list;
nothing here runs anything. Charliecloud's ``ch-run`` (Debian's
charliecloud-runtime: unprivileged, user namespaces, the user's own uid) is
the runtime run and tested here; Apptainer's ``apptainer exec`` is what most
sites run, and is written out with its command line unit-tested only
(``tested_here`` is False: no Apptainer package reaches these machines).

What a session binds (``Binds``): its user's home at the same path, the
site's shared data, and nothing else of the host's files but what the
runtime itself brings (Charliecloud binds /dev, /proc, /sys, /tmp, /etc/passwd
and /etc/group; the job's own GPU device files are in /dev, the device cgroup
of the Slurm job decides which open). The environment is the job's, passed
through (ch-run) or passed in a file (Apptainer, whose ``--cleanenv`` drops
it): never on the command line, where other users of the node read it.
"""

import re
from dataclasses import dataclass, field

# A bind's path: absolute, plain characters (no ``:`` or ``,``, which the
# runtimes' option syntax uses, and nothing a shell would expand).
PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]*$")


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
    def for_session(cls, home, shared_data=""):
        """The user's home and the shared data, each at its own path."""
        pairs = [(checked_path(home, "the home folder"),) * 2]
        if shared_data:
            pairs.append((checked_path(shared_data, "[data] shared_data"),) * 2)
        return cls(tuple(pairs))


class Runtime:
    """A container runtime's command lines."""

    name = ""
    tested_here = False

    def exec_argv(self, image, command, binds, env_file=""):
        raise NotImplementedError


class Charliecloud(Runtime):
    """``ch-run IMAGE -- COMMAND`` with a directory image, as the user.

    >>> Charliecloud().exec_argv(
    ...     "/var/lib/portal/images/pytorch", ["python3", "-V"],
    ...     Binds.for_session("/home/alice", "/srv/data"))  # doctest: +NORMALIZE_WHITESPACE
    ['ch-run', '--bind=/home/alice:/home/alice', '--bind=/srv/data:/srv/data',
     '--cd=/home/alice', '/var/lib/portal/images/pytorch', '--', 'python3', '-V']
    """

    name = "charliecloud"
    tested_here = True

    def exec_argv(self, image, command, binds, env_file=""):
        checked_path(image, "the image")
        argv = ["ch-run", *(f"--bind={host}:{guest}" for host, guest in binds.pairs)]
        if binds.pairs:
            argv.append(f"--cd={binds.pairs[0][1]}")
        if env_file:  # the job's environment is passed through; a file adds to it
            argv.append(f"--set-env={checked_path(env_file, 'the environment file')}")
        return [*argv, image, "--", *command]


class Apptainer(Runtime):
    """``apptainer exec`` of a SIF image: the GPU driver's libraries (``--nv``),
    a clean environment with the job's given in a file. Not run here.

    >>> Apptainer().exec_argv(
    ...     "/images/pytorch.sif", ["python3", "-V"], Binds.for_session("/home/alice"),
    ...     env_file="/tmp/job/env")  # doctest: +NORMALIZE_WHITESPACE
    ['apptainer', 'exec', '--nv', '--cleanenv', '--env-file=/tmp/job/env',
     '--bind=/home/alice:/home/alice', '--pwd=/home/alice', '/images/pytorch.sif',
     'python3', '-V']
    """

    name = "apptainer"
    tested_here = False

    def exec_argv(self, image, command, binds, env_file=""):
        checked_path(image, "the image")
        argv = ["apptainer", "exec", "--nv", "--cleanenv"]
        if env_file:
            argv.append(f"--env-file={checked_path(env_file, 'the environment file')}")
        argv += [f"--bind={host}:{guest}" for host, guest in binds.pairs]
        if binds.pairs:
            argv.append(f"--pwd={binds.pairs[0][1]}")
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
