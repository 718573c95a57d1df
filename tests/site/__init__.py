"""A site's login node, as a machine of its own: a ``systemd-nspawn --boot``
machine from an ``mmdebstrap`` root (tests/site/machine.py), joined to the
demo cluster as a second login node would be (tests/site/join.py), and a
record of what a site owns on it, to compare before and after the portal is
installed (tests/site/snapshot.py)."""
