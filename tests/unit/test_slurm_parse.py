import pytest

from portal.slurm.commands import SlurmError, run
from portal.slurm.parse import parse_job_id


def test_parse_job_id():
    assert parse_job_id("42\n") == "42"
    assert parse_job_id("warning: something\n43;portal") == "43"


@pytest.mark.parametrize("out", ["", "Submitted batch job", "12a", "sbatch: error: x"])
def test_parse_job_id_refuses(out):
    with pytest.raises(SlurmError):
        parse_job_id(out)


async def test_run_returns_stdout_and_raises_on_failure():
    assert await run(["echo", "hi"]) == "hi"
    assert await run(["cat"], input="x y") == "x y"
    with pytest.raises(SlurmError, match="boom"):
        await run(["sh", "-c", "echo boom >&2; exit 3"])


async def test_run_times_out():
    with pytest.raises(SlurmError, match="no answer within 0.2 s"):
        await run(["sleep", "5"], timeout=0.2)
