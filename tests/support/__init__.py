"""Helpers shared by the test suites and the benchmarks (bench/): plain
functions and constants, no fixtures (those stay in the conftest.py files).

- ``testhub``: the tests' own hub (port, state, job name, settings) and ``deploy``
- ``jobs``: the test hub's Slurm jobs as squeue and scontrol show them
- ``hubsettings``: the settings of a hub of its own (the tests', the benchmarks')
- ``hubclient``: HTTP clients of the hub and its admin service, as a browser uses them
- ``loadusers``: extra LDAP accounts for load tests and benchmarks
- ``kernelcells``: code cells run in a new kernel, as in a notebook
- ``measure``: slurmctld's RPC count, curl's timings, the reliability figures
- ``pages``: what the browser tests look for on a page
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
