"""The root helper ``portal-extend`` (portal/helper/extend.py) decides without
Slurm: its reads of Slurm, NSS and the hubs' registrations are replaced, in
this unit test only, by a stand-in cluster that records any change. Every
refusal changes nothing and says why in one line; the installed copy runs
with Python's standard library alone. The real helper, behind sudo, against
the real Slurm is tests/integration/test_extend.py's."""

import doctest
import os
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest

import portal.helper.extend
from portal import settings
from portal.core.durations import slurm_time as hub_slurm_time
from portal.helper.extend import (
    MAX_MINUTES,
    SUDOERS_ARGS,
    Hub,
    Job,
    Refused,
    System,
    Unusable,
    main,
    read_registration,
    registration,
    slurm_minutes,
    slurm_time,
    trusted,
)
from portal.slurm.parse import max_time_minutes

SESSION = "portal-jupyter"
# The folder of Slurm's commands the session's hub registered ([slurm] bin_dir).
BIN_DIR = "/opt/slurm/bin"
# alice's session: 2 h of a profile that allows 24 h, partition gpu (7 days), QOS portal (1 day)
ALICE = Job("353", "RUNNING", 20001, "alice", "portal", 120, "gpu", "portal", SESSION)


class Cluster:
    """What the helper reads, as a stand-in: one job, the hubs' registrations
    by job name, the users' uids and groups, the caps; ``changes`` records
    every ``set_limit``; ``folders`` the folder each read of Slurm's caps and
    the change ran from."""

    def __init__(self, job=ALICE, **changes):
        self.jobs = {job.id: job}
        self.hubs = {
            SESSION: read_registration(
                registration(SESSION, ["portal-users", "portal-admins"], 10000, 60000, BIN_DIR),
                SESSION,
            )
        }
        self.folders = set()
        self.uids = {"alice": 20001, "eve": 20004, "openldap": 101, "root": 0}
        self.user_groups = {"alice": {"portal-users", "vision"}, "eve": {"eve"}}
        self.caps = {"gpu": 7 * 1440, "portal": 1440, "short": 180, "open": None}
        self.changes = []

    def job(self, job_id):
        return self.jobs.get(job_id)

    def hub(self, job_name):
        return self.hubs.get(job_name)

    def uid(self, user):
        return self.uids.get(user)

    def groups(self, user):
        return self.user_groups.get(user, set())

    def partition_max(self, name, bin_dir):
        self.folders.add(bin_dir)
        return self.caps[name]

    def qos_max(self, name, bin_dir):
        self.folders.add(bin_dir)
        if name not in self.caps:
            raise Refused(f"sacctmgr lists no QOS {name!r}")
        return self.caps[name]

    def set_limit(self, job_id, minutes, bin_dir):
        self.folders.add(bin_dir)
        self.changes.append((job_id, minutes))


def helper(argv, cluster, capsys):
    """``portal-extend ARGV`` against ``cluster``: (exit status, stdout, stderr)."""
    status = main([str(a) for a in argv], cluster)
    out, err = capsys.readouterr()
    return status, out, err


def refused(argv, cluster, capsys, status=1):
    """The helper's one-line reason for refusing ``argv``; asserts it changed nothing."""
    code, out, err = helper(argv, cluster, capsys)
    assert (code, out, cluster.changes) == (status, "", []), (code, out, err)
    assert err.endswith("\n") and err.count("\n") == 1 and err.startswith("portal-extend: ")
    return err.removeprefix("portal-extend: ").strip()


def test_the_examples_hold():
    assert doctest.testmod(portal.helper.extend).failed == 0


def test_the_owner_session_is_lengthened_within_every_cap(capsys):
    cluster = Cluster()
    assert helper([353, 300, 1440], cluster, capsys) == (0, "05:00:00\n", "")
    assert cluster.changes == [("353", 300)]
    # exactly the profile's 24 h, which is the QOS's day too
    cluster = Cluster()
    assert helper([353, 1440, 1440], cluster, capsys) == (0, "1-00:00:00\n", "")
    assert cluster.changes == [("353", 1440)]


@pytest.mark.parametrize(
    "job", ["", "0", "-1", "x", "1;id", "35 3", "٣", "１", "12345678901", "4294967294", "1e3"]
)
def test_a_job_id_is_a_plain_bounded_integer(capsys, job):
    reason = refused([job, 300, 1440], Cluster(), capsys, status=2)
    assert reason.startswith("JOB must be a Slurm job id, not ")


@pytest.mark.parametrize("minutes", ["", "0", "-60", "1.5", "5h", "²", "43201", "9999999"])
def test_minutes_are_plain_bounded_integers(capsys, minutes):
    reason = refused([353, minutes, 1440], Cluster(), capsys, status=2)
    assert reason == (
        f"MINUTES must be a whole number of minutes from 1 to {MAX_MINUTES}, not {minutes!r}"
    )
    reason = refused([353, 300, minutes], Cluster(), capsys, status=2)
    assert reason.startswith("PROFILE_MAX must be a whole number of minutes")


@pytest.mark.parametrize("argv", [[], [353], [353, 300], [353, 300, 1440, "x"]])
def test_three_arguments_or_the_usage(capsys, argv):
    assert refused(argv, Cluster(), capsys, status=2) == (
        "usage: portal-extend JOB MINUTES PROFILE_MAX"
    )


def test_a_control_character_is_shown_escaped(capsys):
    reason = refused(["1\n2", 300, 1440], Cluster(), capsys, status=2)
    assert reason == "JOB must be a Slurm job id, not '1\\n2'"


def test_it_only_lengthens(capsys):
    assert refused([353, 120, 1440], Cluster(), capsys) == (
        "02:00:00 is not longer than job 353's limit 02:00:00: this helper only lengthens"
    )
    assert refused([353, 60, 1440], Cluster(), capsys).startswith("01:00:00 is not longer")
    unlimited = Cluster(Job(**{**ALICE.__dict__, "limit": None}))
    assert refused([353, 300, 1440], unlimited, capsys) == (
        "job 353 has no time limit: it needs no extension"
    )


def test_never_past_the_profile_the_hub_names(capsys):
    assert refused([353, 300, 240], Cluster(), capsys) == (
        "05:00:00 is more than the session's profile allows (04:00:00)"
    )


def test_never_past_the_qos_or_the_partition_whatever_the_profile(capsys):
    # a profile of 30 days: the QOS's day holds
    assert refused([353, 1500, MAX_MINUTES], Cluster(), capsys) == (
        "1-01:00:00 is more than QOS portal allows (1-00:00:00)"
    )
    short = Cluster(Job(**{**ALICE.__dict__, "partition": "short", "qos": "open"}))
    assert refused([353, 240, 1440], short, capsys) == (
        "04:00:00 is more than partition short allows (03:00:00)"
    )
    assert helper([353, 180, 1440], short, capsys)[:2] == (0, "03:00:00\n")
    # a QOS that cannot be read is no missing cap
    unknown = Cluster(Job(**{**ALICE.__dict__, "qos": "gone"}))
    assert refused([353, 300, 1440], unknown, capsys) == "sacctmgr lists no QOS 'gone'"


@pytest.mark.parametrize("state", ["PENDING", "COMPLETING", "SUSPENDED", "CANCELLED"])
def test_a_job_that_does_not_run_is_left_alone(capsys, state):
    cluster = Cluster(Job(**{**ALICE.__dict__, "state": state}))
    assert refused([353, 300, 1440], cluster, capsys) == (
        f"job 353 is {state}, not RUNNING: only a running session is extended"
    )


def test_a_job_slurm_does_not_list(capsys):
    assert refused([999999, 60, 60], Cluster(), capsys) == "job 999999 is not in Slurm's queue"


@pytest.mark.parametrize("name", ["batch", "portal-jupyter-x", "../portal-jupyter", "", "a b"])
def test_a_job_that_is_no_portal_session_is_left_alone(capsys, name):
    cluster = Cluster(Job(**{**ALICE.__dict__, "name": name}))
    reason = refused([353, 300, 1440], cluster, capsys)
    assert reason == (
        f"job 353 (named {name!r}) is not a portal session: "
        "no hub registered that job name in /etc/portal/extend.d"
    )


def test_root_s_job_is_left_alone(capsys):
    for uid, user in ((0, "root"), (0, "alice"), (20001, "root")):
        cluster = Cluster(Job(**{**ALICE.__dict__, "uid": uid, "user": user}))
        assert refused([353, 300, 1440], cluster, capsys) == (
            "job 353 is root's: only a portal user's session is extended"
        )


def test_a_system_account_s_job_is_left_alone(capsys):
    cluster = Cluster(Job(**{**ALICE.__dict__, "uid": 101, "user": "openldap"}))
    assert refused([353, 300, 1440], cluster, capsys) == (
        "job 353 belongs to openldap (uid 101), outside the portal's users (uids 10000-60000)"
    )


def test_a_user_outside_the_portal_s_groups_is_left_alone(capsys):
    cluster = Cluster(Job(**{**ALICE.__dict__, "uid": 20004, "user": "eve"}))
    assert refused([353, 300, 1440], cluster, capsys) == (
        "job 353 belongs to eve, who is in none of the portal's groups "
        "(portal-admins, portal-users)"
    )
    # alice, once she has left the groups
    cluster = Cluster()
    cluster.user_groups["alice"] = {"vision"}
    assert refused([353, 300, 1440], cluster, capsys).startswith("job 353 belongs to alice, who")


def test_the_user_is_whom_slurm_names(capsys):
    cluster = Cluster(Job(**{**ALICE.__dict__, "uid": 20002}))
    assert refused([353, 300, 1440], cluster, capsys) == (
        "job 353's user 'alice' has uid 20001 here, not 20002 as Slurm says"
    )
    cluster = Cluster(Job(**{**ALICE.__dict__, "user": "ghost"}))
    assert refused([353, 300, 1440], cluster, capsys) == (
        "job 353's user 'ghost' is not known here (getent passwd)"
    )


def test_a_session_under_a_lab_s_account_is_lengthened(capsys):
    """The helper knows the portal's jobs by what their hub registered (job
    name, users' groups, uid range), whatever Slurm account they run under."""
    cluster = Cluster(Job(**{**ALICE.__dict__, "account": "physics"}))
    assert helper([353, 300, 1440], cluster, capsys) == (0, "05:00:00\n", "")
    assert cluster.changes == [("353", 300)]
    assert not hasattr(portal.helper.extend, "ACCOUNT")


def test_a_user_s_own_job_named_like_the_sessions_gets_no_more_than_the_caps(capsys):
    """alice's own job (sbatch from her shell, her lab's account, a QOS of
    its own) named like the portal's sessions passes the job's checks: the
    helper cannot tell it from a session. The hub asks for its own sessions'
    jobs alone (tests/integration/test_slurm_bin.py); whoever asks, the
    profile's, the partition's and the QOS's caps hold."""
    own = Cluster(Job(**{**ALICE.__dict__, "account": "physics", "qos": "short"}))
    assert refused([353, 300, MAX_MINUTES], own, capsys) == (
        "05:00:00 is more than QOS short allows (03:00:00)"
    )
    own = Cluster(Job(**{**ALICE.__dict__, "account": "physics", "partition": "short"}))
    assert refused([353, 240, MAX_MINUTES], own, capsys) == (
        "04:00:00 is more than partition short allows (03:00:00)"
    )
    assert refused([353, 300, 240], own, capsys).endswith("profile allows (04:00:00)")
    # and nobody else's job, under whatever name and account
    eve = Cluster(Job(**{**ALICE.__dict__, "uid": 20004, "user": "eve", "account": "physics"}))
    assert refused([353, 300, 1440], eve, capsys).startswith("job 353 belongs to eve, who is in")


def test_slurm_is_asked_from_the_folder_the_job_s_hub_registered(capsys):
    cluster = Cluster()
    assert helper([353, 300, 1440], cluster, capsys)[0] == 0
    assert cluster.folders == {BIN_DIR}


def test_a_failing_slurm_command_is_a_refusal(capsys):
    class Down(Cluster):
        def job(self, job_id):
            raise Refused("squeue failed: Unable to contact slurm controller (connect failure)")

    assert refused([353, 300, 1440], Down(), capsys) == (
        "squeue failed: Unable to contact slurm controller (connect failure)"
    )


def test_what_nobody_foresaw_is_one_line_too(capsys):
    class Broken(Cluster):
        def groups(self, user):
            raise KeyError("getpwnam(): name not found: 'alice'\nmore")

    reason = refused([353, 300, 1440], Broken(), capsys)
    assert reason.startswith("failed: KeyError: ")


@pytest.mark.parametrize(
    "groups, uid_min, uid_max, job_name, message",
    [
        ([], 10000, 60000, SESSION, "allowed_groups"),
        (["portal users"], 10000, 60000, SESSION, "allowed_groups"),
        (["portal-users"], 0, 60000, SESSION, "uid_min"),
        (["portal-users"], 60000, 10000, SESSION, "uid_min"),
        (["portal-users"], 10000, True, SESSION, "uid_min"),
        (["portal-users"], 10000, 60000, "../sessions", "job_name"),
        (["portal-users"], 10000, 60000, ".hidden", "job_name"),
    ],
)
def test_a_hub_registers_plain_names_and_uids(groups, uid_min, uid_max, job_name, message):
    with pytest.raises(ValueError, match=message):
        registration(job_name, groups, uid_min, uid_max, "/usr/bin")


@pytest.mark.parametrize(
    "bin_dir", ["usr/bin", "/", "/usr/bin/", "/opt/../bin", "/opt/slurm bin", "/opt//bin", 7, ""]
)
def test_a_hub_registers_a_plain_absolute_folder_of_slurm_s_commands(bin_dir):
    with pytest.raises(ValueError, match="bin_dir of 'portal-jupyter' is not a plain absolute"):
        registration(SESSION, ["portal-users"], 10000, 60000, bin_dir)


def test_a_hub_registers_its_job_name_and_its_users_groups_and_uids():
    """What deploy/hub.sh writes for a hub: from its settings, the groups by
    the cn of [ldap] allowed_groups."""
    site = settings.merge(settings.defaults(), {"slurm": {"job_name": "portal-test"}})
    hub = read_registration(settings.extend_registration(site), "portal-test")
    assert hub == Hub("portal-test", ("portal-admins", "portal-users"), 10000, 60000, "/usr/bin")
    site = settings.merge(site, {"slurm": {"bin_dir": "/opt/slurm/bin"}})
    hub = read_registration(settings.extend_registration(site), "portal-test")
    assert hub.bin_dir == "/opt/slurm/bin"
    site = settings.merge(site, {"slurm": {"job_name": "my sessions"}})
    with pytest.raises(ValueError, match="job_name 'my sessions' is not a plain name"):
        settings.extend_registration(site)


def test_a_registration_is_of_its_own_job_name():
    text = registration("portal-test", ["portal-users"], 10000, 60000, "/usr/bin")
    assert read_registration(text, "portal-test").groups == ("portal-users",)
    with pytest.raises(Refused, match="names 'portal-test'"):
        read_registration(text, SESSION)
    for text in ("", "[]", "{}", '{"job_name": "portal-test"}'):
        with pytest.raises(Refused, match="not valid JSON of a hub"):
            read_registration(text, "portal-test")
    # one written before [slurm] bin_dir: the hub registers again
    old = '{"job_name": "t", "groups": ["g"], "uid_min": 10000, "uid_max": 60000}'
    with pytest.raises(Refused, match=r"names no folder .* \(deploy/hub.sh start\)"):
        read_registration(old, "t")


def registry(tmp_path, *hubs):
    """A registry folder of ``hubs`` (``(job_name, bin_dir)``)."""
    folder = tmp_path / "extend.d"
    folder.mkdir()
    for job_name, bin_dir in hubs:
        text = registration(job_name, ["portal-users"], 10000, 60000, bin_dir)
        (folder / f"{job_name}.json").write_text(text)
    return folder


def test_the_job_is_read_with_a_registered_folder_and_never_another(tmp_path, monkeypatch):
    """System, with the root-ownership checks stood in for (tmp_path is not
    root's alone): the job is looked up with the registered folders in
    turn, the first whose squeue can run; the caller names no folder."""
    ran = []

    def slurm(self, bin_dir, *argv):
        ran.append((bin_dir, argv[0]))
        if bin_dir == "/gone/bin":
            raise Unusable("/gone/bin/squeue is not there: squeue not run")
        return f"353|RUNNING|20001|alice|physics|2:00:00|gpu|portal|{SESSION}\n"

    monkeypatch.setattr(System, "slurm", slurm)
    monkeypatch.setattr(portal.helper.extend, "check_root_folder", lambda folder, what: None)
    monkeypatch.setattr(portal.helper.extend, "trusted", lambda st: True)
    system = System(registry(tmp_path, ("a-hub", "/gone/bin"), (SESSION, BIN_DIR)))
    assert system.folders() == ["/gone/bin", BIN_DIR]
    assert system.hub(SESSION).bin_dir == BIN_DIR
    assert system.job("353").account == "physics"
    assert ran == [("/gone/bin", "squeue"), (BIN_DIR, "squeue")]
    (tmp_path / "none").mkdir()
    with pytest.raises(Refused, match="no hub registered its sessions in"):
        System(tmp_path / "none").job("353")


def test_root_runs_no_command_of_a_folder_another_account_may_write(tmp_path):
    """A registered folder (or one above it) that someone but root may
    write: the command is not run (tmp_path is under the world-writable
    /tmp, and the test's own)."""
    command = tmp_path / "squeue"
    command.write_text("#!/bin/sh\necho ran\n")
    command.chmod(0o755)
    with pytest.raises(Unusable, match="is not a folder of root's alone: squeue not run"):
        System(tmp_path).slurm(str(tmp_path), "squeue")
    with pytest.raises(Unusable, match=r"/usr/bin/no-such-command is not there"):
        System(tmp_path).slurm("/usr/bin", "no-such-command")


@pytest.mark.parametrize(
    "uid, mode, ok",
    [(0, 0o100644, True), (0, 0o40755, True), (0, 0o100664, False), (0, 0o41777, False),
     (0, 0o100646, False), (999, 0o100644, False), (999, 0o40700, False)],
)  # fmt: skip
def test_registrations_are_read_from_root_s_files_alone(uid, mode, ok):
    assert trusted(SimpleNamespace(st_uid=uid, st_mode=mode)) is ok


@pytest.mark.parametrize(
    "text", ["5:00:00", "1-02:00:00", "30:00", "45", "1-02", "7-00:00:00", "UNLIMITED", "12:30:15"]
)
def test_the_helper_reads_time_limits_as_the_hub_does(text):
    assert slurm_minutes(text) == max_time_minutes(text)


@pytest.mark.parametrize("minutes", [1, 59, 60, 300, 1439, 1440, 1500, 10079, MAX_MINUTES])
def test_the_helper_writes_time_limits_as_the_hub_does(minutes):
    assert slurm_time(minutes) == hub_slurm_time(minutes)
    assert slurm_minutes(slurm_time(minutes)) == minutes


@pytest.mark.parametrize("text", ["-5", "1-", "5:", "1:2:3:4", "x", "٣:00"])
def test_what_is_no_time_limit_is_refused(text):
    with pytest.raises(ValueError):
        slurm_minutes(text)


def test_the_sudoers_rule_lets_through_what_the_helper_takes_and_no_shell_word():
    """The rule's arguments are a POSIX extended regular expression (sudo
    1.9.10), which Python's ``re`` reads alike for these; the helper still
    checks everything itself."""
    rule = re.compile(SUDOERS_ARGS)
    for argv in (["353", "300", "1440"], ["4294967293", str(MAX_MINUTES), str(MAX_MINUTES)]):
        assert rule.fullmatch(" ".join(argv))
    for args in ("353 300", "353 300 1440 1", "353;id 300 1440", "353 300 1440\n", "-1 1 1"):
        assert not rule.fullmatch(args), args


def test_the_installed_copy_needs_nothing_but_the_standard_library(tmp_path):
    """Copied away from the repository and run as the kernel runs it for
    sudo (its own ``#!/usr/bin/python3 -I``), it starts, and refuses a
    request it cannot take; it imports nothing of the portal."""
    copy = tmp_path / "portal-extend"
    shutil.copy(portal.helper.extend.__file__, copy)
    first = copy.read_text().splitlines()[0]
    assert first == "#!/usr/bin/python3 -I"
    run = subprocess.run(
        [*first[2:].split(), str(copy), "353", "x", "60"],
        capture_output=True, text=True, env={}, cwd=tmp_path,
    )  # fmt: skip
    expected = 2 if os.geteuid() == 0 else 1  # not root: refused before anything else
    assert run.returncode == expected, run.stderr
    assert run.stdout == "" and run.stderr.count("\n") == 1
    imports = subprocess.run(
        ["/usr/bin/python3", "-I", "-c",
         "import runpy, sys; runpy.run_path(sys.argv[1]); "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('portal', 'spawners')))",
         str(copy)],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert imports.returncode == 0 and imports.stdout.strip() == "[]", imports.stderr
