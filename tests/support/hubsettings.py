"""Settings of a hub of its own (the tests', the benchmarks'), beside the demo's.

A hub on PORT gets its API on PORT+81, its proxy's API on PORT+1, its admin
service on PORT+2, its own state folder (database, profile store, cluster
snapshot, logs) and its own Slurm job name.
"""

from pathlib import Path

from portal import settings as site_settings

# The CA every client of the tests checks the portal's certificate against
# (never a disabled check): [tls] ca_cert of the site settings.
CA_CERT = site_settings.load()["tls"]["ca_cert"]
# The hub's host name ([hub] domain): each user's sessions on NAME.DOMAIN.
DOMAIN = site_settings.load()["hub"]["domain"]

# What a fresh start removes from the state folder (the logs are kept).
FRESH_START = (
    "jupyterhub.sqlite",
    "jupyterhub_cookie_secret",
    "portal.sqlite",
    "portal.sqlite-wal",
    "portal.sqlite-shm",
    "cluster.json",
    "cluster-catalog.json",  # the poll's SiteCatalog, beside it
)

# The profile every hub of its own offers (the tests', the benchmarks'), as TOML.
PYTORCH_PROFILE = """
[[profiles]]
name = "pytorch"
display_name = "PyTorch"
environment = "pytorch"
max_gpus = 4
"""

# The profile of sessions over several nodes (deploy/portal.toml has the same).
DISTRIBUTED_PROFILE = """
[[profiles]]
name = "distributed"
display_name = "PyTorch distributed"
environment = "pytorch"
max_gpus = 4
max_nodes = 2
"""

# The profile of the site's choices (issue 38; deploy/portal.toml has the
# same): a GPU model per partition, a CPU partition, accounts, QOS, a
# reservation and node features to choose from.
SITE_PROFILE = """
[[profiles]]
name = "pytorch-site"
display_name = "PyTorch: your GPU model, account and reservation"
environment = "pytorch"
partitions = ["sxm2", "pcie", "cpu"]
choose = ["account", "qos", "reservation", "feature"]
max_gpus = 4
max_cores = 16
max_mem_gb = 64
"""

# The container profiles (deploy/portal.toml has the same): the images that
# `make up` and `make test` build (deploy/images.py ensure).
IMAGE_PROFILES = """
[[profiles]]
name = "pytorch-image"
display_name = "PyTorch container"
environment = "pytorch"
image = "pytorch"
user_images = true
max_gpus = 4

[[profiles]]
name = "tensorflow-image"
display_name = "TensorFlow container"
environment = "tensorflow"
image = "tensorflow"
max_gpus = 4
"""


def public_url(port, domain=DOMAIN):
    """Where clients reach a hub of its own on ``port`` (its proxy, on loopback)."""
    return f"https://{domain or '127.0.0.1'}:{port}"


def hub_settings(port, state, job_name, domain=None, bind_url=None, public_url=""):
    """The [hub], [portal] and [slurm] job_name settings of such a hub, as
    TOML; ``domain`` replaces the site's [hub] domain when given;
    ``bind_url`` (default https://127.0.0.1:PORT) and ``public_url`` (a web
    server in front) are [hub]'s."""
    return f"""
[hub]
bind_url = "{bind_url or f"https://127.0.0.1:{port}"}"
public_url = "{public_url}"
{f'domain = "{domain}"' if domain is not None else ""}
api_port = {port + 81}
proxy_api_port = {port + 1}
db_url = "sqlite:///{state}/jupyterhub.sqlite"
state_dir = "{state}"

[portal]
service_port = {port + 2}

[slurm]
job_name = "{job_name}"
"""


def write_settings(path, text):
    """Write a hub's settings file where the hub's account can read it."""
    path = Path(path)
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)
    return path


def fresh_state(state):
    """Remove what FRESH_START names from the state folder ``state``."""
    for name in FRESH_START:
        (Path(state) / name).unlink(missing_ok=True)
