"""Slurm 22.05.8's own output, captured from the demo cluster
(tests/unit/slurm_2205): its sinfo and its site catalog, parsed as the hub
parses them."""

from pathlib import Path

from portal.slurm.model import SiteCatalog
from portal.slurm.parse import (
    parse_associations,
    parse_default_accounts,
    parse_partition_policies,
    parse_qos,
    parse_reservations,
    parse_shares,
    parse_sinfo,
)

OUTPUT = Path(__file__).resolve().parents[1] / "unit" / "slurm_2205"


def captured(prefix, name):
    """The text of ``PREFIX_NAME.txt`` (``captured``: the demo before its
    reshaping, ``shape``: after)."""
    return (OUTPUT / f"{prefix}_{name}.txt").read_text()


def captured_site(prefix):
    """``(partitions, SiteCatalog)`` from the ``prefix`` files."""
    catalog = SiteCatalog(
        associations=parse_associations(captured(prefix, "assoc")),
        default_accounts=parse_default_accounts(captured(prefix, "users")),
        qos=parse_qos(captured(prefix, "qos")),
        shares=parse_shares(captured(prefix, "sshare")),
        reservations=parse_reservations(captured(prefix, "reservations")),
        partitions=parse_partition_policies(captured(prefix, "partitions")),
    )
    return parse_sinfo(captured(prefix, "sinfo")), catalog
