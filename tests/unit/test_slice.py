import dataclasses

import pytest

from portal.core.slice import Slice, SliceError, make_slice
from portal.slurm.commands import resource_options

LIMITS = dict(partition="gpu", max_gpus=4, cores_per_gpu=8, mem_per_gpu_gb=48, max_hours=24)


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_slice_scales_with_gpus(gpus):
    s = make_slice(gpus, 8, **LIMITS)
    assert (s.gpus, s.cores, s.mem_gb, s.hours) == (gpus, 8 * gpus, 48 * gpus, 8)
    assert resource_options(s) == [
        "--nodes=1",
        f"--ntasks-per-node={gpus}",
        "--partition=gpu",
        f"--gres=gpu:{gpus}",
        "--cpus-per-task=8",
        f"--mem={48 * gpus}G",
        "--time=8:00:00",
        "--no-requeue",
    ]


def test_a_multi_node_slice_is_per_node_on_sbatch_and_in_total_when_described():
    s = make_slice(1, 8, nodes=2, max_nodes=2, **LIMITS)
    assert (s.nodes, s.gpus, s.cores, s.mem_gb) == (2, 1, 8, 48)
    assert (s.total_gpus, s.total_cores, s.total_mem_gb) == (2, 16, 96)
    assert resource_options(s)[:6] == [
        "--nodes=2",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--gres=gpu:1",
        "--cpus-per-task=8",
        "--mem=48G",
    ]
    assert s.describe() == "2 nodes × 1 GPU = 2 GPUs, 16 cores, 96 GB, 8 h on partition gpu"
    wide = make_slice("4", 8, nodes="2", max_nodes=2, **LIMITS)
    assert wide.describe().startswith("2 nodes × 4 GPUs = 8 GPUs, 64 cores, 384 GB")


@pytest.mark.parametrize(
    "nodes, max_nodes, message",
    [
        (3, 2, "Nodes must be between 1 and 2, not 3"),
        (2, 1, "Nodes must be 1, not 2"),
        (0, 2, "Nodes must be between 1 and 2, not 0"),
        ("2;id", 2, "Nodes must be a whole number, not '2;id'"),
        ("٢", 2, "Nodes must be a whole number"),
        (True, 2, "Nodes must be a whole number"),
        (None, 2, "Nodes must be a whole number"),
    ],
)
def test_bad_node_counts_name_the_field(nodes, max_nodes, message):
    with pytest.raises(SliceError, match=message) as e:
        make_slice(1, 8, nodes=nodes, max_nodes=max_nodes, **LIMITS)
    assert e.value.field == "nodes"


def test_a_slice_saved_before_nodes_existed_loads_as_one_node():
    saved = {"gpus": 2, "cores": 16, "mem_gb": 96, "hours": 8, "partition": "gpu"}
    s = Slice(**saved)
    assert s.nodes == 1 and s == make_slice(2, 8, **LIMITS)
    assert Slice(**dataclasses.asdict(s)) == s


def test_form_strings_are_numbers():
    assert make_slice("2", " 3 ", **LIMITS).cores == 16


@pytest.mark.parametrize(
    "gpus, hours, field",
    [
        (0, 8, "gpus"),
        (5, 8, "gpus"),
        (-1, 8, "gpus"),
        ("2;id", 8, "gpus"),
        ("$(id)", 8, "gpus"),
        ("1e3", 8, "gpus"),
        (True, 8, "gpus"),
        (1.5, 8, "gpus"),
        (None, 8, "gpus"),
        (1, 25, "hours"),
        (1, 0, "hours"),
        (1, "8; rm -rf ~", "hours"),
    ],
)
def test_bad_requests_name_the_field(gpus, hours, field):
    with pytest.raises(SliceError) as e:
        make_slice(gpus, hours, **LIMITS)
    assert e.value.field == field
    assert str(e.value)


@pytest.mark.parametrize("partition", ["", "gpu;id", "a b", "-p", "x" * 65, None])
def test_bad_partition(partition):
    with pytest.raises(SliceError):
        make_slice(1, 1, **{**LIMITS, "partition": partition})


def test_describe():
    assert make_slice(2, 4, **LIMITS).describe() == "2 GPUs, 16 cores, 96 GB, 4 h on partition gpu"
