"""The uid ranges of the test and benchmark accounts (tests/support/loadusers.py)."""

import pytest

from tests.support import loadusers


def test_each_prefix_has_its_own_uids():
    ranges = [set(loadusers.uid_range(p)) for p in loadusers.UID_BASES]
    assert sum(map(len, ranges)) == len(set().union(*ranges))
    assert all(not r & set(loadusers.DEMO_UIDS) for r in ranges)
    assert loadusers.uid_range("load")[6] == 21007
    assert loadusers.uid_range("bench")[6] == 23007


@pytest.mark.parametrize(
    "bases", [{"a": 21000, "b": 21500}, {"a": 20500}, {"a": 23000, "bench": 23000}]
)
def test_overlapping_ranges_are_refused(bases):
    with pytest.raises(ValueError, match="overlap"):
        loadusers.check_ranges(bases)


def test_unknown_prefix_is_refused():
    with pytest.raises(ValueError, match="UID_BASES"):
        loadusers.uid_range("demo")
    with pytest.raises(ValueError, match="UID_BASES"):
        loadusers.ensure_users(1, prefix="demo")
