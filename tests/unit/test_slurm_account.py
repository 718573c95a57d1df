"""The hub's start check of its Slurm account: what it logs for each answer
of slurmctld (the scontrol call replaced in this unit test only; the real
one: tests/integration/test_slurm_account.py)."""

import logging

import pytest

from portal.slurm import commands
from spawners import hub_config

SETTINGS = {"hub": {"user": "portal"}, "slurm": {"command_timeout": 5}}


@pytest.mark.parametrize(
    "answer, says",
    [
        ({"portal": 998}, ""),
        ({"portal": None}, "without a uid"),
        ({}, "has no user portal"),
        (commands.SlurmError("slurmctld down"), "did not say"),
    ],
)
async def test_the_start_check_logs_what_to_run(monkeypatch, caplog, answer, says):
    async def slurm_uids(name, timeout):
        assert name == "portal"
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(commands, "slurm_uids", slurm_uids)
    log = logging.getLogger("test-hub")
    with caplog.at_level(logging.ERROR, logger="test-hub"):
        problem = await hub_config.slurm_account_problem(SETTINGS, log)
    if not says:
        assert problem == "" and not caplog.records
        return
    assert says in problem and [r.getMessage() for r in caplog.records] == [problem]
    fix = {"without a uid": "scontrol reconfigure", "has no user": "sync-users"}
    assert all(cmd in problem for key, cmd in fix.items() if key in says)
