import pytest

from portal.core.profiles import ProfileError, SliceError, choose, profile_from_dict

BASE = dict(name="pytorch", display_name="PyTorch", environment="pytorch", partition="gpu")


def test_defaults_and_slice():
    p = profile_from_dict(BASE)
    assert (p.max_gpus, p.cores_per_gpu, p.mem_per_gpu_gb, p.default_hours) == (4, 8, 48, 8)
    s = p.make_slice(2)
    assert (s.gpus, s.cores, s.mem_gb, s.hours) == (2, 16, 96, 8)
    with pytest.raises(SliceError, match="between 1 and 4"):
        p.make_slice(5)


def test_a_profile_spans_one_node_unless_it_allows_more():
    p = profile_from_dict(BASE)
    assert p.max_nodes == 1 and p.to_dict()["max_nodes"] == 1
    assert p.make_slice(2, None, "").nodes == 1  # the form's empty field: 1 node
    with pytest.raises(SliceError, match="Nodes must be 1, not 2") as e:
        p.make_slice(1, None, 2)
    assert e.value.field == "nodes"
    wide = profile_from_dict({**BASE, "max_nodes": 2})
    s = wide.make_slice("1", None, "2")
    assert (s.nodes, s.total_gpus, s.total_cores, s.total_mem_gb) == (2, 2, 16, 96)
    with pytest.raises(SliceError, match="Nodes must be between 1 and 2, not 3"):
        wide.make_slice(1, None, 3)
    assert profile_from_dict(wide.to_dict()) == wide


@pytest.mark.parametrize(
    "change, field",
    [
        ({"name": "Py Torch"}, "name"),
        ({"name": "<b>x</b>"}, "name"),
        ({"display_name": "<script>alert(1)</script>"}, "display_name"),
        ({"partition": "gpu;id"}, "partition"),
        ({"environment": "$(id)"}, "environment"),
        ({"max_gpus": 0}, "max_gpus"),
        ({"max_gpus": 99}, "max_gpus"),
        ({"max_gpus": "2"}, "max_gpus"),
        ({"max_nodes": 0}, "max_nodes"),
        ({"max_nodes": 65}, "max_nodes"),
        ({"max_nodes": "2"}, "max_nodes"),
        ({"max_nodes": True}, "max_nodes"),
        ({"mem_per_gpu_gb": 100000}, "mem_per_gpu_gb"),
        ({"default_hours": 30, "max_hours": 24}, "default_hours"),
        ({"groups": ["ok", "bad group"]}, "groups"),
        ({"groups": "vision"}, "groups"),
        ({"enabled": "yes"}, "enabled"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_invalid_profiles_name_the_field(change, field):
    with pytest.raises(ProfileError) as e:
        profile_from_dict({**BASE, **change})
    assert e.value.field == field


def test_groups_restrict():
    open_ = profile_from_dict(BASE)
    vision = profile_from_dict({**BASE, "name": "vision", "groups": ["vision"]})
    off = profile_from_dict({**BASE, "name": "off", "enabled": False})
    assert open_.allows([]) and vision.allows(["portal-users", "vision"])
    assert not vision.allows(["portal-users"])
    assert not off.allows(["anything"])
    profiles = [open_, vision, off]
    assert choose(profiles, "vision", ["vision"]) is vision
    for name, groups in [("vision", ["portal-users"]), ("off", []), ("nope", []), (None, [])]:
        with pytest.raises(ProfileError):
            choose(profiles, name, groups)
