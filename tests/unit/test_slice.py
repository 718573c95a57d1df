import pytest

from portal.core.slice import SliceError, make_slice

LIMITS = dict(partition="gpu", max_gpus=4, cores_per_gpu=8, mem_per_gpu_gb=48, max_hours=24)


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_slice_scales_with_gpus(gpus):
    s = make_slice(gpus, 8, **LIMITS)
    assert (s.gpus, s.cores, s.mem_gb, s.hours) == (gpus, 8 * gpus, 48 * gpus, 8)
    assert s.sbatch_args() == [
        "--nodes=1",
        "--ntasks=1",
        "--partition=gpu",
        f"--gres=gpu:{gpus}",
        f"--cpus-per-task={8 * gpus}",
        f"--mem={48 * gpus}G",
        "--time=8:00:00",
    ]


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
