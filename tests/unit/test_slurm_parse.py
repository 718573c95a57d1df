import doctest

import pytest

from portal.slurm import model, parse
from portal.slurm.commands import SlurmError, run
from portal.slurm.parse import expand_hostlist, parse_gpu_indices, parse_job_id


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


def test_the_parsers_examples_hold():
    assert doctest.testmod(parse).failed == 0
    assert doctest.testmod(model).failed == 0


@pytest.mark.parametrize(
    "text, names",
    [
        ("", ()),
        ("(null)", ()),
        ("vm", ("vm",)),
        ("n[1-2]", ("n1", "n2")),
        ("n1,n3", ("n1", "n3")),
        ("n[1,3-4]", ("n1", "n3", "n4")),
        ("gpu[01-03,07]", ("gpu01", "gpu02", "gpu03", "gpu07")),
        ("n[8-10]", ("n8", "n9", "n10")),
        ("n[098-100]", ("n098", "n099", "n100")),
        ("a[1-2],b7,c[3]", ("a1", "a2", "b7", "c3")),
        ("rack[1-2]-n[1,3]", ("rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3")),
        ("node-1.example", ("node-1.example",)),
    ],
)
def test_expand_hostlist(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("text", ["n[1-x]", "n[1-2", "n1]", "n[]", "n[-2]"])
def test_expand_hostlist_refuses_what_is_no_host_list(text):
    with pytest.raises(ValueError):
        expand_hostlist(text)


SCONTROL_DETAIL = """\
JobId=8572 JobName=portal-jupyter
   NodeList=n[1-3]
   BatchHost=n1
   NumNodes=3 NumCPUs=24 NumTasks=3 CPUs/Task=8 ReqB:S:C:T=0:0:*:*
   TRES=cpu=24,mem=144G,node=3,billing=24,gres/gpu=3
   JOB_GRES=gpu:3
     Nodes=n[1-2] CPU_IDs=0-7 Mem=49152 GRES=gpu:1(IDX:0)
     Nodes=n3 CPU_IDs=8-15 Mem=49152 GRES=gpu:1(IDX:1)
   TresPerNode=gres:gpu:1
"""


def test_parse_gpu_indices_per_node():
    nodes = ("n1", "n2", "n3")
    assert parse_gpu_indices(SCONTROL_DETAIL, nodes) == {"n1": "0", "n2": "0", "n3": "1"}
    line = "     Nodes=vm CPU_IDs=0-15 Mem=98304 GRES=gpu:2(IDX:0-1),shard:0"
    assert parse_gpu_indices(line, ("vm",)) == {"vm": "0-1"}
    assert parse_gpu_indices("     Nodes=n1 CPU_IDs=0-7 Mem=1024 GRES=", nodes) == {}
    assert parse_gpu_indices("", nodes) == {}


@pytest.mark.parametrize(
    "comment",
    [
        "   Comment= Nodes=x[0-999999999] GRES=gpu:1(IDX:0)",  # would stall the hub
        "   Comment=x Nodes=evil GRES=gpu:1(IDX:9)",
        "     Nodes=evil CPU_IDs=0-7 Mem=49152 GRES=gpu:1(IDX:9)",  # not a node of the job
        "     Nodes=n[1-2] CPU_IDs=0-7 Mem=49152 GRES=gpu:1(IDX:<b>)",
    ],
)
def test_what_a_user_writes_into_their_job_is_no_gpu_index(comment):
    """A job's owner may set its Comment to anything (scontrol update
    comment=...); scontrol prints it on a line of its own."""
    text = SCONTROL_DETAIL.replace("   TresPerNode", comment + "\n   TresPerNode")
    assert parse_gpu_indices(text, ("n1", "n2", "n3")) == {"n1": "0", "n2": "0", "n3": "1"}


def test_a_host_list_too_long_to_expand_is_refused_before_expanding():
    with pytest.raises(ValueError, match="more than 4096 hosts"):
        expand_hostlist("x[0-999999999]")
    with pytest.raises(ValueError, match="more than 4096 hosts"):
        expand_hostlist("a[0-99999]b[0-99999]")
    assert len(expand_hostlist("n[1-4096]")) == 4096
