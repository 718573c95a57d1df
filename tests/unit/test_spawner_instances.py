"""Each PortalSpawner keeps its session's values (GPU indices, the spawn
timeline, options, a spawn link's values) to itself, and its settings,
though defined on ``PortalSpawnerSettings``, are configured as
``c.PortalSpawner``."""

import asyncio
from types import SimpleNamespace

from batchspawner import SlurmSpawner
from traitlets.config import Config

from spawners.spawner import PortalSpawner
from spawners.spawner_settings import PortalSpawnerSettings

PER_SESSION = ["gpu_indices", "timeline", "last_options", "last_end", "_link_options"]


def two_spawners(config=None):
    return [
        PortalSpawner(config=config or Config(), user=SimpleNamespace(name=name))
        for name in ("alice", "bob")
    ]


def test_two_spawners_share_no_session_values():
    alice, bob = two_spawners()
    alice.gpu_indices["n1"] = "0-1"
    alice.timeline["submitted"] = 0.5
    assert bob.gpu_indices == {} and bob.timeline == {}
    assert alice.gpu_indices is not bob.gpu_indices and alice.timeline is not bob.timeline
    for name in PER_SESSION:
        assert name in vars(alice), f"{name} is not the spawner's own"


def test_no_spawner_class_holds_a_mutable_default():
    # what traitlets' metaclass keeps on every class it makes
    bookkeeping = set(vars(type("Bare", (SlurmSpawner,), {})))
    for cls in (PortalSpawner, PortalSpawnerSettings):
        shared = [
            name
            for name, value in vars(cls).items()
            if isinstance(value, dict | list | set | asyncio.Lock) and name not in bookkeeping
        ]
        assert shared == [], f"{cls.__name__}: {shared}"


def test_the_settings_are_configured_as_portal_spawner():
    c = Config()
    c.PortalSpawner.groups_ttl = 5.0
    c.PortalSpawner.uid_min = 2000
    c.PortalSpawner.allowed_unix_groups = ["portal-users"]
    alice, bob = two_spawners(c)
    assert (alice.groups_ttl, alice.uid_min, alice.allowed_unix_groups) == (
        5.0,
        2000,
        ["portal-users"],
    )
    assert set(PortalSpawnerSettings.class_own_traits(config=True)) <= set(
        PortalSpawner.class_trait_names(config=True)
    )
