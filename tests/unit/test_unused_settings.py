import pytest
from batchspawner import SlurmSpawner
from traitlets.config import Config

from spawners.hub_config import check_spawner_settings
from spawners.spawner import PortalSpawner
from spawners.spawner_settings import PortalSpawnerSettings
from spawners.unused_settings import unused_settings


def config(**settings):
    """A Config from ``Section__name=value`` pairs."""
    c = Config()
    for key, value in settings.items():
        section, name = key.split("__")
        c[section][name] = value
    return c


@pytest.mark.parametrize(
    "key, value, portal_setting",
    [
        ("SlurmSpawner__req_memory", "48G", "mem_per_gpu_gb"),
        ("PortalSpawner__req_memory", "48G", "mem_per_gpu_gb"),
        ("SlurmSpawner__req_nprocs", "8", "cores_per_gpu"),
        ("SlurmSpawner__req_partition", "gpu", "[slurm] partition"),
        ("SlurmSpawner__req_runtime", "8:00:00", "default_hours"),
        ("SlurmSpawner__req_gres", "gpu:1", "max_gpus"),
        ("PortalSpawner__exec_prefix", "sudo -u {username}", "sudoers rule"),
        ("SlurmSpawner__batch_script", "#!/bin/sh", "batch.sh.j2"),
        ("BatchSpawnerBase__batch_submit_cmd", "sbatch", "[slurm] job_name"),
        ("SlurmSpawner__state_pending_re", "PD", "poll_interval"),
        ("Spawner__req_qos", "high", "QOS portal"),
    ],
)
def test_batchspawner_settings_the_portal_does_not_use_are_refused(key, value, portal_setting):
    with pytest.raises(ValueError) as refused:
        PortalSpawner(config=config(**{key: value}))
    message = str(refused.value)
    assert f"c.{key.replace('__', '.')}" in message
    assert portal_setting in message


def test_every_refused_setting_is_named_at_once():
    c = config(SlurmSpawner__req_memory="48G", PortalSpawner__exec_prefix="sudo")
    with pytest.raises(ValueError, match=r"req_memory .*exec_prefix"):
        PortalSpawner(config=c)


def test_the_list_comes_from_batchspawner_less_what_the_portal_uses():
    unused = unused_settings(PortalSpawner)
    assert {"req_memory", "req_srun", "batch_query_cmd", "state_running_re"} <= unused
    # batchspawner's own setting the portal honours, and JupyterHub's settings
    assert not unused & {"batchspawner_singleuser_cmd", "start_timeout", "ip", "cmd"}
    assert not unused & set(PortalSpawnerSettings.class_own_traits())


def test_the_portal_own_and_jupyterhub_settings_are_accepted():
    c = config(
        PortalSpawner__default_profile={"mem_per_gpu_gb": 16},
        PortalSpawner__batchspawner_singleuser_cmd="/opt/env/bin/batchspawner-singleuser",
        Spawner__start_timeout=600,
        Spawner__default_url="/lab",
    )
    assert PortalSpawner(config=c).default_profile == {"mem_per_gpu_gb": 16}


def test_the_hub_start_check_refuses_for_the_portal_spawner():
    c = config(JupyterHub__spawner_class="spawners.PortalSpawner", SlurmSpawner__req_memory="4G")
    with pytest.raises(ValueError, match=r"c\.SlurmSpawner\.req_memory .*mem_per_gpu_gb"):
        check_spawner_settings(c)


@pytest.mark.parametrize("spawner_class", ["batchspawner.SlurmSpawner", SlurmSpawner, "simple"])
def test_stock_batchspawner_keeps_its_settings(spawner_class):
    # bench/stock_config.py: batchspawner's own SlurmSpawner, configured its own way
    c = config(
        JupyterHub__spawner_class=spawner_class,
        SlurmSpawner__req_memory="48G",
        SlurmSpawner__batch_submit_cmd="sbatch --parsable --job-name=stock",
    )
    check_spawner_settings(c)
    assert SlurmSpawner(config=c).req_memory == "48G"
