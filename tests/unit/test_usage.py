"""The usage report's arithmetic (portal/usage.py) from made sacct output;
the real accounting is read by tests/integration/test_usage.py."""

from datetime import datetime

import pytest

from portal import usage

SACCT = "\n".join([
    # a session of alice's: 2 GPUs, 16 cores, 2 h, its steps used 8 core-hours
    "100|alice|portal-jupyter|COMPLETED|2026-11-26T09:50:00|2026-11-26T10:00:00|"
    "2026-11-26T12:00:00|7200|billing=16,cpu=16,gres/gpu=2,mem=96G,node=1|00:00:00|16",
    "100.batch||batch|COMPLETED|2026-11-26T10:00:00|2026-11-26T10:00:00|"
    "2026-11-26T12:00:00|7200|cpu=16,gres/gpu=2|08:00:00|16",
    # a notebook job of bob's across midnight: 1 GPU, 8 cores, 1 h
    "101_0|bob|portal-jupyter-notebook|FAILED|2026-11-26T23:30:00|2026-11-26T23:30:00|"
    "2026-11-27T00:30:00|3600|cpu=8,gres/gpu=1,mem=48G,node=1|01:00:00|8",
    # queued, never ran: no GPU-hours
    "102|bob|portal-jupyter|PENDING|2026-11-27T08:00:00|Unknown|Unknown|0|cpu=8,gres/gpu=1|"
    "00:00:00|8",
    "junk line",
])  # fmt: skip
SINCE, UNTIL = datetime(2026, 11, 26), datetime(2026, 11, 28)


def report():
    rows = usage.parse_rows(SACCT, "portal-jupyter")
    rows[0].profile, rows[0].idle_seconds = "pytorch", 1800
    rows[1].profile, rows[1].gpu_busy = "tensorflow", 40.0
    groups = {"alice": ("portal-users", "vision"), "bob": ("portal-users",)}
    return usage.summary(rows, SINCE, UNTIL, groups.__getitem__)


def test_gpu_hours_cpu_efficiency_and_queue_waits_per_user():
    users = {u["username"]: u for u in report()["users"]}
    alice, bob = users["alice"], users["bob"]
    assert alice["gpu_hours"] == 4.0 and alice["cpu_efficiency"] == 0.25  # 8 of 32 core-hours
    assert alice["sessions"] == 1 and alice["notebook_jobs"] == 0
    assert alice["idle_hours_before_cull"] == 0.5 and alice["queue_wait_median_s"] == 600.0
    assert alice["gpu_busy"] is None  # no GPU data, never 0
    assert bob["gpu_hours"] == 1.0 and bob["notebook_jobs"] == 1 and bob["sessions"] == 1
    assert bob["gpu_busy"] == 40.0 and bob["cpu_efficiency"] == 0.125  # 1 of 8 core-hours


def test_groups_profiles_and_days_split_at_midnight():
    data = report()
    groups = {g["group"]: g["gpu_hours"] for g in data["groups"]}
    assert groups == {"portal-users": 5.0, "vision": 4.0}
    assert {p["profile"]: p["gpu_hours"] for p in data["profiles"]}["tensorflow"] == 1.0
    days = {(d["day"], d["group"]): d["gpu_hours"] for d in data["days"]}
    assert (
        days[("2026-11-26", "portal-users")] == 4.5 and days[("2026-11-27", "portal-users")] == 0.5
    )


def test_the_period_clips_what_a_job_held():
    rows = usage.parse_rows(SACCT, "portal-jupyter")
    assert rows[0].held(datetime(2026, 11, 26, 11), UNTIL) == 3600


def test_the_csv_has_a_row_per_user():
    text = usage.as_csv(report())
    assert text.splitlines()[0].startswith("username,sessions,notebook_jobs,gpu_hours")
    assert text.splitlines()[1].startswith("alice,1,0,4.0,0.25,,0.5,600.0,2")


PERIODS = [
    ("2026-13-01", ""), ("x", ""), ("2026-11-02", "2026-11-01"), ("2020-01-01", "2026-01-01"),
]  # fmt: skip


@pytest.mark.parametrize("since, until", PERIODS)
def test_a_period_that_is_no_period_is_refused(since, until):
    with pytest.raises(usage.UsageError):
        usage.period(since, until)
