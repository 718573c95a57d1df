"""Every Slurm command the portal runs: its command line, how it runs (as the
hub's account, or as a user through the sudoers rule), its environment and
timeout, and which parser reads its output.

Commands run as argument lists (no shell), with ``MINIMAL_ENV`` and never
the caller's environment, and are killed after ``timeout`` seconds. A
command that fails or times out raises SlurmError with Slurm's own message.
"""

import asyncio

from .model import format_duration
from .parse import (
    SlurmError,
    max_time_minutes,
    parse_assoc_users,
    parse_end_reason,
    parse_gpu_indices,
    parse_job_fields,
    parse_job_id,
    parse_running_limit,
    parse_sinfo,
    parse_squeue,
    parse_will_run,
)

# The whole environment of every Slurm command the hub runs, and of the sudo
# that runs one as a user: named here, nothing inherited from the hub (whose
# environment a user could otherwise read in their own processes).
MINIMAL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}

SQUEUE_FORMAT = "%i|%u|%T|%N|%r|%S|%e|%b|%P|%l"
SINFO_FIELDS = [
    "NodeList:128",
    "Partition:64",
    "Gres:128",
    "GresUsed:128",
    "CPUsState:32",
    "StateCompact:24",
    "Memory:16",
    "AllocMem:16",
    "Time:24",
]

__all__ = ["MINIMAL_ENV", "SlurmError", "as_user", "run"]


async def run(argv, *, input=None, env=None, timeout=20, with_stderr=False):
    """Run ``argv`` and return its stdout (and stderr, ``with_stderr``), stripped.

    The command gets ``env`` or else ``MINIMAL_ENV``, never the caller's own.
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
        raise SlurmError(f"{_name(argv)} gave no answer within {timeout} s") from None
    except asyncio.CancelledError:  # the caller gave up: no command is left behind
        if proc.returncode is None:
            proc.kill()
            await asyncio.shield(proc.wait())
        raise
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


def as_user(username, argv):
    """``argv`` run as ``username`` through the sudoers rule (deploy/hub.sh):
    never ``-E``; sudo resets the environment, and ``run`` gives sudo itself
    only ``MINIMAL_ENV``. ``-n``: fail at once rather than ask for a password."""
    return ["sudo", "-n", "-u", username, "--", *argv]


# -- as the hub's account --------------------------------------------------


async def queue(job_name, timeout):
    """Every job named ``job_name`` (one squeue for all sessions): ``{id: Job}``."""
    argv = ["squeue", "--noheader", "--name", job_name, "--format", SQUEUE_FORMAT]
    return parse_squeue(await run(argv, timeout=timeout))


async def partitions(timeout):
    """Every node, by partition (one sinfo): ``{name: Partition}``."""
    argv = ["sinfo", "--noheader", "--Node", "--Format", ",".join(SINFO_FIELDS)]
    return parse_sinfo(await run(argv, timeout=timeout))


async def expected_start(job_slice, timeout):
    """When Slurm would start a job of ``job_slice`` (``sbatch --test-only``,
    the same resource options as the real submission), or None."""
    argv = ["sbatch", "--test-only", *job_slice.sbatch_args(), "--wrap=true"]
    return parse_will_run(await run(argv, timeout=timeout, with_stderr=True))


async def end_reason(job_id, timeout):
    """How a job ended, from sacct (``"FAILED, exit code 1:0"``), or ""."""
    argv = ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode,Reason"]
    return parse_end_reason(await run(argv, timeout=timeout))


async def gpu_indices(job_id, nodes, timeout):
    """The GPU indices of a running job on each of its ``nodes`` (squeue's):
    ``{"n1": "0-1"}``."""
    argv = ["scontrol", "show", "job", "-d", job_id]
    return parse_gpu_indices(await run(argv, timeout=timeout), nodes)


async def job_fields(job_id, timeout):
    """A job's fields as ``scontrol show job -o`` prints them: ``{"JobState": ...}``."""
    return parse_job_fields(await run(["scontrol", "show", "job", "-o", job_id], timeout=timeout))


async def running_limit(job_id, username, job_name, timeout):
    """``(limit_minutes, end)`` of ``job_id`` when it is a running job of
    ``username`` named ``job_name`` (a session of this hub), else None. Read
    from squeue's own fields, never from text a user may set (a job's Comment)."""
    argv = ["squeue", "-h", "-j", job_id, "-u", username, "-n", job_name, "-t", "RUNNING",
            "-o", "%i|%l|%e"]  # fmt: skip
    try:
        return parse_running_limit(await run(argv, timeout=timeout), job_id)
    except SlurmError as e:
        if "Invalid job id" in str(e):
            return None
        raise


async def wall_caps(job_id, timeout):
    """Slurm's own caps on ``job_id``'s time limit, which a Slurm operator's
    ``scontrol update`` would not enforce: ``{"partition gpu": minutes,
    "QOS portal": minutes}`` (None: no cap). SlurmError when one cannot be read."""
    fields = (await run(["squeue", "-h", "-j", job_id, "-o", "%P|%q"], timeout=timeout)).strip()
    partition, _, qos = fields.partition("|")
    if not partition or not qos:
        raise SlurmError(f"squeue gave no partition and QOS for job {job_id}: {fields[:80]!r}")
    part = parse_job_fields(
        await run(["scontrol", "show", "partition", "-o", partition], timeout=timeout)
    )
    wall = await run(
        ["sacctmgr", "-n", "-P", "show", "qos", qos, "format=MaxWall"], timeout=timeout
    )
    return {
        f"partition {partition}": max_time_minutes(part.get("MaxTime", "")),
        f"QOS {qos}": max_time_minutes(wall.strip().splitlines()[0] if wall.strip() else ""),
    }


async def set_time_limit(job_id, minutes, timeout):
    """Set a job's time limit (``scontrol update JobId=J TimeLimit=...``), as
    the hub's account: lengthening a job needs Slurm operator rights
    (``sacctmgr modify user HUB set adminlevel=Operator``, deploy/slurm.sh)."""
    argv = ["scontrol", "update", f"JobId={job_id}", f"TimeLimit={format_duration(minutes)}"]
    await run(argv, timeout=timeout)


async def slurm_user(name, timeout):
    """The user ``name`` as slurmctld holds it now (``scontrol show assoc_mgr``:
    its uid and AdminLevel, by which it authorizes a request), as a
    ``SlurmUser``; None when slurmctld has no such user."""
    argv = ["scontrol", "show", "assoc_mgr", f"users={name}", "flags=users"]
    return parse_assoc_users(await run(argv, timeout=timeout)).get(name)


# -- as a user -------------------------------------------------------------


async def submit(username, script, options, timeout):
    """Submit ``script`` (on stdin) as ``username`` with sbatch ``options``;
    returns the job id. sbatch gets the reset environment of sudo."""
    argv = as_user(username, ["sbatch", "--parsable", *options])
    return parse_job_id(await run(argv, input=script, timeout=timeout))


async def cancel(username, job_ids, timeout):
    """scancel the jobs as ``username`` (their owner)."""
    await run(as_user(username, ["scancel", *job_ids]), timeout=timeout)


async def listed(job_ids, timeout):
    """Which of ``job_ids`` squeue still lists (none: squeue says "Invalid job id")."""
    argv = ["squeue", "-h", "-o", "%i", "-j", ",".join(job_ids)]
    try:
        return set((await run(argv, timeout=timeout)).split()) & set(job_ids)
    except SlurmError as e:
        if "Invalid job id" in str(e):
            return set()
        raise


async def cancel_as_root(job_ids, timeout):
    """scancel by root (the smoke test's and tests' clean-up)."""
    await run(["scancel", *job_ids], timeout=timeout)
