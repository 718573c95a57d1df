"""``make load``'s report (bench/loadtest.py) from made results; the real run
against the portal is ``make load USERS=12`` (docs/operators/metrics.md: "Load test")."""

import time

from bench import loadtest


def test_the_report_gives_each_stages_p50_p95_the_queued_and_every_failure():
    full = {"login": 0.2, "spawn": 3.0, "cell": 1.0, "stop": 2.0}
    results = [(dict(full, spawn=3.0 + i), i >= 8, None) for i in range(11)]
    results.append(({"login": 0.3}, False, "drive012 at spawn: TimeoutError: no answer"))
    text, ok = loadtest.report(results, 12, 95.0)
    assert not ok
    lines = text.splitlines()
    assert lines[0] == "12 users, 95 s in all"
    assert lines[1].startswith("login   12 done") and "p95    0.30 s" in lines[1]
    assert lines[2] == "spawn   11 done   p50    8.00 s   p95   13.00 s"
    assert "completed 11 of 12, 3 of them queued in Slurm first" in text
    assert lines[-1] == "FAILED drive012 at spawn: TimeoutError: no answer"


def test_p95_of_a_few_values_is_one_of_them():
    assert loadtest.p95([5.0]) == 5.0
    assert loadtest.p95([1.0, 2.0, 3.0, 4.0]) == 4.0


def test_one_squeue_a_round_tells_who_of_the_run_was_pending():
    answers = iter(["drive001 Resources\nalice Priority\n", "drive003 Priority\ndrive001 None\n"
                    "drive004 None\n", ""])  # fmt: skip
    calls = []

    def squeue():
        calls.append(1)
        return next(answers, "")

    watcher = loadtest.PendingWatcher("drive", every=0.01, squeue=squeue)
    with watcher:
        while len(calls) < 4:
            time.sleep(0.01)
    assert watcher.seen == {"drive001", "drive003"}  # not alice; drive004 was only just submitted
    assert not watcher.thread.is_alive()
