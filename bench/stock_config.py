"""JupyterHub configuration of the stock-batchspawner hub of the benchmark.

The same hub, proxy and LDAP login as the portal (``spawners.hub_config``), but
the spawner is batchspawner 1.3.0's own ``SlurmSpawner`` with its own batch
script, status query and polling, configured for the same cluster and the same
single-user environment, and the slice of one GPU of ``[slurm]`` (8 cores, 48 GB).
"""

from portal import settings
from spawners import hub_config

site = settings.load()
slurm, envs = site["slurm"], site["envs"]
c = get_config()  # noqa: F821 (provided by JupyterHub)

hub_config.configure_hub(c, site)
hub_config.configure_proxy(c, site)
hub_config.configure_auth(c, site)

c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"
# the job name on sbatch's command line wins over the template's #SBATCH line
c.SlurmSpawner.batch_submit_cmd = f"sbatch --parsable --job-name={slurm['job_name']}"
c.SlurmSpawner.req_partition = slurm["partition"]
c.SlurmSpawner.req_nprocs = str(slurm["cores_per_gpu"])
c.SlurmSpawner.req_memory = f"{slurm['mem_per_gpu_gb']}G"
c.SlurmSpawner.req_gres = "gpu:1"
c.SlurmSpawner.req_runtime = f"{slurm['default_hours']}:00:00"
c.SlurmSpawner.req_prologue = f"source {envs['jupyter']}/bin/activate"
c.SlurmSpawner.batchspawner_singleuser_cmd = f"{envs['jupyter']}/bin/batchspawner-singleuser"
c.Spawner.cmd = [f"{envs['jupyter']}/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 900
c.Spawner.http_timeout = 120
