"""The hub's side of a session: the spawner, its shared Slurm poll and the
port report (installed by ``spawners.hub_config``). What a session is lives in
``portal.core``, how Slurm is asked in ``portal.slurm``."""

from .spawner import PortalSpawner

__all__ = ["PortalSpawner"]
