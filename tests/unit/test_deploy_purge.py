"""What ``make purge`` removes (deploy/purge.py): only the people of the
portal's directory, and only the Slurm files that deploy/slurm.sh wrote."""

from deploy.purge import people, under
from deploy.slurm_conf import MARKER, ours

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
