"""The cluster as the hub's shared Slurm poll last saw it, for the admin service.

The hub's poll (``spawners.poller``) writes its snapshot to a JSON file after
each query; the service reads it, so validating a profile or showing the
cluster page costs Slurm nothing. When the snapshot is missing or older than
``max_age`` (the hub is down), the service asks ``sinfo`` itself, once per
``max_age`` at most, with the same parser.

``check_profile`` is where a profile is checked against the cluster; pure,
tested without Slurm.
"""

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from portal.core.profiles import ProfileError
from portal.core.slice import count
from portal.slurm import commands as slurm
from portal.slurm.model import SiteCatalog, catalog_path, snapshot_from_json
from portal.slurm.parse import max_time_minutes

log = logging.getLogger("portal.service.cluster")
DIRECT = "Slurm (asked directly)"


@dataclass
class ClusterView:
    partitions: dict = field(default_factory=dict)  # name -> portal.slurm.model.Partition
    jobs: dict = field(default_factory=dict)  # id -> portal.slurm.model.Job
    at: datetime | None = None
    source: str = ""  # "the hub's poll" or "Slurm (asked directly)"
    error: str = ""


def check_profile(profile, partitions):
    """ProfileError (naming the field) unless ``profile`` fits the cluster.

    ``partitions``: {name: portal.slurm.model.Partition}. The partition must
    exist; one of its nodes must hold ``max_gpus`` GPUs with the cores and the
    memory that many GPUs bring, and ``max_nodes`` of them such a slice each;
    ``max_hours`` must be within MaxTime.
    """
    if not partitions:
        raise ProfileError(
            "The cluster's partitions are not known (Slurm did not answer); try again", "partition"
        )
    partition = partitions.get(profile.partition)
    if partition is None:
        known = ", ".join(sorted(partitions))
        raise ProfileError(
            f"Partition {profile.partition!r} does not exist (partitions: {known})", "partition"
        )
    nodes = list(partition.nodes)
    most_gpus = max((n.gpus for n in nodes), default=0)
    if profile.max_gpus > most_gpus:
        raise ProfileError(
            f"max_gpus {profile.max_gpus} is more than the largest node of partition "
            f"{partition.name!r} has ({most_gpus} GPUs)",
            "max_gpus",
        )
    big = [n for n in nodes if n.gpus >= profile.max_gpus]
    cores = profile.cores_per_gpu * profile.max_gpus
    most_cores = max(n.cpus for n in big)
    if cores > most_cores:
        raise ProfileError(
            f"cores_per_gpu {profile.cores_per_gpu} × {profile.max_gpus} GPUs = {cores} cores: "
            f"no node of {partition.name!r} with {profile.max_gpus} GPUs has more than "
            f"{most_cores}",
            "cores_per_gpu",
        )
    mem_gb = profile.mem_per_gpu_gb * profile.max_gpus
    most_mem = max(n.mem_mb for n in big if n.cpus >= cores) // 1024
    if mem_gb > most_mem:
        raise ProfileError(
            f"mem_per_gpu_gb {profile.mem_per_gpu_gb} × {profile.max_gpus} GPUs = {mem_gb} GB: "
            f"no node of {partition.name!r} with {profile.max_gpus} GPUs has more than "
            f"{most_mem} GB",
            "mem_per_gpu_gb",
        )
    fit = [n for n in big if n.cpus >= cores and n.mem_mb // 1024 >= mem_gb]
    if profile.max_nodes > len(fit):
        raise ProfileError(
            f"max_nodes {profile.max_nodes} is more than the {count(len(fit), 'node')} of "
            f"partition {partition.name!r} that hold {profile.max_gpus} GPUs, {cores} cores "
            f"and {mem_gb} GB",
            "max_nodes",
        )
    limit = max_time_minutes(partition.max_time)
    if limit is not None and profile.max_hours * 60 > limit:
        raise ProfileError(
            f"max_hours {profile.max_hours} is beyond the MaxTime of partition "
            f"{partition.name!r} ({partition.max_time}, {limit // 60} h)",
            "max_hours",
        )
    check_site_fields(profile, partitions)


def check_site_fields(profile, partitions):
    """ProfileError (naming the field) unless the profile's site choices
    (issue 38) fit the cluster: its more partitions exist (one without GPUs
    only where the profile has sessions without GPUs), its GPU models and
    node features are on their nodes, and a node holds the cores and memory
    of a session without GPUs."""
    nodes = {}
    for name in profile.partitions:
        partition = partitions.get(name)
        if partition is None:
            known = ", ".join(sorted(partitions))
            raise ProfileError(
                f"Partition {name!r} does not exist (partitions: {known})", "partitions"
            )
        if not partition.gpus and not profile.cpu_sessions:
            raise ProfileError(
                f"Partition {name!r} has no GPUs: set max_cores and max_mem_gb for sessions "
                "without GPUs there, or leave it out",
                "partitions",
            )
    for name in profile.all_partitions:
        for node in partitions[name].nodes:
            nodes[node.name] = node
    on_nodes = {
        "gpu_types": ("GPU model", {t for n in nodes.values() for t, _, _ in n.gpu_types if t}),
        "features": ("Node feature", {f for n in nodes.values() for f in n.features}),
    }
    for key, (label, known) in on_nodes.items():
        for name in getattr(profile, key):
            if name not in known:
                raise ProfileError(
                    f"{label} {name!r} is on no node of partition "
                    f"{' or '.join(profile.all_partitions)} "
                    f"(there: {', '.join(sorted(known)) or 'none'})",
                    key,
                )
    if profile.cpu_sessions:
        most_cores = max((n.cpus for n in nodes.values()), default=0)
        if profile.max_cores > most_cores:
            raise ProfileError(
                f"max_cores {profile.max_cores} is more than any node of its partitions has "
                f"({most_cores})",
                "max_cores",
            )
        most_mem = max((n.mem_mb for n in nodes.values()), default=0) // 1024
        if profile.max_mem_gb > most_mem:
            raise ProfileError(
                f"max_mem_gb {profile.max_mem_gb} is more than any node of its partitions has "
                f"({most_mem} GB)",
                "max_mem_gb",
            )


def resource_lines(profile):
    """The sbatch resource options of a 1-GPU and a max-GPU session, and of the
    largest over ``max_nodes`` (default hours): ``{"2 GPUs": "sbatch ..."}``."""
    sizes = [(1, gpus) for gpus in sorted({1, profile.max_gpus})]
    if profile.max_nodes > 1:
        sizes.append((profile.max_nodes, profile.max_gpus))
    lines = {}
    for nodes, gpus in sizes:
        job_slice = profile.make_slice(gpus, profile.default_hours, nodes)
        label = (
            count(gpus, "GPU") if nodes == 1 else f"{count(nodes, 'node')} × {count(gpus, 'GPU')}"
        )
        lines[label] = "sbatch " + " ".join(slurm.resource_options(job_slice))
    if profile.cpu_sessions:
        cpu = next((p for p in profile.partitions), profile.partition)
        job_slice = profile.make_slice(0, profile.default_hours, 1, cpu, cores=profile.max_cores,
                                       mem_gb=profile.max_mem_gb)  # fmt: skip
        lines["No GPU"] = "sbatch " + " ".join(slurm.resource_options(job_slice))
    return lines


class ClusterSource:
    """Reads the hub's snapshot (and the site catalog beside it); falls back
    to its own sinfo (and catalog) when it is stale."""

    def __init__(self, snapshot_path, max_age=90.0, timeout=20.0, catalog_max_age=360.0):
        self.snapshot_path = snapshot_path
        self.max_age = max_age
        self.catalog_max_age = catalog_max_age
        self.timeout = timeout
        self._own = None
        self._own_at = 0.0
        self._own_catalog = None  # (monotonic time, SiteCatalog) of its own read

    async def view(self):
        view = self._from_snapshot()
        if view is not None:
            return view
        if self._own is None or time.monotonic() - self._own_at > self.max_age:
            self._own_at = time.monotonic()
            self._own = await self._from_sinfo()
        return self._own

    def _from_snapshot(self):
        try:
            with open(self.snapshot_path) as f:
                at, partitions, jobs, errors = snapshot_from_json(f.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("unreadable cluster snapshot %s: %s", self.snapshot_path, e)
            return None
        if (datetime.now() - at).total_seconds() > self.max_age:
            return None
        error = errors["cluster"] or errors["jobs"]
        return ClusterView(partitions, jobs, at, "the hub's poll", error)

    async def site_view(self):
        """``(partitions, catalog)`` for a notebook job's site choices
        (``portal.notebookjobs``): the hub's poll's, read from the files it
        writes (the catalog beside its snapshot, ``catalog_path``), else
        this service's own reads, kept ``max_age`` like its own sinfo."""
        view = await self.view()
        catalog = self._catalog_from_file()
        if catalog is None:
            if self._own_catalog is None or time.monotonic() - self._own_catalog[0] > self.max_age:
                self._own_catalog = (time.monotonic(), await slurm.site_catalog(self.timeout))
            catalog = self._own_catalog[1]
        return view.partitions, catalog

    def _catalog_from_file(self):
        path = catalog_path(self.snapshot_path)
        try:
            with open(path) as f:
                catalog = SiteCatalog.from_json(f.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("unreadable cluster catalog %s: %s", path, e)
            return None
        if catalog.time is None or (datetime.now() - catalog.time).total_seconds() > (
            self.catalog_max_age
        ):
            return None  # a stalled poll's: read anew
        return catalog

    async def _from_sinfo(self):
        try:
            partitions = await slurm.partitions(timeout=self.timeout)
        except slurm.SlurmError as e:
            return ClusterView(at=datetime.now(), source=DIRECT, error=str(e))
        return ClusterView(partitions, {}, datetime.now(), DIRECT)
