"""The spawn form's and the REST API's options, nodes among them, without Slurm
(its runner replaced as in test_spawner_lifecycle)."""

import html
import json
import re

import pytest

from portal.core.profiles import ProfileError, SliceError
from portal.slurm.parse import parse_sinfo
from tests.unit.test_spawner_lifecycle import runner, spawner  # noqa: F401 (a fixture)

TWO_NODES = """\
n1 gpu* gpu:4 gpu:0 0/32/0/32 idle 196608 0 7-00:00:00
n2 gpu* gpu:4 gpu:3(IDX:0-2) 24/8/0/32 mix 196608 147456 7-00:00:00
"""


def form(**fields):
    return {key: [value] for key, value in fields.items()}


def wide_spawner(name="unit-options"):
    s = spawner(name)
    s.default_profile = {"max_nodes": 2}
    return s


def test_the_form_gives_nodes_and_leaves_them_out_as_one():
    s = wide_spawner()
    options = s.options_from_form(form(profile="default", gpus="1", hours="2", nodes="2"))
    assert options == {"profile": "default", "gpus": 1, "hours": 2, "nodes": 2}
    options = s.options_from_form(form(profile="default", gpus="2", hours=""))
    assert options == {"profile": "default", "gpus": 2, "hours": 8, "nodes": 1}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"nodes": 3}, "Nodes must be between 1 and 2, not 3"),
        ({"nodes": "2;id"}, "Nodes must be a whole number"),
        ({"nodes": True}, "Nodes must be a whole number"),
        ({"nodes": "2\n#SBATCH -N 9"}, "nodes must not contain control characters"),
    ],
)
def test_node_counts_beyond_the_profile_are_refused(options, message):
    with pytest.raises((SliceError, ProfileError), match=message):
        wide_spawner().resolve_options({"profile": "default", "gpus": 1, **options})


def test_a_one_node_profile_refuses_two():
    with pytest.raises(SliceError, match="Nodes must be 1, not 2"):
        spawner("unit-one-node").resolve_options({"gpus": 1, "nodes": 2})


def nodes_select(page):
    return page.split('id="nodes"')[1].split("</select>")[0]


def rendered(s, partitions):
    s.poller.partitions = parse_sinfo(partitions)
    page = s.render_options_form()
    data = re.search(r'id="portal-profiles">(.*?)</script>', page, re.S).group(1)
    return page, json.loads(html.unescape(data))[0]


async def test_the_form_offers_nodes_only_where_the_profile_and_the_partition_allow(runner):  # noqa: F811
    page, profile = rendered(wide_spawner(), TWO_NODES)
    assert profile["offered_nodes"] == 2 and profile["nodes_free"] == [4, 1]
    assert re.search(r'id="nodes-group"\s*>', page)  # shown
    assert re.findall(r'<option value="(\d)"', nodes_select(page)) == ["1", "2"]
    # one node in the partition, or a profile of one node: no choice shown
    one_node = TWO_NODES.splitlines()[0]
    page, profile = rendered(wide_spawner("unit-options-small"), one_node)
    assert profile["offered_nodes"] == 1 and re.search(r'id="nodes-group"\s+hidden', page)
    page, profile = rendered(spawner("unit-options-one"), TWO_NODES)
    assert profile["offered_nodes"] == 1 and re.search(r'id="nodes-group"\s+hidden', page)


async def test_the_last_nodes_are_chosen_again(runner):  # noqa: F811
    s = wide_spawner("unit-options-last")
    s._link_options = {"profile": "default", "gpus": "1", "nodes": "2"}
    page, _ = rendered(s, TWO_NODES)
    assert re.search(r'<option value="2"\s+selected>2</option>', nodes_select(page))


def test_an_account_outside_the_portal_gets_no_session_whoever_asks():
    """A system account or one in none of the portal's groups is refused
    before anything is submitted, even when an admin asks (only a
    break-glass JupyterHub admin can add such an account to the hub;
    tests/integration/test_least_privilege.py shows a portal admin cannot)."""
    s = spawner("unit-options-account")
    uid = s.account().pw_uid
    s.uid_min, s.uid_max = uid + 1, uid + 1000
    with pytest.raises(ProfileError, match=rf"its uid {uid} is outside the portal's user range"):
        s.resolve_options({"profile": "default", "gpus": 1})
    s.uid_min, s.uid_max = 0, uid + 1000
    s.allowed_unix_groups = ["portal-nosuchgroup"]
    with pytest.raises(ProfileError, match="none of the portal's groups"):
        s.resolve_options({"profile": "default", "gpus": 1})
