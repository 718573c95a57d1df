"""JupyterHub configuration of the Data Scientist Portal, from a checkout:
the package's own (spawners/jupyterhub_config.py, which ``portal hub``
runs), then jupyterhub_config.d/*.py beside this file, in name order.
"""

from pathlib import Path

here = Path(__file__).resolve().parent
for config in [here / "spawners" / "jupyterhub_config.py",
               *sorted((here / "jupyterhub_config.d").glob("*.py"))]:  # fmt: skip
    exec(compile(config.read_text(), str(config), "exec"))
