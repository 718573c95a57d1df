"""The usage report's arithmetic (portal/usage.py) from made sacct output;
the real accounting is read by tests/integration/test_usage.py."""

from datetime import datetime

import pytest

from portal import usage

SACCT = "\n".join([
    # a session of alice's: 2 GPUs, 16 cores, 2 h, its steps used 8 core-hours
    "100|alice|portal-jupyter|COMPLETED|2026-11-26T09:50:00|2026-11-26T10:00:00|"
    "2026-11-26T12:00:00|7200|billing=16,cpu=16,gres/gpu=2,mem=96G,node=1|00:00:00|16|portal|",
    "100.batch||batch|COMPLETED|2026-11-26T10:00:00|2026-11-26T10:00:00|"
    "2026-11-26T12:00:00|7200|cpu=16,gres/gpu=2|08:00:00|16|portal|",
    # a notebook job of bob's across midnight: 1 GPU, 8 cores, 1 h
    "101_0|bob|portal-jupyter-notebook|FAILED|2026-11-26T23:30:00|2026-11-26T23:30:00|"
    "2026-11-27T00:30:00|3600|cpu=8,gres/gpu=1,mem=48G,node=1|01:00:00|8|portal|",
    # queued, never ran: no GPU-hours
    "102|bob|portal-jupyter|PENDING|2026-11-27T08:00:00|Unknown|Unknown|0|cpu=8,gres/gpu=1|"
    "00:00:00|8|portal|",
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
    # untyped GRES (this demo's before issue 38): one model column, "(untyped)"
    assert text.splitlines()[0].endswith(
        "gpus_asked,gpu_hours_model_(untyped),gpu_hours_account_portal"
    )
    assert text.splitlines()[1].endswith(",2,4.0,4.0")


PERIODS = [
    ("2026-13-01", ""), ("x", ""), ("2026-11-02", "2026-11-01"), ("2020-01-01", "2026-01-01"),
]  # fmt: skip


@pytest.mark.parametrize("since, until", PERIODS)
def test_a_period_that_is_no_period_is_refused(since, until):
    with pytest.raises(usage.UsageError):
        usage.period(since, until)


# sacct -a -n -P -o FIELDS of a site with typed GRES (issue 38): AllocTRES
# holds the model's count beside the total (in Slurm's order of TRES ids),
# the steps have no user but their job's account
TYPED = "\n".join([
    "200|alice|portal-jupyter|COMPLETED|2026-11-26T09:00:00|2026-11-26T09:00:00|"
    "2026-11-26T11:00:00|7200|billing=16,cpu=16,gres/gpu=2,gres/gpu:v100-sxm2=2,mem=96G,"
    "node=1|00:10:00|16|lab-vision|",
    "200.batch|||COMPLETED|2026-11-26T09:00:00|2026-11-26T09:00:00|2026-11-26T11:00:00|7200|"
    "cpu=16,gres/gpu=2,gres/gpu:v100-sxm2=2,mem=96G,node=1|00:10:00|16|lab-vision|",
    "200.extern|||COMPLETED|2026-11-26T09:00:00|2026-11-26T09:00:00|2026-11-26T11:00:00|"
    "7200|billing=16,cpu=16,gres/gpu=2,gres/gpu:v100-sxm2=2,mem=96G,node=1|00:00:00|16|"
    "lab-vision|",
    "201_1|carol|portal-jupyter-notebook|COMPLETED|2026-11-26T10:00:00|2026-11-26T10:00:00|"
    "2026-11-26T13:00:00|10800|billing=8,cpu=8,gres/gpu:v100-pcie=1,gres/gpu=1,mem=48G,"
    "node=1|00:30:00|8|lab-nlp|course",
    "202|carol|portal-jupyter|RUNNING|2026-11-26T12:00:00|2026-11-26T12:00:00|Unknown|3600|"
    "billing=8,cpu=8,gres/gpu:v100-sxm2=1,gres/gpu=1,mem=48G,node=1|00:00:00|8|lab-vision|",
    # a CPU session: no GPU, no model
    "203|bob|portal-jupyter|COMPLETED|2026-11-26T12:00:00|2026-11-26T12:00:00|"
    "2026-11-26T13:00:00|3600|billing=4,cpu=4,mem=16G,node=1|00:20:00|4|lab-nlp|",
])  # fmt: skip


def typed_report():
    rows = usage.parse_rows(TYPED, "portal-jupyter")
    return usage.summary(rows, SINCE, UNTIL, lambda user: ("portal-users",))


def test_gpu_hours_by_model_and_by_account_come_from_allocated_tres():
    data = typed_report()
    models = {m["gpu_model"]: m for m in data["models"]}
    assert {m: v["gpu_hours"] for m, v in models.items()} == {"v100-pcie": 3.0, "v100-sxm2": 5.0}
    assert models["v100-sxm2"]["gpus_asked"] == 3 and models["v100-sxm2"]["sessions"] == 2
    assert models["v100-pcie"]["notebook_jobs"] == 1
    accounts = {a["account"]: a for a in data["accounts"]}
    assert {a: v["gpu_hours"] for a, v in accounts.items()} == {"lab-nlp": 3.0, "lab-vision": 5.0}
    assert accounts["lab-nlp"]["sessions"] == 1  # bob's CPU session: its account, no GPU-hours
    users = {u["username"]: u for u in data["users"]}
    assert users["carol"]["gpu_hours_by_model"] == {"v100-pcie": 3.0, "v100-sxm2": 1.0}
    assert users["carol"]["gpu_hours_by_account"] == {"lab-nlp": 3.0, "lab-vision": 1.0}
    assert users["bob"]["gpu_hours_by_model"] == {} and users["bob"]["gpu_hours"] == 0
    jobs = {j["id"]: j for j in data["jobs"]}
    assert jobs["201_1"]["gpu_models"] == {"v100-pcie": 1}
    assert (jobs["201_1"]["account"], jobs["201_1"]["reservation"]) == ("lab-nlp", "course")
    assert jobs["200"]["gpus"] == 2 and jobs["203"]["gpu_models"] == {}


def test_the_csv_has_a_column_per_model_and_per_account():
    header, *lines = usage.as_csv(typed_report()).splitlines()
    columns = header.split(",")
    assert columns[-4:] == [
        "gpu_hours_model_v100-pcie", "gpu_hours_model_v100-sxm2",
        "gpu_hours_account_lab-nlp", "gpu_hours_account_lab-vision",
    ]  # fmt: skip
    rows = {line.split(",")[0]: line.split(",") for line in lines}
    assert rows["carol"][-4:] == ["3.0", "1.0", "3.0", "1.0"]
    assert rows["bob"][-4:] == ["0", "0", "0", "0"]


def test_a_line_of_another_shape_is_left_out():
    eleven = "300|alice|portal-jupyter|COMPLETED|||2026-11-26T10:00:00|60|gres/gpu=1|00:00:01|8"
    assert usage.parse_rows(eleven, "portal-jupyter") == []


# Verbatim from the demo's slurmdbd on its typed shape (demoshape's live test
# jobs, 2026-11-28): sacct -a -n -P -o FIELDS, the extern steps left out.
SLURMDBD = "\n".join([
    '855|alice|portal-shape-ea126272|COMPLETED|2026-11-28T11:55:14|2026-11-28T11:55:15|2026-11-28T11:55:17|2|billing=1,cpu=1,gres/gpu:v100-sxm2=1,gres/gpu=1,mem=6G,node=1|00:00.004|1|portal|',
    '855.batch||batch|COMPLETED|2026-11-28T11:55:15|2026-11-28T11:55:15|2026-11-28T11:55:17|2|cpu=1,gres/gpu:v100-sxm2=1,gres/gpu=1,mem=6G,node=1|00:00.002|1|portal|',
    '856|alice|portal-shape-ea126272|COMPLETED|2026-11-28T11:55:14|2026-11-28T11:55:15|2026-11-28T11:55:17|2|billing=1,cpu=1,gres/gpu:v100-pcie=1,gres/gpu=1,mem=6G,node=1|00:00.004|1|portal|',
    '856.batch||batch|COMPLETED|2026-11-28T11:55:15|2026-11-28T11:55:15|2026-11-28T11:55:17|2|cpu=1,gres/gpu:v100-pcie=1,gres/gpu=1,mem=6G,node=1|00:00.003|1|portal|',
    '862|alice|portal-shape-ea126272|COMPLETED|2026-11-28T11:55:28|2026-11-28T11:55:28|2026-11-28T11:55:30|2|billing=1,cpu=1,gres/gpu:v100-sxm2=1,gres/gpu=1,mem=6G,node=1|00:00.006|1|lab-vision|',
    '862.batch||batch|COMPLETED|2026-11-28T11:55:28|2026-11-28T11:55:28|2026-11-28T11:55:30|2|cpu=1,gres/gpu:v100-sxm2=1,gres/gpu=1,mem=6G,node=1|00:00.004|1|lab-vision|',
    '864|alice|portal-shape-ea126272|COMPLETED|2026-11-28T11:55:31|2026-11-28T11:55:31|2026-11-28T11:55:33|2|billing=1,cpu=1,gres/gpu:v100-sxm2=1,gres/gpu=1,mem=6G,node=1|00:00.005|1|portal|vision-course',
    '864.batch||batch|COMPLETED|2026-11-28T11:55:31|2026-11-28T11:55:31|2026-11-28T11:55:33|2|cpu=1,gres/gpu:v100-sxm2=1,gres/gpu=1,mem=6G,node=1|00:00.004|1|portal|',
])  # fmt: skip


def test_slurmdbd_s_own_lines_give_each_job_its_model_account_and_reservation():
    rows = usage.parse_rows(SLURMDBD, "portal-shape-ea126272")
    data = usage.summary(rows, SINCE, datetime(2026, 11, 29), lambda user: ("g",))
    jobs = {j["id"]: j for j in data["jobs"]}
    assert {j: (v["gpu_models"], v["account"], v["reservation"]) for j, v in jobs.items()} == {
        "855": ({"v100-sxm2": 1}, "portal", ""),
        "856": ({"v100-pcie": 1}, "portal", ""),
        "862": ({"v100-sxm2": 1}, "lab-vision", ""),
        "864": ({"v100-sxm2": 1}, "portal", "vision-course"),
    }  # fmt: skip
    models = {m["gpu_model"]: m["gpus_asked"] for m in data["models"]}
    assert models == {"v100-pcie": 1, "v100-sxm2": 3}
    hours = {a["account"]: a["gpu_hours"] for a in data["accounts"]}
    assert hours == {"lab-vision": round(2 / 3600, 3), "portal": round(6 / 3600, 3)}
