"""The pure parts of the site machine (tests/site): its command lines, its
root's key, how it joins the demo, and how snapshots are compared."""

import doctest

import pytest

from tests.site import join, machine, snapshot
from tests.site.machine import root_key


@pytest.mark.parametrize("module", [machine, join, snapshot], ids=lambda m: m.__name__)
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


def test_a_changed_package_list_or_mirror_makes_another_root():
    sources = ["deb http://deb.debian.org/debian bookworm main"]
    key = root_key(sources)
    assert root_key(sources) == key
    assert root_key(sources, packages=(*machine.PACKAGES, "vim")) != key
    assert root_key(["deb http://other.example/debian bookworm main"]) != key
    assert root_key(sources, recipe=machine.RECIPE + 1) != key
    # the order the packages are listed in does not count
    assert root_key(sources, packages=tuple(reversed(machine.PACKAGES))) == key
