"""Spawners of the Data Scientist Portal."""

from . import callback  # noqa: F401 (replaces batchspawner's port callback)
from .spawner import PortalSpawner

__all__ = ["PortalSpawner"]
