"""Measurements shared by the tests and the benchmarks (bench/), and how a test prints them."""

import re
import subprocess

# slurmctld's RPCs that read jobs: what squeue (and batchspawner's polls) cost it.
JOB_INFO_RPCS = ("REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE", "REQUEST_JOB_USER_INFO")


def job_info_rpcs():
    """slurmctld's count of job-info RPCs so far (``sdiag``)."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    total = 0
    for name in JOB_INFO_RPCS:
        match = re.search(rf"^\s*{name}\s+\(\s*\d+\)\s+count:(\d+)", out, re.M)
        total += int(match.group(1)) if match else 0
    return total


RPC_LINE = re.compile(r"^\s*([A-Z][A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)", re.M)


def rpc_counts():
    """Every RPC type's count so far, slurmctld's (``sdiag``) and slurmdbd's
    (``sacctmgr show stats``), by message type: ``{"slurmctld REQUEST_JOB_INFO":
    N, "slurmdbd DBD_GET_ASSOCS": M, ...}`` (root only, for slurmdbd's)."""
    counts = {}
    for daemon, argv in (("slurmctld", ["sdiag"]), ("slurmdbd", ["sacctmgr", "show", "stats"])):
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        # the first table is by message type; the one by user follows
        by_type = out.split("Remote Procedure Call statistics by message type", 1)[-1]
        by_type = by_type.split("Remote Procedure Call statistics by user", 1)[0]
        for name, count in RPC_LINE.findall(by_type):
            counts[f"{daemon} {name}"] = int(count)
    return counts


def rpc_rates(before, after, seconds):
    """Per minute, each RPC type's count between two ``rpc_counts`` (types
    that did not change left out).

    >>> rpc_rates({"slurmctld A": 1}, {"slurmctld A": 3, "slurmdbd B": 1}, 60)
    {'slurmctld A': 2.0, 'slurmdbd B': 1.0}
    """
    return {
        key: (count - before.get(key, 0)) * 60 / seconds
        for key, count in sorted(after.items())
        if count != before.get(key, 0)
    }


def curl_seconds(*args, prefix=()):
    """curl's total time for one request (``args`` end with the URL); it must answer 200.
    ``prefix``: a command that runs curl (``nsenter ... --``)."""
    out = subprocess.run(
        [*prefix, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if out[0] != "200":
        raise AssertionError(f"curl {args[-1]} answered {out[0]}")
    return float(out[1])


def figure(capsys, text):
    """Print one of the reliability suite's figures, past pytest's capture."""
    with capsys.disabled():
        print(f"\nRELIABILITY {text}")
