"""JupyterHub configuration of the Data Scientist Portal, shipped in the
package: ``portal hub`` runs ``jupyterhub -f`` this file (the checkout's
jupyterhub_config.py loads it too).

Site settings come from the package's defaults merged with
/etc/portal/portal.toml (or $PORTAL_CONFIG); see portal/settings.py. Python
overrides for a site go in jupyterhub_config.d/*.py beside the site's
settings file (/etc/portal/jupyterhub_config.d/), loaded last in name order.
"""

import os
from pathlib import Path

from portal import settings
from spawners import hub_config

site = settings.load()
c = get_config()  # noqa: F821 (provided by JupyterHub)

hub_config.configure_hub(c, site)
hub_config.check_database(site)
hub_config.configure_internal_ssl(c, site)
hub_config.configure_proxy(c, site)
hub_config.configure_auth(c, site)
hub_config.configure_spawner(c, site)
hub_config.configure_service(c, site)
hub_config.configure_admins(c, site)
hub_config.configure_culling(c, site)
hub_config.start_shared_poll(c)
hub_config.check_extensions(site)
hub_config.check_slurm_account(site)
hub_config.check_private_data(site)

site_file = Path(os.environ.get("PORTAL_CONFIG") or settings.SITE_FILE)
for extra in sorted((site_file.parent / "jupyterhub_config.d").glob("*.py")):
    exec(compile(extra.read_text(), str(extra), "exec"))

hub_config.check_spawner_settings(c)
