"""Every Slurm command the portal runs: its command line, how it runs (as the
hub's account, as a user through the sudoers rule, or through the root
helpers ``portal-extend`` and ``portal-slurm-read``), its environment and
timeout, and which parser reads its output.

The hub's reads of its jobs (squeue, ``scontrol show job``, sacct) go
through ``read``: as the hub's account itself, or, where Slurm hides other
users' jobs (``PrivateData=jobs``), through the root helper
``portal-slurm-read``, which runs only those reads' exact command lines
and shows only the portal's jobs ([slurm] private_data;
portal/helper/slurmread.py says why a helper and not a Slurm admin level).
So does sshare, the fairshare of everyone, where ``PrivateData=usage``
hides other users' usage (the helper then shows the portal's users'
lines). The other reads (sinfo, sacctmgr, ``scontrol show partition`` and
``reservation``, ``assoc_mgr``) PrivateData=jobs,usage leaves as they
are: they run as the hub's account always.

Commands run as argument lists (no shell), each by its full path in
Slurm's commands' folder (``[slurm] bin_dir``, ``BIN_DIR``), with
``MINIMAL_ENV`` and never the caller's environment, and are killed after
``timeout`` seconds. A command that fails or times out raises SlurmError
with Slurm's own message.
"""

import asyncio
import logging
import os
import time
from datetime import datetime

from portal.core import usernames
from portal.helper import extend as extendhelper
from portal.helper import slurmread
from portal.settings import SettingsError, defaults

from .model import SiteCatalog
from .parse import (
    ASSOC_FIELDS,
    QOS_FIELDS,
    SACCT_TASK_FIELDS,
    SHARE_FIELDS,
    USER_FIELDS,
    SlurmError,
    max_time_minutes,
    parse_assoc_uids,
    parse_associations,
    parse_default_accounts,
    parse_default_qos,
    parse_end_reason,
    parse_gpu_indices,
    parse_job_fields,
    parse_job_id,
    parse_partition_policies,
    parse_qos,
    parse_qos_gpu_limits,
    parse_qos_usage,
    parse_reservations,
    parse_running_limit,
    parse_sacct_tasks,
    parse_shares,
    parse_sinfo,
    parse_squeue,
    parse_squeue_tasks,
    parse_will_run,
)
from .parse import private_data as parse_private_data

log = logging.getLogger(__name__)

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
    "Features:256",  # last: parse.parse_sinfo takes lines without it
]

__all__ = [
    "BIN_DIR", "MINIMAL_ENV", "OBSERVERS", "SlurmError", "as_user", "command", "read", "run",
    "sbatch_argv", "use_bin_dir", "use_private_data",
]  # fmt: skip

# The folder of Slurm's commands ([slurm] bin_dir): the site's default until
# the process that runs them (the hub, the admin service, ``portal.health``,
# deploy/smoke.py) sets its settings' with ``use_bin_dir`` as it starts. A
# session is told it by the hub (``portal.contract``) and names it itself.
BIN_DIR = defaults()["slurm"]["bin_dir"]
# Every command the portal runs from that folder, as a user, the hub's
# account or root; the hub refuses to start when one is not there.
COMMANDS = ("sbatch", "scancel", "squeue", "sinfo", "scontrol", "sacct", "sacctmgr", "sshare")

# Callables ``observer(command, seconds, ok)`` told of every command ``run``
# ran (the hub's Prometheus series, spawners.metrics); none by default.
OBSERVERS = []


def use_bin_dir(folder, check=False):
    """Run Slurm's commands from ``folder`` ([slurm] bin_dir) from now on.
    ``check`` (the hub's start): SettingsError, naming the setting, when one
    of them is not there (``missing_commands``); an absolute folder always."""
    global BIN_DIR
    problem = missing_commands(folder)
    if problem and (check or not os.path.isabs(str(folder))):
        raise SettingsError(problem)
    BIN_DIR = folder


def missing_commands(folder):
    """Why Slurm's commands (COMMANDS) cannot run from ``folder``: "" when
    each is an executable file there.

    >>> missing_commands("/nonexistent/slurm/bin")[:66]
    'sbatch, scancel, squeue, sinfo, scontrol, sacct, sacctmgr, sshare '
    >>> missing_commands("slurm/bin")
    "[slurm] bin_dir must be an absolute folder, not 'slurm/bin'"
    """
    if not isinstance(folder, str) or not os.path.isabs(folder):
        return f"[slurm] bin_dir must be an absolute folder, not {folder!r}"
    missing = [
        name
        for name in COMMANDS
        if not os.path.isfile(os.path.join(folder, name))
        or not os.access(os.path.join(folder, name), os.X_OK)
    ]
    if not missing:
        return ""
    return (
        f"{', '.join(missing)} not found in {folder}: set [slurm] bin_dir to the folder "
        "of Slurm's commands"
    )


def command(name, bin_dir=None):
    """Slurm's command ``name`` by its full path in ``bin_dir`` (``BIN_DIR``).

    >>> command("sbatch", "/opt/slurm/bin")
    '/opt/slurm/bin/sbatch'
    """
    return os.path.join(bin_dir or BIN_DIR, name)


def job_path(bin_dir=None):
    """The PATH a session's or a notebook job's script starts with: Slurm's
    folder (``bin_dir``, ``BIN_DIR``) first when it is not a system one.

    >>> job_path("/opt/slurm/bin"), job_path("/usr/bin")
    ('/opt/slurm/bin:/usr/local/bin:/usr/bin:/bin', '/usr/local/bin:/usr/bin:/bin')
    """
    folders = ["/usr/local/bin", "/usr/bin", "/bin"]
    bin_dir = bin_dir or BIN_DIR
    return ":".join(folders if bin_dir in folders else [bin_dir, *folders])


async def run(argv, *, input=None, env=None, timeout=20, with_stderr=False):
    """Run ``argv`` and return its stdout (and stderr, ``with_stderr``), stripped.

    The command gets ``env`` or else ``MINIMAL_ENV``, never the caller's own.
    Raises SlurmError with the command's stderr when it exits non-zero, and
    when it has not finished after ``timeout`` seconds (it is killed then).
    """
    began = time.monotonic()
    try:
        result = await _run(argv, input, env, timeout, with_stderr)
    except SlurmError:
        _observe(argv, began, False)
        raise
    _observe(argv, began, True)
    return result


def _observe(argv, began, ok):
    for observer in OBSERVERS:
        try:
            observer(_name(argv), time.monotonic() - began, ok)
        except Exception:  # noqa: BLE001 (a count never breaks a command)
            pass


async def _run(argv, input, env, timeout, with_stderr):
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
        raise SlurmError(f"{_name(argv)} failed: {message}", proc.returncode)
    if with_stderr:
        out += err
    return out.decode(errors="replace").strip()


def _name(argv):
    """The command in ``argv``, past any ``sudo ... --`` prefix and the read
    helper, without its folder.

    >>> _name(["sudo", "-n", "--", slurmread.INSTALLED_AT, "squeue", "-h"])
    'squeue'
    """
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
        if argv[0] == slurmread.INSTALLED_AT and len(argv) > 1:
            argv = argv[1:]
    return os.path.basename(argv[0])


def as_user(username, argv):
    """``argv`` run as ``username`` through the sudoers rule (deploy/hub.sh):
    never ``-E``; sudo resets the environment, and ``run`` gives sudo itself
    only ``MINIMAL_ENV``. ``-n``: fail at once rather than ask for a password.
    ``username`` must be one the portal takes (``usernames.is_safe``: the
    hub's users are), else ValueError: nothing else reaches sudo.

    >>> as_user("J.Smith", ["sbatch"])
    ['sudo', '-n', '-u', 'J.Smith', '--', 'sbatch']
    >>> as_user("#0", ["sbatch"])
    Traceback (most recent call last):
    ...
    ValueError: not a user name the portal takes: '#0'
    """
    if not usernames.is_safe(username):
        raise ValueError(f"not a user name the portal takes: {str(username)[:40]!r}")
    return ["sudo", "-n", "-u", username, "--", *argv]


def as_read_helper(argv):
    """The read ``argv`` through the root helper ``portal-slurm-read``
    (portal/helper/slurmread.py), which takes the command's name, not its
    path: it runs it from the folder the hub registered.

    >>> as_read_helper(["/opt/slurm/bin/squeue", "-h"])[3:]
    ['/usr/local/libexec/portal/portal-slurm-read', 'squeue', '-h']
    """
    return ["sudo", "-n", "--", slurmread.INSTALLED_AT, os.path.basename(argv[0]), *argv[1:]]


def as_root_helper(*args):
    """The root helper ``portal-extend ARGS`` (portal/helper/extend.py, installed
    root's by deploy/hub.sh) through its sudoers rule, which lets the hub's
    account run it as root with three whole numbers; as ``as_user``, no
    ``-E``, and ``run`` gives sudo ``MINIMAL_ENV`` alone."""
    return ["sudo", "-n", "--", extendhelper.INSTALLED_AT, *args]


# -- the hub's reads of its jobs ([slurm] private_data) ----------------------

PRIVATE_DATA_MODES = ("auto", "helper", "direct")
# How ``read`` runs: the settings' [slurm] private_data (``use_private_data``)
# and, for "auto", what Slurm said (None: not asked yet, or no answer).
_reads = {"mode": "direct", "hidden": None}


def use_private_data(mode):
    """Read the portal's jobs as [slurm] private_data says from now on:
    "direct" (as the hub's account), "helper" (through ``portal-slurm-read``)
    or "auto" (the helper when Slurm hides jobs: ``jobs_hidden``).
    SettingsError, naming the setting, for anything else."""
    if mode not in PRIVATE_DATA_MODES:
        raise SettingsError(
            f"[slurm] private_data must be one of {', '.join(PRIVATE_DATA_MODES)}, not {mode!r}"
        )
    _reads.update(mode=mode, hidden=None)


async def private_kinds(timeout):
    """What slurmctld's or slurmdbd's PrivateData hides from a user who is
    no Slurm operator (``{"jobs", "usage"}``): ``scontrol show config`` (the
    controller's) and ``sacctmgr show config`` (slurm.conf's as this host
    reads it, then slurmdbd's), which PrivateData hides nothing of."""
    shown = await run([command("scontrol"), "show", "config"], timeout=timeout)
    shown += "\n" + await run([command("sacctmgr"), "show", "config"], timeout=timeout)
    return parse_private_data(shown)


async def jobs_hidden(timeout):
    """Whether PrivateData hides other users' jobs from the hub's account."""
    return "jobs" in await private_kinds(timeout)


async def reads_through_helper(timeout, kind="jobs"):
    """Whether ``read`` of ``kind`` (``jobs``; ``usage``: sshare) runs
    through the helper: "helper"; "auto" when Slurm hides that kind (asked
    once; while Slurm does not answer, the helper, which reads either way);
    never as root, who sees everything."""
    if os.geteuid() == 0 or _reads["mode"] == "direct":
        return False
    if _reads["mode"] == "helper":
        return True
    if _reads["hidden"] is None:
        try:
            _reads["hidden"] = await private_kinds(timeout)
        except SlurmError:
            return True
    return kind in _reads["hidden"]


async def recheck_private_data(timeout):
    """Under "auto", ask Slurm again what PrivateData hides (the shared
    poll's catalog read does, every ``catalog_interval``): a site that turns
    PrivateData on or off needs no hub restart. The kinds now hidden, or
    None (not "auto", or no answer: the last answer is kept)."""
    if os.geteuid() == 0 or _reads["mode"] != "auto":
        return None
    try:
        kinds = await private_kinds(timeout)
    except SlurmError:
        return None
    if _reads["hidden"] is not None and kinds != _reads["hidden"]:
        log.warning(
            "Slurm's PrivateData now hides %s: the portal reads %s",
            ", ".join(sorted(kinds)) or "nothing",
            "through portal-slurm-read" if kinds else "as the hub's account",
        )
    _reads["hidden"] = kinds
    return kinds


async def read(argv, *, timeout, kind="jobs", **kwargs):
    """``run`` a read of the portal's jobs (squeue, ``scontrol show job``,
    sacct) or, ``kind`` "usage", of everyone's usage (sshare): as the hub's
    account, or through ``portal-slurm-read`` (``reads_through_helper``),
    whose shapes (portal/helper/slurmread.py SHAPES) each of these command
    lines is."""
    if await reads_through_helper(timeout, kind):
        argv = as_read_helper(argv)
    return await run(argv, timeout=timeout, **kwargs)


# -- the sbatch command line -----------------------------------------------


def sbatch_argv(
    job_slice,
    *,
    job_name="",
    chdir="",
    output="/dev/null",
    time_limit=None,
    test_only=False,
    array=0,
):
    """sbatch's whole command line for a session of ``job_slice``: every
    option the portal gives sbatch is here (the batch script has no
    ``#SBATCH`` line). The slice's values are per node; one task per GPU on
    each node, so that ``srun`` in the session starts one process per GPU.

    The submission (``submit``, which runs it as the user) prints only the job
    id, names the job ``job_name`` (what the shared squeue lists), starts in
    ``chdir`` (the user's home) and leaves sbatch's own output unwritten (the
    script opens its log itself). For 2 GPUs for 8 hours on partition ``gpu``
    (16 cores, 96 GB)::

        sbatch --parsable --job-name=portal-jupyter --chdir=/home/ada --output=/dev/null
            --nodes=1 --ntasks-per-node=2 --partition=gpu --gres=gpu:2 --cpus-per-task=8
            --mem=96G --time=8:00:00 --no-requeue

    ``output`` and ``time_limit`` (Slurm's minutes or ``H:MM:SS``; the
    slice's hours by default) are deploy/smoke.py's, whose jobs keep sbatch's
    output and run briefly.

    ``array``: a notebook sweep of that many jobs, one Slurm array
    (``--array=0-N-1``; portal.notebookjobs); 0, no array.

    ``test_only``: the query behind the spawn page's expected start, with the
    same resources, submitting nothing::

        sbatch --test-only --nodes=1 ... --no-requeue --wrap=true

    The site's choices (issue 38) follow ``--time``: a GPU model types the
    GRES (``--gres=gpu:v100-sxm2:2``), then ``--account``, ``--qos``,
    ``--reservation`` and ``--constraint`` (a node feature); a CPU session
    (no GPU) has no ``--gres`` and one task of all its cores.
    """
    if test_only:
        head, tail = ["--test-only"], ["--wrap=true"]
    else:
        head = ["--parsable", f"--job-name={job_name}", f"--chdir={chdir}", f"--output={output}"]
        head += [f"--array=0-{array - 1}"] if array else []
        tail = []
    chosen = job_slice.choices()
    site = [f"--{option}={chosen[key]}" for key, option in SITE_OPTIONS.items() if key in chosen]
    return [
        command("sbatch"),
        *head,
        f"--nodes={job_slice.nodes}",
        f"--ntasks-per-node={job_slice.tasks_per_node}",
        f"--partition={job_slice.partition}",
        *([f"--gres={job_slice.gres}"] if job_slice.gpus else []),
        f"--cpus-per-task={job_slice.cores_per_gpu}",
        f"--mem={job_slice.mem_gb}G",
        f"--time={time_limit or job_slice.time_limit}",
        *site,
        # a requeued session could not report its port again: it ends instead
        "--no-requeue",
        *tail,
    ]


# The sbatch option of each of the site's choices (portal.core.slice.CHOICE_LABELS).
# The GPU model has none: it types --gres itself (Slice.gres).
SITE_OPTIONS = {
    "account": "account",
    "qos": "qos",
    "reservation": "reservation",
    "feature": "constraint",
}


def resource_options(job_slice):
    """The slice's own options on ``sbatch_argv``'s command line (from
    ``--nodes`` to ``--no-requeue``), as the admin service shows them and
    bench/spawn.py submits its own jobs with them."""
    return sbatch_argv(job_slice, test_only=True)[2:-1]


# -- in a session, as its user ----------------------------------------------


async def job_end(job_id, slurm_conf, timeout, bin_dir=None):
    """squeue's end of ``job_id`` (``parse.parse_end`` reads it), run in the
    session's server, from ``bin_dir`` (the hub's [slurm] bin_dir, which the
    session is told: ``portal.contract``). squeue prints its times in $TZ:
    UTC, so the end needs no guess of the node's time zone; nothing else of
    the server's environment but where Slurm's configuration is, when the
    site names it (``slurm_conf``)."""
    env = {**MINIMAL_ENV, "TZ": "UTC", **({"SLURM_CONF": slurm_conf} if slurm_conf else {})}
    argv = [command("squeue", bin_dir), "--noheader", "--jobs", job_id, "--format", "%e"]
    return await run(argv, env=env, timeout=timeout)


# -- as the hub's account --------------------------------------------------


async def queue(job_name, timeout):
    """Every job named ``job_name`` (one squeue for all sessions): ``{id: Job}``."""
    argv = [command("squeue"), "--noheader", "--name", job_name, "--format", SQUEUE_FORMAT]
    return parse_squeue(await read(argv, timeout=timeout))


async def partitions(timeout):
    """Every node, by partition (one sinfo): ``{name: Partition}``."""
    argv = [command("sinfo"), "--noheader", "--Node", "--Format", ",".join(SINFO_FIELDS)]
    return parse_sinfo(await run(argv, timeout=timeout))


async def qos_usage(timeout):
    """The GPUs each user holds in each QOS, as slurmctld counts them against
    the QOS's limit per user (one scontrol for everyone): ``{qos: {uid: gpus}}``."""
    argv = [command("scontrol"), "show", "assoc_mgr", "flags=qos"]
    return parse_qos_usage(await run(argv, timeout=timeout))


async def qos_gpu_limits(timeout):
    """Every QOS's GPUs per user, ``{qos: gpus}`` (None: no limit)."""
    argv = [command("sacctmgr"), "-n", "-P", "show", "qos", "format=Name,MaxTRESPU"]
    return parse_qos_gpu_limits(await run(argv, timeout=timeout))


async def default_qos(username, partition, timeout):
    """The QOS a session of ``username`` on ``partition`` runs under (sbatch
    names none: the default account's association's), "" when none is known."""
    argv = [command("sacctmgr"), "-n", "-P", "show", "user", username, "withassoc",
            "format=DefaultAccount,Account,Partition,DefaultQOS,QOS"]  # fmt: skip
    return parse_default_qos(await run(argv, timeout=timeout), partition)


# -- the site's catalog (model.SiteCatalog), read by the shared poll ---------


async def associations(timeout):
    """Every user's associations: account, partition, QOS (sacctmgr)."""
    argv = [command("sacctmgr"), "-n", "-P", "show", "assoc", f"format={ASSOC_FIELDS}"]
    return parse_associations(await run(argv, timeout=timeout))


async def default_accounts(timeout):
    """Every user's default account, ``{user: account}`` (sacctmgr)."""
    argv = [command("sacctmgr"), "-n", "-P", "show", "user", f"format={USER_FIELDS}"]
    return parse_default_accounts(await run(argv, timeout=timeout))


async def qos_limits(timeout):
    """Every QOS with its priority, wall time, GPU limits and flags, ``{name: Qos}``."""
    argv = [command("sacctmgr"), "-n", "-P", "show", "qos", f"format={QOS_FIELDS}"]
    return parse_qos(await run(argv, timeout=timeout))


async def shares(timeout):
    """Every association's fairshare and GPU-hours, ``{(account, user): Share}``
    (sshare). Under ``PrivateData=usage`` sshare shows a user that is no
    operator their own lines alone: then through ``portal-slurm-read``,
    which shows the portal's users' lines and the accounts' (``read``)."""
    argv = [command("sshare"), "-a", "-n", "-P", "-o", SHARE_FIELDS]
    return parse_shares(await read(argv, timeout=timeout, kind="usage"))


async def reservations(timeout):
    """Every reservation (scontrol), in scontrol's order."""
    argv = [command("scontrol"), "show", "reservation", "-o"]
    return parse_reservations(await run(argv, timeout=timeout))


async def partition_policies(timeout):
    """Every partition's Allow/Deny lists of QOS, accounts and groups (scontrol)."""
    argv = [command("scontrol"), "show", "partition", "-o"]
    return parse_partition_policies(await run(argv, timeout=timeout))


async def site_catalog(timeout, now=None):
    """The site's catalog (``model.SiteCatalog``): its six reads at once.
    SlurmError when one of them fails, but sshare: without it the catalog
    has no shares and its ``error`` says why."""
    reads = (associations, default_accounts, qos_limits, reservations, partition_policies)
    results = await asyncio.gather(
        *(f(timeout) for f in reads), shares(timeout), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, SlurmError):
            raise result
    failed = [r for r in results[:-1] if isinstance(r, SlurmError)]
    if failed:
        raise failed[0]
    assocs, defaults_, qos, resvs, policies, found = results
    error = str(found) if isinstance(found, SlurmError) else ""
    return SiteCatalog(
        time=now or datetime.now().replace(microsecond=0),
        error=error,
        associations=assocs,
        default_accounts=defaults_,
        qos=qos,
        shares={} if error else found,
        reservations=resvs,
        partitions=policies,
    )


async def expected_start(job_slice, timeout):
    """When Slurm would start a job of ``job_slice`` (``sbatch --test-only``,
    the same resource options as the real submission), or None."""
    argv = sbatch_argv(job_slice, test_only=True)
    return parse_will_run(await run(argv, timeout=timeout, with_stderr=True))


async def expected_start_as(username, job_slice, timeout):
    """When Slurm would start ``username``'s job of ``job_slice``, its
    account, QOS and reservation included (``sbatch --test-only`` as the
    user, through the sudoers rule: the same argument vector as the
    submission's resources; nothing is submitted), or None. SlurmError
    with sbatch's reason when Slurm would refuse it."""
    argv = as_user(username, sbatch_argv(job_slice, test_only=True))
    return parse_will_run(await run(argv, timeout=timeout, with_stderr=True))


async def end_reason(job_id, job_name, timeout):
    """How the job ``job_id`` named ``job_name`` ended, from sacct
    (``"FAILED, exit code 1:0"``), or ""."""
    argv = [command("sacct"), "-j", job_id, "--name", job_name,
            "-X", "-n", "-P", "-o", "State,ExitCode,Reason"]  # fmt: skip
    return parse_end_reason(await read(argv, timeout=timeout))


async def end_reason_ctld(job_id, job_name, timeout):
    """How the job ``job_id`` named ``job_name`` ended, as slurmctld still
    holds it (``MinJobAge`` seconds after its end) when slurmdbd has not
    recorded it: ``"CANCELLED, exit code 0:15"``; a job not yet ended
    gives its state all the same (``"RUNNING, exit code 0:0"``: the caller
    checks it is an end); "" for a job of another name, or one forgotten."""
    try:
        fields = await job_fields(job_id, timeout)
    except SlurmError as e:
        if "Invalid job id" in str(e):
            return ""
        raise
    if fields.get("JobName") != job_name or fields.get("JobId") != job_id:
        return ""
    return parse_end_reason(f"{fields.get('JobState', '')}|{fields.get('ExitCode', '')}")


async def gpu_indices(job_id, nodes, timeout):
    """The GPU indices of a running job on each of its ``nodes`` (squeue's):
    ``{"n1": "0-1"}``."""
    argv = [command("scontrol"), "show", "job", "-d", job_id]
    return parse_gpu_indices(await read(argv, timeout=timeout), nodes)


async def job_fields(job_id, timeout):
    """A job's fields as ``scontrol show job -o`` prints them: ``{"JobState": ...}``."""
    argv = [command("scontrol"), "show", "job", "-o", job_id]
    return parse_job_fields(await run(argv, timeout=timeout))


async def running_limit(job_id, username, job_name, timeout):
    """``(limit_minutes, end)`` of ``job_id`` when it is a running job of
    ``username`` named ``job_name`` (a session of this hub), else None. Read
    from squeue's own fields, never from text a user may set (a job's Comment)."""
    argv = [command("squeue"), "-h", "-j", job_id, "-u", username, "-n", job_name, "-t", "RUNNING",
            "-o", "%i|%l|%e"]  # fmt: skip
    try:
        return parse_running_limit(await read(argv, timeout=timeout), job_id)
    except SlurmError as e:
        if "Invalid job id" in str(e):
            return None
        raise


async def slurm_uids(name, timeout):
    """``{name: uid}`` as slurmctld holds the user ``name`` now (uid None: it
    found no Unix account when it heard of the user); {} when it has none."""
    argv = [command("scontrol"), "show", "assoc_mgr", f"users={name}", "flags=users"]
    return parse_assoc_uids(await run(argv, timeout=timeout))


async def wall_caps(job_id, job_name, timeout):
    """Slurm's own caps on the session ``job_id``'s time limit (a job named
    ``job_name``), which root's ``scontrol
    update`` (the helper's) is not held to: ``{"partition gpu": minutes,
    "QOS portal": minutes}`` (None: no cap). SlurmError when one cannot be
    read. The hub checks them to answer with a clear message; the helper
    checks them again."""
    argv = [command("squeue"), "-h", "-j", job_id, "-n", job_name, "-o", "%P|%q"]
    fields = (await read(argv, timeout=timeout)).strip()
    partition, _, qos = fields.partition("|")
    if not partition or not qos:
        raise SlurmError(f"squeue gave no partition and QOS for job {job_id}: {fields[:80]!r}")
    part = parse_job_fields(
        await run([command("scontrol"), "show", "partition", "-o", partition], timeout=timeout)
    )
    wall = await run(
        [command("sacctmgr"), "-n", "-P", "show", "qos", qos, "format=MaxWall"], timeout=timeout
    )
    return {
        f"partition {partition}": max_time_minutes(part.get("MaxTime", "")),
        f"QOS {qos}": max_time_minutes(wall.strip().splitlines()[0] if wall.strip() else ""),
    }


# -- through the root helper -----------------------------------------------


class HelperRefused(SlurmError):
    """The root helper refused, with its one-line reason; nothing changed."""


async def set_time_limit(job_id, minutes, profile_max, timeout):
    """Lengthen the running session ``job_id`` to ``minutes`` (``profile_max``:
    the most its profile allows, in minutes) through the root helper, which
    checks the job and Slurm's caps again and runs ``scontrol update JobId=J
    TimeLimit=...`` as root. The hub's account holds no Slurm admin level:
    Slurm lets a user only shorten their own job. Returns the new limit as
    the helper printed it; HelperRefused with the helper's one-line reason
    when it refuses (nothing changed); SlurmError with sudo's when sudo does
    not run it ("a password is required": no rule lets this account)."""
    argv = as_root_helper(str(job_id), str(minutes), str(profile_max))
    try:
        return await run(argv, timeout=timeout)
    except SlurmError as e:
        _, said, reason = str(e).partition(extendhelper.PREFIX)
        if said:
            raise HelperRefused(f"portal-extend refused: {reason}", e.returncode) from None
        raise


async def _sudo_lets(argv, timeout):
    """Whether sudo lets this account run ``argv``: ``sudo -n -l ARGV``,
    which runs nothing, exits 0 when a rule lets it and 1 when none does.
    SlurmError when sudo gives no answer."""
    try:
        await run(["sudo", "-n", "-l", *argv], timeout=timeout)
    except SlurmError as e:
        if e.returncode == 1:
            return False
        raise
    return True


async def may_run_helper(timeout):
    """Whether sudo lets this account run the extend helper (``HELPER 1 60 60``)."""
    return await _sudo_lets([extendhelper.INSTALLED_AT, "1", "60", "60"], timeout)


async def may_run_read_helper(timeout):
    """Whether sudo lets this account run the read helper (``HELPER squeue -h``)."""
    return await _sudo_lets([slurmread.INSTALLED_AT, "squeue", "-h"], timeout)


# -- as a user -------------------------------------------------------------


async def submit(username, script, argv, timeout):
    """Submit ``script`` (on stdin) as ``username`` with ``argv``, sbatch's
    whole command line (``sbatch_argv``); returns the job id. sbatch gets the
    reset environment of sudo."""
    return parse_job_id(await run(as_user(username, argv), input=script, timeout=timeout))


async def cancel(username, job_id, job_name, timeout):
    """scancel the job ``job_id`` named ``job_name`` (a session's, a notebook
    job's, every task of an array) as ``username``, its owner. scancel's own
    filter leaves the job alone when it has another name; the sudoers rule
    lets the hub's account run scancel only so, with the name of the
    portal's jobs (portal/setup/install.py ``cancel_args``)."""
    argv = [command("scancel"), f"--name={job_name}", str(job_id)]
    await run(as_user(username, argv), timeout=timeout)


async def listed(job_ids, timeout):
    """Which of ``job_ids`` squeue still lists (none: squeue says "Invalid job id")."""
    argv = [command("squeue"), "-h", "-o", "%i", "-j", ",".join(job_ids)]
    try:
        return set((await run(argv, timeout=timeout)).split()) & set(job_ids)
    except SlurmError as e:
        if "Invalid job id" in str(e):
            return set()
        raise


async def notebook_tasks(job_ids, job_name, timeout):
    """Every task of the notebook jobs ``job_ids`` (named ``job_name``) as sacct records them
    (queued, running and ended alike), and as squeue sees those it still
    lists (a queued one's expected start): ``(sacct's, squeue's)``, each
    ``{job_id: {task: fields}}`` (``parse.parse_sacct_tasks``)."""
    if not job_ids:
        return {}, {}
    ids = ",".join(job_ids)
    argv = [command("sacct"), "-a", "-X", "-n", "-P", "-j", ids, "--name", job_name,
            "-o", SACCT_TASK_FIELDS]  # fmt: skip
    accounted = parse_sacct_tasks(await read(argv, timeout=timeout))
    argv = [command("squeue"), "-h", "-r", "-j", ids, "-n", job_name, "-o", "%i|%T|%S|%e|%r"]
    try:
        queued = parse_squeue_tasks(await read(argv, timeout=timeout))
    except SlurmError as e:
        if "Invalid job id" not in str(e):
            raise
        queued = {}
    return accounted, queued


async def accounted_jobs(names, since, until, fields, user=None, timeout=60):
    """sacct's lines of every job named one of ``names`` (sessions and
    notebook jobs, steps included) that ran between ``since`` and ``until``
    (datetimes), of ``user`` or everyone, with ``fields`` (the usage
    report's: ``portal.usage.parse_rows`` reads them)."""
    argv = [command("sacct"), "-a", "-n", "-P", "--name", ",".join(names),
            "-S", since.isoformat(timespec="seconds"), "-E", until.isoformat(timespec="seconds"),
            "-o", fields]  # fmt: skip
    if user:
        argv += ["-u", user]
    return await read(argv, timeout=timeout)


async def ping(timeout, bin_dir=None):
    """``scontrol ping``'s answer: whether slurmctld is UP (``portal.health``,
    which names the settings' ``bin_dir``)."""
    return await run([command("scontrol", bin_dir), "ping"], timeout=timeout)


async def clusters(timeout, bin_dir=None):
    """The clusters slurmdbd holds (``sacctmgr show cluster``, which answers
    through slurmdbd: ``portal.health``), one name a line."""
    argv = [command("sacctmgr", bin_dir), "-n", "-P", "show", "cluster", "format=Cluster"]
    return await run(argv, timeout=timeout)


async def release_as_root(job_ids, timeout):
    """``scontrol release`` of held jobs, by root (``portal check``'s test jobs)."""
    await run([command("scontrol"), "release", ",".join(job_ids)], timeout=timeout)


async def cancel_as_root(job_ids, timeout):
    """scancel by root (the smoke test's and tests' clean-up)."""
    await run([command("scancel"), *job_ids], timeout=timeout)
