"""batchspawner's settings that PortalSpawner inherits and does not use.

PortalSpawner replaces batchspawner's start, stop, poll, progress, submission
and cancellation, so most of SlurmSpawner's settings (``req_memory``,
``batch_script``, ``exec_prefix``, the ``state_*`` patterns...) would do
nothing. An admin following batchspawner's documentation must not be ignored
in silence: a configuration that sets one is refused, with the portal's own
setting to use instead. The list is derived from batchspawner's classes, so a
setting a new batchspawner adds is refused too until the portal honours it.
"""

from jupyterhub.spawner import Spawner

# batchspawner's settings that PortalSpawner does use
HONOURED = {"batchspawner_singleuser_cmd"}

SLICE = "[slurm] {0} or a profile's {0}"
INSTEAD = {
    "req_memory": SLICE.format("mem_per_gpu_gb"),
    "req_nprocs": SLICE.format("cores_per_gpu"),
    "req_ngpus": "a profile's max_gpus (each user picks the GPU count)",
    "req_gres": "a profile's max_gpus (each user picks the GPU count)",
    "req_runtime": "[slurm] default_hours and max_hours, or a profile's",
    "req_partition": SLICE.format("partition"),
    "req_queue": SLICE.format("partition"),
    "req_account": "[cluster] qos_* (the account and QOS portal of deploy/slurm.sh)",
    "req_qos": "[cluster] qos_* (the account and QOS portal of deploy/slurm.sh)",
    "req_prologue": "[envs] jupyter (the environment the job activates)",
    "req_keepvars_extra": "c.Spawner.environment",
    "batch_script": "the portal's batch script template (portal/core/templates/batch.sh.j2)",
    "exec_prefix": "the sudoers rule written by deploy/hub.sh",
    "startup_poll_interval": "[slurm] poll_interval_active",
}
BY_PREFIX = {
    "req_": "a profile's fields (the job's sbatch options come from them only)",
    "batch_": "[slurm] job_name and command_timeout (the portal runs sbatch, squeue and scancel)",
    "state_": "[slurm] poll_interval (the portal's shared squeue)",
}
DEFAULT = "the [slurm] settings or a profile (deploy/portal.toml)"


def unused_settings(spawner_class):
    """The configurable traits ``spawner_class`` has from batchspawner's
    classes (not JupyterHub's Spawner), less those it honours or redefines."""
    unused = set()
    for name in spawner_class.class_trait_names(config=True):
        owner = next(cls for cls in spawner_class.__mro__ if name in vars(cls))
        if (
            owner.__module__.partition(".")[0] == "batchspawner"
            and name not in Spawner.class_trait_names()
            and name not in HONOURED
        ):
            unused.add(name)
    return unused


def instead(name):
    """The portal's setting that does what batchspawner's ``name`` would."""
    if name in INSTEAD:
        return INSTEAD[name]
    return next((v for prefix, v in BY_PREFIX.items() if name.startswith(prefix)), DEFAULT)


def refuse_unused_settings(spawner_class, config):
    """Raise ValueError naming every setting of ``config`` that configures
    ``spawner_class`` (its own section or a parent class's, such as
    ``c.SlurmSpawner``) and that it does not use, each with the setting to
    use instead."""
    unused = unused_settings(spawner_class)
    refused = [
        f"c.{section}.{name} (use {instead(name)} instead)"
        for section in spawner_class.section_names()
        if section in config  # (c.Name would create the section)
        for name in sorted(set(config[section]) & unused)
    ]
    if refused:
        raise ValueError(
            f"{spawner_class.__name__} does not use batchspawner's "
            + ", ".join(refused)
            + f"; remove {'it' if len(refused) == 1 else 'them'} from the hub's configuration"
        )
