"""``make bench``'s verdict (bench/run.py) from made figures: the targets,
a failed part, the exit status and the JSON; the real run is ``make bench``
(docs/operators/benchmarks.md)."""

import json
from datetime import UTC, datetime

from bench import run


def test_each_first_cell_is_checked_against_its_own_ready_plus_a_second():
    figures = {
        "first_cell_ready_s_pytorch": 3.2,
        "first_cell_s_pytorch": 4.3,
        "first_cell_ready_s_mxnet": 4.8,
        "first_cell_s_mxnet": 5.5,
        "first_cell_cold_s_mxnet": 30.0,  # shown beside, not a target
        "first_cell_s_tensorflow": 9.0,  # no ready figure: nothing to check against
    }
    checks = {c["figure"]: c for c in run.check_targets(figures)}
    assert set(checks) == {"first_cell_s_pytorch", "first_cell_s_mxnet"}
    assert checks["first_cell_s_pytorch"]["target"] == 4.2
    assert not checks["first_cell_s_pytorch"]["met"]
    assert checks["first_cell_s_mxnet"]["met"]


def test_the_issues_targets_are_checked_and_a_missed_one_fails_the_run():
    figures = {
        "hub_p95_ms": 99.0,
        "hub_p95_ms_stress": 401.0,
        "hub_p95_ms_spawn": 100.0,  # issue 38: at most 100 (it was 150)
        "hub_p95_ms_home": 900.0,  # no target of its own
        "train_portal_vs_plain": 0.96,
        "tensorboard_dashboard_vs_direct": 1.2,
    }
    checks = run.check_targets(figures)
    missed = sorted(c["figure"] for c in checks if not c["met"])
    assert missed == ["hub_p95_ms_stress", "train_portal_vs_plain"]
    assert len(checks) == 5
    assert run.exit_status({}, checks) == 1
    assert run.exit_status({}, checks, enforce_targets=False) == 0
    met = [c for c in checks if c["met"]]
    assert run.exit_status({}, met) == 0
    assert run.exit_status({"train": "RuntimeError: no"}, met, enforce_targets=False) == 1


def test_a_failing_part_is_recorded_with_its_reason_and_the_next_still_runs(capsys):
    failed, ran = {}, []

    def broken():
        raise RuntimeError("curl answered 7")

    assert not run.run_part("train", broken, failed)
    assert run.run_part("firstcell", lambda: ran.append("firstcell"), failed)
    assert ran == ["firstcell"]
    assert list(failed) == ["train"]
    assert failed["train"].startswith("RuntimeError: curl answered 7 (at ")
    assert "test_bench_run.py" in failed["train"]
    assert "part train FAILED" in capsys.readouterr().err


def test_the_report_prints_every_figure_and_writes_them_as_json(tmp_path, capsys):
    out = tmp_path / "run.json"
    args = run.parse_args(["--only", "hub", "rpcs", "--json", str(out)])
    figures = {"hub_p95_ms": 120.5, "slurm_rpcs_per_min_100": 2.0}
    started = datetime(2026, 11, 28, 8, 30, tzinfo=UTC)
    status = run.report(args, figures, {"rpcs": "RuntimeError: 500"}, started)
    assert status == 1
    printed = capsys.readouterr()
    assert printed.out.splitlines() == ["hub_p95_ms: 120.5", "slurm_rpcs_per_min_100: 2.0"]
    assert "target hub_p95_ms <= 100: MISSED (120.5)" in printed.err
    assert "FAILED part rpcs: RuntimeError: 500" in printed.err
    written = json.loads(out.read_text())
    assert written["figures"] == figures
    assert written["failed_parts"] == {"rpcs": "RuntimeError: 500"}
    assert written["missed_targets"] == ["hub_p95_ms"]
    assert written["arguments"]["only"] == ["hub", "rpcs"]
    assert written["started"] == "2026-11-28T08:30:00+00:00"
    assert written["exit_status"] == 1
    assert written["commit"] is None or len(written["commit"].split("+")[0]) == 40


def test_a_days_second_run_gets_the_time_in_its_name(tmp_path):
    started = datetime(2026, 11, 28, 8, 5, tzinfo=UTC)
    first = run.json_path(started, tmp_path)
    assert first.name == "2026-11-28.json"
    first.write_text("{}")
    assert run.json_path(started, tmp_path).name == "2026-11-28-0805.json"
