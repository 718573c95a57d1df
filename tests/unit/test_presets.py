"""Saved presets (issue 38) without the hub: their checks, the store's table,
the fit of a preset and its offer to reset a field (a real PortalSpawner's
resolve_options, no Slurm). The hub, Slurm and the browser:
tests/integration/test_presets.py, tests/browser/test_presets.py."""

import pytest

from portal import presets
from portal.core.profiles import ProfileError
from portal.presets import PUBLISHED, PresetError
from portal.store import NotFound, ProfileStore, default_url
from spawners import presets as hub_presets
from spawners.form import OPTION_KEYS
from tests.unit.test_spawner_lifecycle import spawner


@pytest.fixture
def store(tmp_path):
    s = ProfileStore(default_url(tmp_path))
    s.upgrade()
    return s


# -- the checks -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name, message",
    [
        ("", "Give the preset a name"),
        ("   ", "Give the preset a name"),
        ("x" * 81, "at most 80 characters"),
        ("a\nb", "control characters"),
        ("a\x85b", "control characters"),
        ("<script>", "control characters, < or >"),
        (42, "Give the preset a name"),
    ],
)
def test_a_name_that_is_empty_long_or_markup_is_refused_naming_name(name, message):
    with pytest.raises(PresetError, match=message) as e:
        presets.check_name(name)
    assert e.value.field == "name"


def test_a_name_keeps_its_own_characters():
    assert presets.check_name("ResNet 4×V100 12 h") == "ResNet 4×V100 12 h"
    assert presets.check_name("x" * 80) == "x" * 80


@pytest.mark.parametrize("server", ["A", "a--b", "-a", "a-", "1a", "a/b", "a" * 31, 5])
def test_a_session_name_jupyterhub_would_refuse_is_refused(server):
    with pytest.raises(PresetError) as e:
        presets.check_server_name(server)
    assert e.value.field == "server_name"


@pytest.mark.parametrize(
    "options, field",
    [
        ({"profile": "x", "partiton": "gpu"}, "options"),  # a key the form does not have
        ({"profile": "x\r\n#SBATCH --uid=0"}, "profile"),
        ({"gpus": {"n": 4}}, "gpus"),
        ({"gpus": 2.5}, "gpus"),
        ("profile=x", None),
    ],
)
def test_options_are_the_forms_and_a_refusal_names_the_field(options, field):
    data = {"name": "n", "options": options}
    with pytest.raises((PresetError, ProfileError)) as e:
        hub_presets.checked(data)
    assert e.value.field == field


def test_options_keep_the_forms_keys_and_leave_out_empty_values():
    data = {"name": " ResNet ", "options": {"profile": "default", "gpus": "2", "hours": "",
                                             "notify": True}}  # fmt: skip
    assert hub_presets.checked(data) == (
        "ResNet",
        {"gpus": "2", "notify": True, "profile": "default"},
        "",
    )
    assert set(hub_presets.checked(data)[1]) <= OPTION_KEYS


def test_a_named_session_on_a_hub_without_them_is_refused():
    data = {"name": "n", "options": {}, "server_name": "train"}
    with pytest.raises(PresetError, match="one session per user") as e:
        hub_presets.checked(data, allow_named=False)
    assert e.value.field == "server_name"
    assert hub_presets.checked(data, allow_named=True)[2] == "train"


# -- the store ------------------------------------------------------------------


def test_a_user_sees_their_own_then_the_published_and_not_anothers(store):
    ann = store.save_preset("ann", "zeta", {"gpus": 2}, "", "ann")
    store.save_preset("ann", "alpha", {"gpus": 1}, "train", "ann")
    store.save_preset("bob", "bobs", {"gpus": 4}, "", "bob")
    store.save_preset(PUBLISHED, "course", {"hours": 2}, "", "carol")
    assert [p["name"] for p in store.presets("ann")] == ["alpha", "zeta", "course"]
    assert [p["name"] for p in store.presets("bob")] == ["bobs", "course"]
    assert [p["name"] for p in store.published_presets()] == ["course"]
    assert ann["options"] == {"gpus": 2} and not ann["published"]
    assert store.presets("ann")[1]["server_name"] == "" and store.presets("ann")[0]["server_name"]


def test_a_name_is_unique_per_owner_and_the_refusal_names_it(store):
    store.save_preset("ann", "same", {}, "", "ann")
    store.save_preset("bob", "same", {}, "", "bob")  # another owner's may
    with pytest.raises(PresetError, match="One of your presets is named 'same'") as e:
        store.save_preset("ann", "same", {"gpus": 1}, "", "ann")
    assert e.value.field == "name"
    assert [p["options"] for p in store.presets("ann")] == [{}]


def test_a_preset_changes_and_goes_only_by_its_owner(store):
    p = store.save_preset("ann", "a", {"gpus": 1}, "", "ann")
    with pytest.raises(NotFound):
        store.save_preset("bob", "a", {"gpus": 4}, "", "bob", p["id"])
    with pytest.raises(NotFound):
        store.delete_preset(p["id"], "bob")
    changed = store.save_preset("ann", "b", {"gpus": 3}, "x", "ann", p["id"])
    assert (changed["id"], changed["name"], changed["options"]) == (p["id"], "b", {"gpus": 3})
    assert store.preset(p["id"])["server_name"] == "x"
    store.delete_preset(p["id"], "ann")
    assert store.presets("ann") == []
    with pytest.raises(NotFound):
        store.preset(p["id"])


def test_the_presets_are_read_from_memory_while_nothing_changed(store, tmp_path):
    store.save_preset("ann", "a", {"gpus": 1}, "", "ann")
    statements = []

    def count(*args):
        statements.append(args[2])

    from sqlalchemy import event

    event.listen(store.engine, "before_cursor_execute", count)
    first = store.presets("ann")
    reads = len(statements)
    for _ in range(20):
        assert store.presets("ann") == first
    assert len(statements) == reads  # no statement for the 20 reads
    first[0]["name"] = "changed by the caller"
    assert store.presets("ann")[0]["name"] == "a"  # a copy each
    other = ProfileStore(default_url(tmp_path))  # another process (the admin service) writes
    other.save_preset(PUBLISHED, "course", {}, "", "carol")
    assert [p["name"] for p in store.presets("ann")] == ["a", "course"]


def test_the_migration_adds_the_table_to_a_store_of_before(tmp_path):
    from sqlalchemy import inspect

    old = ProfileStore(default_url(tmp_path))
    old.upgrade("0011")  # a store of before presets
    assert "portal_presets" not in inspect(old.engine).get_table_names()
    old.upgrade("0012")
    assert old.schema() == "0012"
    assert old.save_preset("ann", "a", {}, "", "ann")["id"] == 1


# -- the fit --------------------------------------------------------------------


async def test_a_preset_that_fits_has_no_problem():
    s = spawner("unit-presets")
    assert await hub_presets.fit(s, {"profile": "default", "gpus": "1", "hours": "2"}) is None


async def test_a_gone_profile_names_the_field_and_offers_the_profiles_default():
    s = spawner("unit-presets")
    preset = {"id": 1, "options": {"profile": "gone", "gpus": "1", "hours": "2"}}
    shown = await hub_presets.fit_json(s, preset)
    assert not shown["fits"] and shown["field"] == "profile"
    assert "Profile 'gone' is not available to you" in shown["error"]
    assert shown["reset_options"] == {"gpus": "1", "hours": "2"}
    assert await hub_presets.fit(s, shown["reset_options"]) is None  # the offer starts


async def test_a_field_the_preset_does_not_set_is_not_offered_for_reset():
    s = spawner("unit-presets")
    s.default_profile = {"user_images": True}  # needs an image: the preset gives none
    shown = await hub_presets.fit_json(s, {"id": 1, "options": {"gpus": "1"}})
    assert shown["field"] == "image" and "reset_options" not in shown


async def test_too_many_gpus_name_gpus_and_the_reset_is_one():
    s = spawner("unit-presets")
    shown = await hub_presets.fit_json(s, {"id": 1, "options": {"gpus": "99", "hours": "1"}})
    assert shown["field"] == "gpus" and shown["reset_options"] == {"hours": "1"}


async def test_the_sites_refusal_names_its_field_as_at_start():
    """fit asks the site's Slurm as load_user_options does (check_site_choices,
    its own tests: tests/unit/test_site_slices.py): here its refusal alone."""
    from portal.core.slice import SliceError

    s = spawner("unit-presets")
    asked = []

    async def account_removed(profile, job_slice):
        asked.append(job_slice)
        raise SliceError("You have no association with account lab-cv", "account")

    s.default_profile = {"choose": ["account"]}  # the profile lets its users choose one
    s.check_site_choices = account_removed
    preset = {"id": 1, "options": {"gpus": "1", "hours": "2", "account": "lab-cv"}}
    shown = await hub_presets.fit_json(s, preset)
    assert asked and (shown["field"], shown["fits"]) == ("account", False)
    assert shown["error"] == "You have no association with account lab-cv"
    assert shown["reset_options"] == {"gpus": "1", "hours": "2"}


def test_a_published_preset_is_changed_by_admins_alone():
    own = {"owner": "ann", "published": False}
    published = {"owner": PUBLISHED, "published": True}
    assert hub_presets.may_change(own, "ann", False)
    assert not hub_presets.may_change(own, "bob", True)
    assert not hub_presets.may_change(published, "ann", False)
    assert hub_presets.may_change(published, "carol", True)


# -- the admin service's publishing ---------------------------------------------


def test_an_admin_publishes_a_copy_of_their_own_and_unpublishes_it(store):
    from portal.service.presets import publish, unpublish

    own = store.save_preset("carol", "Course", {"hours": 2}, "", "carol")
    bobs = store.save_preset("bob", "Bobs", {}, "", "bob")
    with pytest.raises(NotFound):
        publish(store, bobs["id"], "carol")  # another user's: not hers to publish
    published = publish(store, own["id"], "carol")
    assert published["published"] and published["options"] == {"hours": 2}
    assert [p["name"] for p in store.presets("bob")] == ["Bobs", "Course"]
    with pytest.raises(PresetError, match="A published preset is named 'Course'"):
        publish(store, own["id"], "carol")
    with pytest.raises(NotFound):
        unpublish(store, own["id"])  # her own, not a published one
    assert unpublish(store, published["id"]) == "Course"
    assert [p["name"] for p in store.presets("bob")] == ["Bobs"]
