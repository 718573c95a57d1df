"""Spawners of the Data Scientist Portal."""

from .spawner import PortalSpawner

__all__ = ["PortalSpawner"]
