"""What ``make purge`` removes (deploy/purge.py): only the people of the
portal's directory, only the Slurm files that deploy/slurm.sh wrote, and
only the container images that deploy/images.py built; of the hubs' state,
the portal's own folder and [hub] state_dir, never a parent of it."""

import os
from pathlib import Path

import pytest

from deploy.purge import cmd_files, people, purge_images, state_removed, state_roots, under
from deploy.slurm_conf import MARKER, ours
from portal import settings as site_settings

SLAPCAT = """dn: uid=alice,ou=people,dc=portal,dc=example
objectClass: posixAccount
uid: alice
uidNumber: 20001
homeDirectory: /home/alice
entryUUID: 1

dn: uid=daemon2,ou=people,dc=portal,dc=example
uid: daemon2
uidNumber: 999
homeDirectory: /home/daemon2

dn: uid=Bad Name,ou=people,dc=portal,dc=example
uid: Bad Name
uidNumber: 20050
homeDirectory: /home/bad

dn: uid=nohome,ou=people,dc=portal,dc=example
uid: nohome
uidNumber: 20060

dn: uid=loadtest-07,ou=people,dc=portal,dc=example
uid: loadtest-07
uidNumber: 21007
homeDirectory: /srv/elsewhere/loadtest-07

"""


def test_people_are_plain_names_with_uids_of_1000_or_more():
    assert people(SLAPCAT) == [
        ("alice", 20001, "/home/alice"),
        ("nohome", 20060, ""),
        ("loadtest-07", 21007, "/srv/elsewhere/loadtest-07"),
    ]
    assert people("") == []


def test_only_homes_under_the_home_root_are_removed():
    assert under("/home/alice", "/home")
    assert not under("/srv/elsewhere/loadtest-07", "/home")
    assert not under("/home", "/home")
    assert not under("/homeless/x", "/home")
    assert not under("", "/home")


def test_a_sites_own_slurm_conf_is_kept():
    assert ours(f"{MARKER}\nClusterName=portal\n")
    assert not ours("ClusterName=site\n")
    assert not ours(f"# copied from: {MARKER}\n")


def image(folder, built_here=True):
    (folder / "etc").mkdir(parents=True)
    (folder / "usr").mkdir()
    if built_here:
        (folder / "etc" / "portal-image").write_text("NAME=x\n")


def test_the_images_built_here_go_and_a_sites_own_stay(tmp_path):
    images = tmp_path / "images"
    image(images / "pytorch")
    image(images / ".tensorflow.new")
    image(images / "ngc-pytorch", built_here=False)
    (images / ".debian-base").mkdir()
    purge_images({"containers": {"images": str(images)}})
    assert sorted(os.listdir(images)) == ["ngc-pytorch"]
    (images / "ngc-pytorch" / "etc").rmdir()
    (images / "ngc-pytorch" / "usr").rmdir()
    (images / "ngc-pytorch").rmdir()
    image(images / "tensorflow")
    purge_images({"containers": {"images": str(images)}})
    assert not images.exists()
    purge_images({"containers": {"images": str(images)}})  # nothing there: nothing to do


def test_the_state_root_goes_whole_unless_a_sites_images_are_in_it(tmp_path):
    root = tmp_path / "portal"
    (root / "hub").mkdir(parents=True)
    (root / "accounts.json").write_text("{}")
    assert state_removed([root], root / "images") == [root]
    (root / "images" / "ngc").mkdir(parents=True)
    assert sorted(state_removed([root], root / "images")) == [root / "accounts.json", root / "hub"]
    assert state_removed([root], tmp_path / "elsewhere") == [root]


def test_a_state_dir_elsewhere_goes_itself_never_its_parent(tmp_path):
    own = site_settings.PORTAL_ROOT
    default = {"hub": {"state_dir": "/var/lib/portal/hub"}}
    assert state_roots(default) == [Path(own)]
    site = {"hub": {"state_dir": "/var/lib/jupyterhub"}}
    assert state_roots(site) == [Path(own), Path("/var/lib/jupyterhub")]
    assert Path("/var/lib") not in state_removed(state_roots(site), tmp_path / "images")
    # its images folder inside it, holding a site's image, stays
    state = tmp_path / "jupyterhub"
    (state / "images" / "ngc").mkdir(parents=True)
    (state / "jupyterhub.sqlite").write_text("")
    assert state_removed([state], state / "images") == [state / "jupyterhub.sqlite"]


@pytest.mark.parametrize("state_dir", ["/var/lib", "/var/lib/", "/", "/srv", "/home/ada",
                                       "var/lib/x", "/var/lib/../lib", "/opt"])  # fmt: skip
def test_purge_refuses_a_state_dir_that_is_not_the_portals_own(state_dir, tmp_path):
    settings = {"hub": {"state_dir": state_dir}, "cluster": {"embedded": True}}
    with pytest.raises(site_settings.SettingsError, match=r"\[hub\] state_dir"):
        cmd_files(settings)  # before anything is removed
    with pytest.raises(site_settings.SettingsError, match=r"\[hub\] state_dir"):
        state_roots(settings)
