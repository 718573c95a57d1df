"""The pure layers load no hub: what a session is (portal.core) and how Slurm
is asked (portal.slurm) import without jupyterhub, batchspawner or tornado,
and the one whole-number parser takes ASCII digits only."""

import subprocess
import sys

import pytest

from portal.core.numbers import whole_number
from portal.core.profiles import ProfileError, profile_from_dict
from portal.core.slice import SliceError, make_slice


def python(*lines):
    """What a fresh interpreter prints running ``lines``."""
    run = subprocess.run([sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_the_pure_layers_import_without_the_hub():
    assert (
        python(
            "import sys",
            "import portal.core.numbers, portal.core.slice, portal.core.profiles",
            "import portal.core.script, portal.slurm.commands, portal.slurm.parse",
            "import portal.slurm.model",
            "hub = ('jupyterhub', 'batchspawner', 'tornado')",
            "print(sorted(m for m in hub if m in sys.modules))",
        )
        == "[]"
    )


@pytest.mark.parametrize("text", ["٣", "²", "１", "3٣", "-1", "1.0", "", " ", "1e3", "0x1"])
def test_only_ascii_digits_are_whole_numbers(text):
    assert whole_number(text) is None


def test_whole_numbers():
    assert [whole_number(v) for v in ("7", " 12 ", 3, True, None, "1234567890")] == [
        7, 12, 3, None, None, None,
    ]  # fmt: skip


@pytest.mark.parametrize("field", ["gpus", "hours"])
def test_a_non_ascii_digit_in_a_spawn_field_is_refused_with_a_message(field):
    values = {"gpus": "1", "hours": "2", field: "٣"}
    with pytest.raises(SliceError, match="must be a whole number, not '٣'") as e:
        make_slice(
            values["gpus"], values["hours"], partition="gpu", max_gpus=4,
            cores_per_gpu=8, mem_per_gpu_gb=48, max_hours=24,
        )  # fmt: skip
    assert e.value.field == field


def test_a_profile_number_must_be_a_number():
    base = {"name": "p", "display_name": "P", "environment": "pytorch", "partition": "gpu"}
    with pytest.raises(ProfileError, match="max_gpus must be a whole number"):
        profile_from_dict({**base, "max_gpus": "٣"})
