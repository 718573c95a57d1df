"""portal check's test job is submitted held, and released only after the
hub's account has looked for it: on a quiet cluster (the foreign site of
tests/site) the job started and ended within a second of sbatch, before the
hub's squeue, which then no longer listed it, and check said the hub could
not see its jobs. Unit test of ``_test_job`` alone, its system calls faked;
tests/site/test_foreign_site.py runs it against the real Slurm."""

import subprocess
from types import SimpleNamespace

from portal import check
from portal.core.profiles import Profile

SETTINGS = {
    "slurm": {"job_name": "jupyter-site1"},
    "check": {"wait_seconds": 5},
    "hub": {"user": "dsp-hub"},
    "envs": {"prefix": "/opt/portal", "jupyter": "/opt/portal/envs/jupyter", "frameworks": []},
}
PROFILE = Profile(name="vision-a100", display_name="A100", partition="a100",
                  environment="pytorch", max_gpus=2, cores_per_gpu=2, mem_per_gpu_gb=4)  # fmt: skip


def test_the_hub_looks_for_the_job_before_it_is_released(tmp_path, monkeypatch):
    calls = []

    def as_user(entry, argv, **kwargs):
        calls.append(("user", argv))
        if argv[0].endswith("sbatch"):
            out = tmp_path / ".portal" / "check" / "42.out"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("portal-check: node a100-n1\nportal-check: env jupyter ok\n"
                           "portal-check: env launcher ok\nportal-check: hub ok\n")  # fmt: skip
            return subprocess.CompletedProcess(argv, 0, "42\n", "")
        if argv[0] in ("head", "rm"):  # the job's output, read as the user
            return subprocess.run(argv, capture_output=True, text=True)
        return subprocess.CompletedProcess(argv, 0, "", "")

    def hub_sees(settings, job_id):
        calls.append(("hub sees", job_id))
        return True, "listed"

    async def release_as_root(job_ids, timeout):
        calls.append(("release", *job_ids))

    monkeypatch.setattr(check, "_as_user", as_user)
    monkeypatch.setattr(check.slurm, "release_as_root", release_as_root)
    monkeypatch.setattr(check, "hub_sees", hub_sees)
    monkeypatch.setattr(check, "_wait_ended", lambda job_id, wait: "")
    entry = SimpleNamespace(pw_dir=str(tmp_path), pw_uid=1234400004, pw_gid=1234400004)
    result = check._test_job(SETTINGS, "hpccheck", entry, PROFILE, "hpc-login", 8281)

    assert result.mark == check.OK, result.line()
    submitted = next(argv for kind, argv in calls if kind == "user" and "sbatch" in argv[0])
    assert "--hold" in submitted
    order = [c[:2] for c in calls if c[0] != "user"]
    assert order == [("hub sees", "42"), ("release", "42")], order
    assert not (tmp_path / ".portal" / "check" / "42.out").exists()


def test_the_output_is_read_and_removed_as_the_user_not_root(tmp_path, monkeypatch):
    """The output's folder is the check user's: root reading it there would
    follow a link the user put in its place (to /etc/shadow), or wait for
    ever on a FIFO; here the user may not read it, so check may not either."""
    out = tmp_path / ".portal" / "check" / "42.out"
    out.parent.mkdir(parents=True)
    out.write_text("portal-check: node a100-n1\nportal-check: env jupyter ok\n"
                   "portal-check: env launcher ok\nportal-check: hub ok\n")  # fmt: skip
    calls = []

    def as_user(entry, argv, **kwargs):
        calls.append(argv)
        if argv[0].endswith("sbatch"):
            return subprocess.CompletedProcess(argv, 0, "42\n", "")
        if argv[0] == "head":
            return subprocess.CompletedProcess(
                argv, 1, "", f"head: cannot open '{argv[-1]}' for reading: Permission denied\n"
            )
        return subprocess.CompletedProcess(argv, 0, "", "")

    async def release_as_root(job_ids, timeout):
        pass

    monkeypatch.setattr(check, "_as_user", as_user)
    monkeypatch.setattr(check.slurm, "release_as_root", release_as_root)
    monkeypatch.setattr(check, "hub_sees", lambda settings, job_id: (True, "listed"))
    monkeypatch.setattr(check, "_wait_ended", lambda job_id, wait: "")
    entry = SimpleNamespace(pw_dir=str(tmp_path), pw_uid=1234400004, pw_gid=1234400004)
    result = check._test_job(SETTINGS, "hpccheck", entry, PROFILE, "hpc-login", 8281)

    assert result.mark == check.FAIL, result.line()
    assert "Permission denied" in result.line()
    assert ["head", "-c", str(check.OUTPUT_MOST), "--", str(out)] in calls
    assert ["rm", "-f", "--", str(out)] in calls


def test_root_releases_nothing_but_one_job_id_sbatch_gave(tmp_path, monkeypatch):
    """Root releases and cancels the id the user's sbatch printed: a list
    of ids there ("42,43": another user's job) is refused, nothing released."""
    released = []

    def as_user(entry, argv, **kwargs):
        out = "42,43\n" if argv[0].endswith("sbatch") else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    async def release_as_root(job_ids, timeout):
        released.extend(job_ids)

    monkeypatch.setattr(check, "_as_user", as_user)
    monkeypatch.setattr(check.slurm, "release_as_root", release_as_root)
    monkeypatch.setattr(check, "hub_sees", lambda settings, job_id: (True, "listed"))
    monkeypatch.setattr(check, "_wait_ended", lambda job_id, wait: "")
    entry = SimpleNamespace(pw_dir=str(tmp_path), pw_uid=1234400004, pw_gid=1234400004)
    result = check._test_job(SETTINGS, "hpccheck", entry, PROFILE, "hpc-login", 8281)

    assert result.mark == check.FAIL, result.line()
    assert "no job id" in result.line()
    assert released == []
