"""The site's Slurm in a slice (issue 38): a GPU model, an account, a QOS, a
reservation, a node feature, a session without GPUs; what a profile lets a
user choose; and sbatch's command line for each."""

import pytest

from portal.core.profiles import ProfileError, profile_from_dict
from portal.core.slice import SliceError
from portal.slurm.commands import sbatch_argv

SITE = {
    "name": "site", "display_name": "Site", "environment": "pytorch", "partition": "gpu",
    "partitions": ["sxm2", "pcie", "cpu"], "choose": ["account", "qos", "reservation", "feature"],
    "max_cores": 16, "max_mem_gb": 64,
}  # fmt: skip


def test_a_model_account_qos_reservation_and_feature_reach_sbatch():
    profile = profile_from_dict(SITE)
    job_slice = profile.make_slice(
        2, 3, None, "sxm2", gpu_type="v100-sxm2", account="lab-vision", qos="vision",
        reservation="vision-course", feature="nvlink",
    )  # fmt: skip
    argv = sbatch_argv(job_slice, job_name="portal-jupyter", chdir="/home/alice")
    assert argv[5:] == [
        "--nodes=1", "--ntasks-per-node=2", "--partition=sxm2", "--gres=gpu:v100-sxm2:2",
        "--cpus-per-task=8", "--mem=96G", "--time=3:00:00", "--account=lab-vision", "--qos=vision",
        "--reservation=vision-course", "--constraint=nvlink", "--no-requeue",
    ]  # fmt: skip
    assert job_slice.describe() == (
        "2 GPUs (v100-sxm2), 16 cores, 96 GB, 3 h on partition sxm2, account lab-vision, "
        "QOS vision, reservation vision-course, node feature nvlink"
    )


def test_a_session_without_gpus_has_no_gres_and_one_task_of_its_cores():
    profile = profile_from_dict(SITE)
    job_slice = profile.make_slice("0", 2, None, "cpu", cores="6", mem_gb="20")
    assert job_slice.cpu_only and (job_slice.cores, job_slice.mem_gb) == (6, 20)
    argv = sbatch_argv(job_slice, test_only=True)
    assert not [a for a in argv if a.startswith("--gres")]
    assert "--ntasks-per-node=1" in argv and "--cpus-per-task=6" in argv and "--mem=20G" in argv


@pytest.mark.parametrize(
    "gpus, kwargs, field",
    [
        (0, {"cores": 17}, "cores"),  # past max_cores
        (0, {"mem_gb": 65}, "mem_gb"),
        (0, {"gpu_type": "v100-sxm2"}, "gpu_type"),  # a model needs GPUs
        (1, {"cores": 4}, "cores"),  # a GPU's cores come with it
        (1, {"account": "lab vision"}, "account"),  # not a name sbatch takes
        (1, {"qos": "--wrap=id"}, "qos"),
        (1, {"reservation": "r;id"}, "reservation"),
    ],
)
def test_a_refused_choice_names_its_field(gpus, kwargs, field):
    profile = profile_from_dict(SITE)
    with pytest.raises(SliceError) as e:
        profile.make_slice(gpus, 2, None, "cpu" if gpus == 0 else "gpu", **kwargs)
    assert e.value.field == field, e.value


def test_a_profile_offers_only_its_own_partitions_and_choices():
    plain = profile_from_dict({**SITE, "partitions": [], "choose": [], "max_cores": 0,
                               "max_mem_gb": 0})  # fmt: skip
    for kwargs, field in [
        ({"partition": "pcie"}, "partition"),
        ({"account": "lab-nlp"}, "account"),
        ({"qos": "nlp"}, "qos"),
        ({"reservation": "vision-course"}, "reservation"),
        ({"feature": "nvlink"}, "feature"),
    ]:
        with pytest.raises(SliceError) as e:
            plain.make_slice(1, 2, **kwargs)
        assert e.value.field == field
    with pytest.raises(SliceError) as e:
        plain.make_slice(0, 2)  # no sessions without GPUs
    assert e.value.field == "gpus"
    typed = profile_from_dict({**SITE, "gpu_types": ["v100-pcie"]})
    with pytest.raises(SliceError) as e:
        typed.make_slice(1, 2, None, "sxm2", gpu_type="v100-sxm2")
    assert e.value.field == "gpu_type"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"partitions": ["gpu x"]}, "partitions"),
        ({"choose": ["partition"]}, "choose"),
        ({"gpu_types": "v100"}, "gpu_types"),
        ({"features": ["<b>"]}, "features"),
        ({"max_cores": 8, "max_mem_gb": 0}, "max_mem_gb"),
        ({"max_cores": -1}, "max_cores"),
    ],
)
def test_a_profile_s_site_fields_are_validated(change, field):
    with pytest.raises(ProfileError) as e:
        profile_from_dict({**SITE, **change})
    assert e.value.field == field


def test_the_site_fields_round_trip_and_old_profiles_have_none():
    profile = profile_from_dict(SITE)
    assert profile_from_dict(profile.to_dict()) == profile
    old = profile_from_dict({k: v for k, v in SITE.items() if k in
                             ("name", "display_name", "environment", "partition")})  # fmt: skip
    assert (old.partitions, old.choose, old.max_cores, old.all_partitions) == ((), (), 0, ("gpu",))
