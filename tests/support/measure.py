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
