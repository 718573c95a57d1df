#!/usr/bin/python3 -I
"""portal-slurm-read COMMAND ARGS...: the hub's reads of the portal's Slurm
jobs, as root, for a site whose Slurm hides other users' jobs
(``PrivateData=jobs``); it reads, and changes nothing.

Under ``PrivateData=jobs`` slurmctld and slurmdbd show a user that is no
Slurm operator only that user's own jobs: the hub's account, which runs the
portal's reads itself (``portal.slurm.commands``), then sees none of its
sessions. squeue lists none, ``scontrol show job`` and ``squeue -j`` say
"Invalid job id", sacct prints nothing: a starting session would be taken
for ended while its job keeps its GPUs, and never cancelled. (Measured on
Slurm 22.05: sinfo, ``scontrol show partition``, ``scontrol show
assoc_mgr`` and sacctmgr's QOS and associations answer the same under
``PrivateData=jobs,usage``; only the jobs are hidden.)

The ways out, and why this one:

- a Slurm AdminLevel (Operator, Admin) or a coordinator role for the hub's
  account would show it every job, and also let it cancel, hold and change
  every job of the cluster (or of the account it coordinates): refused;
- this helper, run as root through one sudoers rule: root sees every job,
  and the helper runs nothing but the hub's own reads, each an exact shape
  (``SHAPES``), and shows only the portal's jobs: those named as a
  registered hub's sessions (``[slurm] job_name``), notebook jobs
  (``JOB_NAME-notebook``) or ``portal check``'s test jobs
  (``JOB_NAME-check``). What the hub's account learns under
  PrivateData is what it would see of its own jobs without it. Under
  ``PrivateData=usage`` the same helper runs the shared poll's one sshare
  (the fairshare and GPU-hours of each association the spawn page
  offers) and shows the accounts' lines and those of the users in a
  registered hub's uids, no one else's.

The hub runs it only when the site's Slurm hides jobs (``[slurm]
private_data``, "auto": ``scontrol show config`` and ``sacctmgr show
config`` name ``jobs`` in PrivateData); a site without PrivateData pays no
sudo per read::

    sudo -n /usr/local/libexec/portal/portal-slurm-read squeue --noheader \\
        --name portal-jupyter --format '%i|%u|%T|%N|%r|%S|%e|%b|%P|%l'

The command line is checked word by word against ``SHAPES``: the command's
name (never a path), its options in their order, literal formats and field
lists, and placeholders: job ids (digits, ``ID``; comma lists, ``IDS``), a
registered job name (``NAME``; ``NAMES``: a comma list of them), a user
name (``USER``) and an ISO time (``TIME``). Anything else (scancel,
``scontrol update``, another option, another format, one more word) is
refused, exit 2, and nothing runs. A shape that names jobs by id alone
(``scontrol show job -d ID``) runs only after root's squeue, filtered by
the registered names, lists that id.

Slurm's command runs from the folder of Slurm's commands of the hub whose
name it reads (its registration's ``[slurm] bin_dir``, checked root's
alone), never a folder the caller names, with a clean environment, no
shell, and a timeout, as the extend helper runs its own: this helper uses
that helper's registrations and checks (``portal/helper/extend.py``; the
installed copy loads the installed ``portal-extend``, root's alone, beside
it). It prints Slurm's output as it is; Slurm's own failure is one line on
stderr, exit 1 ("Invalid job id", which the hub reads as such).

This file imports nothing but Python's standard library and that helper,
and runs under ``/usr/bin/python3 -I``.
"""

import os
import re
import stat
import sys

if __package__:  # the package's copy: the hub, the tests, portal setup
    from . import extend
else:  # the installed copy, run by sudo: the installed extend helper beside it
    import importlib.machinery
    import importlib.util

    def _load_extend(path="/usr/local/libexec/portal/portal-extend"):
        folder = path
        while True:  # the file and each folder above it: root's alone
            st = os.lstat(folder)
            if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise SystemExit(f"portal-slurm-read: {folder} is not root's alone: not loaded")
            if folder == "/":
                break
            folder = os.path.dirname(folder)
        sys.dont_write_bytecode = True  # root writes no cache beside it
        loader = importlib.machinery.SourceFileLoader("portal_extend", path)
        spec = importlib.util.spec_from_loader(loader.name, loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module

    extend = _load_extend()

# Where portal setup installs this file (root, 0755), beside portal-extend.
INSTALLED_AT = "/usr/local/libexec/portal/portal-slurm-read"
PREFIX = "portal-slurm-read: "
# The sudoers rule's arguments (portal setup): what sudo lets through at all.
SUDOERS_ARGS = "^(squeue|scontrol|sacct|sshare) .+$"
USAGE = "usage: portal-slurm-read COMMAND ARGS... (one of the hub's reads of its jobs)"

# The suffixes of a hub's notebook jobs' name (portal.notebookjobs.job_name)
# and of ``portal check``'s test jobs' (portal.check.JOB_SUFFIX).
NOTEBOOK_SUFFIX, CHECK_SUFFIX = "-notebook", "-check"
# The formats and fields of the hub's reads (portal.slurm.commands,
# portal.usage: tests/unit/test_slurmread.py holds them equal).
QUEUE_FORMAT = "%i|%u|%T|%N|%r|%S|%e|%b|%P|%l"
TASK_FIELDS = "JobID,State,ExitCode,Submit,Start,End,Elapsed,NodeList,Reason"
USAGE_FIELDS = (
    "JobID,User,JobName,State,Submit,Start,End,ElapsedRaw,AllocTRES,TotalCPU,AllocCPUS,"
    "Account,Reservation"
)
SHARE_FIELDS = "Account,User,FairShare,GrpTRESRaw"

# Every command line the helper runs, word by word; an UPPER word is a
# placeholder (PATTERNS, and NAME/NAMES: registered job names).
SHAPES = {
    "queue": "squeue --noheader --name NAME --format " + QUEUE_FORMAT,
    "running_limit": "squeue -h -j ID -u USER -n NAME -t RUNNING -o %i|%l|%e",
    "wall_caps": "squeue -h -j ID -n NAME -o %P|%q",
    "notebook_queue": "squeue -h -r -j IDS -n NAME -o %i|%T|%S|%e|%r",
    "gpu_indices": "scontrol show job -d ID",
    "end_reason": "sacct -j ID --name NAME -X -n -P -o State,ExitCode,Reason",
    "notebook_accounted": "sacct -a -X -n -P -j IDS --name NAME -o " + TASK_FIELDS,
    "accounted": "sacct -a -n -P --name NAMES -S TIME -E TIME -o " + USAGE_FIELDS,
    "accounted_of": "sacct -a -n -P --name NAMES -S TIME -E TIME -o " + USAGE_FIELDS + " -u USER",
    # the catalog's fairshare (PrivateData=usage): the portal's users' lines alone
    "shares": "sshare -a -n -P -o " + SHARE_FIELDS,
}
# The placeholders' values (``fullmatch``). A user name as the portal takes
# it (portal.core.usernames.SAFE); a job id as Slurm's, at most 1000 a list.
JOB_ID = r"[1-9][0-9]{0,9}"
PATTERNS = {
    "ID": re.compile(JOB_ID, re.ASCII),
    "IDS": re.compile(rf"{JOB_ID}(,{JOB_ID}){{0,999}}", re.ASCII),
    "USER": re.compile(r"[A-Za-z_][A-Za-z0-9_.@-]{0,63}", re.ASCII),
    "TIME": re.compile(
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([+-][0-9]{2}:[0-9]{2})?"
    ),
}


class Refused(Exception):
    """A command line the helper does not run: one line, exit 2."""


def shape_of(argv, names):
    """The name of the shape (``SHAPES``) ``argv`` has, with ``names`` the
    registered job names; Refused, naming the first word that fits no
    shape, otherwise.

    >>> names = {"portal-jupyter", "portal-jupyter-notebook"}
    >>> shape_of(["sacct", "-j", "42", "--name", "portal-jupyter", "-X", "-n", "-P", "-o",
    ...           "State,ExitCode,Reason"], names)
    'end_reason'
    >>> shape_of(["scancel", "42"], names)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    portal.helper.slurmread.Refused: 'scancel' is none of the hub's reads (squeue, scontrol, ...)
    >>> shape_of(["scontrol", "show", "job", "-d", "1;id"], names)
    Traceback (most recent call last):
    ...
    portal.helper.slurmread.Refused: word 4 '1;id' is not a ID
    """
    if not argv:
        raise Refused(USAGE)
    if argv[0] not in {shape.split()[0] for shape in SHAPES.values()}:
        raise Refused(
            f"{shown(argv[0])} is none of the hub's reads (squeue, scontrol, sacct, sshare)"
        )
    best = (-1, "")
    for key, shape in SHAPES.items():
        words = shape.split(" ")
        for i, word in enumerate(argv):
            if i >= len(words):
                problem = f"word {i} {shown(word)} is one too many"
                break
            problem = _word_problem(i, word, words[i], names)
            if problem:
                break
        else:
            if len(argv) == len(words):
                return key
            i, problem = len(argv), f"{words[len(argv)]} is missing"
        best = max(best, (i, problem))
    raise Refused(best[1])


def _word_problem(i, word, expected, names):
    if expected in ("NAME", "NAMES"):
        given = word.split(",") if expected == "NAMES" else [word]
        if not all(name in names for name in given):
            return f"word {i} {shown(word)} is not the name of the portal's jobs"
        return ""
    pattern = PATTERNS.get(expected)
    if pattern is not None:
        return "" if pattern.fullmatch(word) else f"word {i} {shown(word)} is not a {expected}"
    return "" if word == expected else f"word {i} {shown(word)} is not {shown(expected)}"


def shown(text, most=40):
    return repr(text[:most])


def job_names(hubs):
    """``{name: hub}``: each registered hub's sessions', notebook jobs' and
    ``portal check``'s test jobs' name."""
    names = {}
    for hub in hubs:
        for suffix in ("", NOTEBOOK_SUFFIX, CHECK_SUFFIX):
            names.setdefault(hub.job_name + suffix, hub)
    return names


def read(argv, system):
    """Run the read ``argv`` (its shape checked against the registered hubs
    of ``system``, an ``extend.System``) and return Slurm's output; Refused
    for a command line of no shape, extend.Refused when Slurm fails."""
    names = job_names(system.hubs())
    if not names:
        raise Refused(f"no hub registered its sessions in {system.registry}")
    shape = shape_of(argv, names)
    if shape == "shares":
        return portal_shares(system.slurm(system.folders()[0], *argv), system)
    words = SHAPES[shape].split(" ")
    named = [argv[i] for i, word in enumerate(words) if word in ("NAME", "NAMES")]
    if named:
        hub = names[named[0].split(",")[0]]
        return system.slurm(hub.bin_dir, *argv)
    # scontrol show job -d ID: a job of the portal's, as root's squeue filters
    # it, and of a user in the uids of the hub whose name it has (any user
    # may name a job as the portal's: one outside the portal stays hidden)
    job_id = argv[words.index("ID")]
    for bin_dir in system.folders():
        listed = system.slurm(
            bin_dir, "squeue", "-h", "-j", job_id, "--name", ",".join(sorted(names)),
            "-o", "%i|%U|%j",
        )  # fmt: skip
        if not any(_portal_job(line, job_id, names) for line in listed.splitlines()):
            raise Refused(f"job {job_id} is none of the portal's jobs")
        return system.slurm(bin_dir, *argv)
    raise Refused(f"no hub registered a folder of Slurm's commands in {system.registry}")


def portal_shares(output, system):
    """sshare's lines (``SHARE_FIELDS``) of the accounts and of the users
    in the uids a registered hub serves: as under PrivateData=jobs the
    portal's jobs alone, under PrivateData=usage the portal's users' usage
    alone (sshare prints root's, the system accounts', no one else's)."""
    hubs = system.hubs()
    kept = []
    for line in output.splitlines(keepends=True):
        fields = line.split("|")
        user = fields[1].strip() if len(fields) == 4 else None
        if user == "":  # an account's own line
            kept.append(line)
        elif user:
            uid = system.uid(user)
            if uid is not None and any(h.uid_min <= uid <= h.uid_max for h in hubs):
                kept.append(line)
    return "".join(kept)


def _portal_job(line, job_id, names):
    """Whether root's squeue ``line`` (``%i|%U|%j``) is job ``job_id``, named
    as a registered hub's, of a user whose uid that hub registered."""
    listed_id, _, rest = line.strip().partition("|")
    uid, _, name = rest.partition("|")
    hub = names.get(name)
    if listed_id != job_id or hub is None or not uid.isascii() or not uid.isdigit():
        return False
    return hub.uid_min <= int(uid) <= hub.uid_max


def main(argv=None, system=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if system is None and os.geteuid() != 0:
            raise Refused("runs as root only (the hub's account runs it through sudo)")
        sys.stdout.write(read(argv, system or extend.System()))
        return 0
    except Refused as e:
        print(f"{PREFIX}refused: {e}", file=sys.stderr)
        return 2
    except extend.Refused as e:  # Slurm's own failure ("Invalid job id"), or a registration's
        print(f"{PREFIX}{e}", file=sys.stderr)
        return 1
    except Exception as e:  # one line, whatever went wrong
        text = " ".join(str(e).split())[:200]
        print(f"{PREFIX}failed: {type(e).__name__}: {text}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
