"""Running Slurm's commands, and reading what they print.

Commands run as argument lists (no shell) with a timeout. The parsers are
pure functions so they are tested without Slurm.
"""

import asyncio
import re

JOB_ID_RE = re.compile(r"^(\d+)(?:;[\w.-]+)?$")

# The whole environment of every Slurm command the hub runs, and of the sudo
# that runs one as a user: named here, nothing inherited from the hub (whose
# environment a user could otherwise read in their own processes).
MINIMAL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


class SlurmError(RuntimeError):
    """A Slurm command failed or timed out; ``str()`` says which and why."""


async def run(argv, *, input=None, env=None, timeout=20, with_stderr=False):
    """Run ``argv`` and return its stdout (and stderr, ``with_stderr``), stripped.

    The command gets ``env`` or else ``MINIMAL_ENV``, never the hub's own.

    Raises SlurmError with the command's stderr when it exits non-zero, and
    when it has not finished after ``timeout`` seconds (it is killed then).
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(MINIMAL_ENV if env is None else env),
    )
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(input.encode() if input is not None else None), timeout
        )
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise SlurmError(f"{argv[0]} gave no answer within {timeout} s") from None
    if proc.returncode != 0:
        message = err.decode(errors="replace").strip() or f"exit status {proc.returncode}"
        raise SlurmError(f"{_name(argv)} failed: {message}")
    if with_stderr:
        out += err
    return out.decode(errors="replace").strip()


def _name(argv):
    """The Slurm command in ``argv``, past any ``sudo ... --`` prefix."""
    if "--" in argv:
        return argv[argv.index("--") + 1]
    return argv[0]


def parse_job_id(output):
    """The job id printed by ``sbatch --parsable`` (``123`` or ``123;cluster``)."""
    lines = output.strip().splitlines()
    match = JOB_ID_RE.match(lines[-1].strip()) if lines else None
    if not match:
        raise SlurmError(f"sbatch printed no job id: {output.strip()[:200]!r}")
    return match.group(1)
