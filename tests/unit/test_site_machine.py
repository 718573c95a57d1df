"""The pure parts of the site machine (tests/site): its command lines, its
root's key, how it joins the demo, and how snapshots are compared."""

import doctest

import pytest

from tests.site import foreign, install, join, machine, snapshot
from tests.site.machine import root_key


@pytest.mark.parametrize(
    "module", [machine, join, snapshot, install, foreign], ids=lambda m: m.__name__
)
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


def test_the_site_journeys_settings_are_a_valid_site_file(tmp_path):
    from portal import settings
    from tests.site import test_site_install as journey

    assert doctest.testmod(journey).failed == 0
    file = tmp_path / "portal.toml"
    file.write_text(journey.site_settings_toml("10.200.0.32", "vm", 3890, "/var/lib/jupyterhub"))
    site = settings.load(file)  # refused if a key is unknown
    assert site["cluster"]["embedded"] is False
    assert site["hub"]["api_ip"] == site["hub"]["connect_ip"] == "10.200.0.32"
    assert settings.state_dir(site) == "/var/lib/jupyterhub"
    assert site["slurm"]["job_name"] == journey.JOB_NAME != settings.defaults()["slurm"]["job_name"]
