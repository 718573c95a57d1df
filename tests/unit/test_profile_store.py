"""The profile store on a scratch SQLite file, and the checks against a cluster."""

import dataclasses

import pytest

from portal.core.numbers import whole_number
from portal.core.profiles import ProfileError, profile_from_dict
from portal.service.cluster import check_profile, resource_lines
from portal.service.operations import form_to_dict
from portal.slurm.model import Node, Partition, snapshot_from_json, snapshot_to_json
from portal.slurm.parse import max_time_minutes, parse_sinfo
from portal.store import Conflict, NotFound, ProfileStore, default_url

SEED = [
    {"name": "pytorch", "display_name": "PyTorch", "environment": "pytorch", "partition": "gpu"},
    {"name": "mxnet", "display_name": "MXNet", "environment": "mxnet", "partition": "gpu"},
]


@pytest.fixture
def store(tmp_path):
    s = ProfileStore(default_url(tmp_path))
    s.upgrade()
    s.seed(SEED)
    return s


def test_an_edit_of_the_settings_after_the_first_start_is_named(store):
    from spawners.hub_config import unseeded_edits

    assert unseeded_edits(store, SEED) == {}
    edited = [{**SEED[0], "max_gpus": 2, "description": "new"}, SEED[1], {**SEED[0], "name": "x"}]
    assert unseeded_edits(store, edited) == {"pytorch": ["description", "max_gpus"]}


def test_seed_in_order_then_only_names_never_held(store):
    assert [p.name for p in store.profiles()] == ["pytorch", "mxnet"]
    p = store.get("mxnet")
    store.update(dataclasses.replace(p, max_gpus=1), 1, "carol")
    store.delete("pytorch", 1, "carol")
    # a site's new profile arrives after the others; an edited or deleted one
    # is never changed from the settings
    changed = [{**SEED[0], "max_gpus": 2}, {**SEED[1], "max_gpus": 3}, {**SEED[0], "name": "new"}]
    assert store.seed(changed) == ["new"]
    assert [p.name for p in store.profiles()] == ["mxnet", "new"]
    assert store.get("mxnet").max_gpus == 1 and store.get("new").revision == 1
    assert store.seed(changed) == []


def test_a_store_of_the_first_schema_is_migrated_and_its_profiles_span_one_node(tmp_path):
    old = ProfileStore(default_url(tmp_path))
    old.upgrade("0001")
    with old.engine.begin() as db:
        db.exec_driver_sql(
            "insert into portal_profiles values ('old', 'Old', '', 'pytorch', 'gpu', 4, 8, 48, "
            "8, 24, '[]', 1, 1, 0, '2026-01-01 00:00:00', 'site settings')"
        )
        db.exec_driver_sql(
            "insert into portal_profile_changes (profile, revision, action, author, at, after) "
            "values ('old', 1, 'seed', 'site settings', '2026-01-01 00:00:00', "
            """'{"display_name": "Old", "max_gpus": 4}')"""
        )
    store = ProfileStore(default_url(tmp_path))
    store.upgrade()
    profile = store.get("old")
    assert profile.max_nodes == 1
    # the revision stored before max_nodes existed meant one node
    assert store.revision("old", 1)["max_nodes"] == 1
    assert store.history("old")[0]["changes"]["max_nodes"] == (None, 1)  # as it was seeded
    store.update(dataclasses.replace(profile, max_nodes=2), 1, "carol")
    assert store.get("old").max_nodes == 2
    assert store.history("old")[0]["changes"]["max_nodes"] == (1, 2)


def test_update_history_and_conflict(store):
    p = store.get("pytorch")
    p2 = store.update(dataclasses.replace(p, max_gpus=2), 1, "carol")
    assert p2.revision == 2
    with pytest.raises(Conflict) as e:
        store.update(dataclasses.replace(p, max_hours=4), 1, "dave")
    assert e.value.changes == {"max_gpus": (4, 2)} and "carol" in str(e.value)
    assert store.get("pytorch").max_hours == 24
    history = store.history("pytorch")
    assert [(h["action"], h["author"]) for h in history] == [
        ("update", "carol"),
        ("seed", "site settings"),
    ]
    assert store.revision("pytorch", 1)["max_gpus"] == 4


def test_an_unchanged_save_makes_no_revision(store):
    p = store.get("mxnet")
    assert store.update(p, 1, "carol").revision == 1
    assert len(store.history("mxnet")) == 1


def test_create_delete_recreate_goes_on_with_revisions(store):
    p = profile_from_dict({**SEED[0], "name": "short"})
    assert store.create(p, "carol").revision == 1
    with pytest.raises(ProfileError, match="exists"):
        store.create(p, "carol")
    store.delete("short", 1, "carol")
    with pytest.raises(NotFound):
        store.get("short")
    assert store.create(p, "carol").revision == 2


NODE = Node("n1", ("gpu",), 4, 0, 32, 0, 196608, 0, "idle")
CLUSTER = {"gpu": Partition("gpu", (NODE,), "7-00:00:00")}
SMALL = Node("n3", ("gpu",), 2, 0, 16, 0, 98304, 0, "idle")
TWO_NODES = {
    "gpu": Partition("gpu", (NODE, dataclasses.replace(NODE, name="n2"), SMALL), "UNLIMITED")
}


@pytest.mark.parametrize(
    "change, field",
    [
        ({}, None),
        ({"partition": "cpu"}, "partition"),
        ({"max_gpus": 5}, "max_gpus"),
        ({"cores_per_gpu": 9}, "cores_per_gpu"),
        ({"mem_per_gpu_gb": 49}, "mem_per_gpu_gb"),
        ({"max_hours": 169}, "max_hours"),
        ({"max_hours": 168}, None),
    ],
)
def test_check_profile(change, field):
    profile = profile_from_dict({**SEED[0], **change})
    if field is None:
        check_profile(profile, CLUSTER)
    else:
        with pytest.raises(ProfileError) as e:
            check_profile(profile, CLUSTER)
        assert e.value.field == field


@pytest.mark.parametrize(
    "change, cluster, error",
    [
        ({"max_nodes": 2}, TWO_NODES, None),
        ({"max_nodes": 3, "max_gpus": 2, "mem_per_gpu_gb": 48}, TWO_NODES, None),
        # n3 holds 2 GPUs: two nodes only for a 4-GPU slice
        ({"max_nodes": 3}, TWO_NODES, "max_nodes 3 is more than the 2 nodes of partition 'gpu'"),
        ({"max_nodes": 2}, CLUSTER, "max_nodes 2 is more than the 1 node of partition 'gpu'"),
    ],
)
def test_check_profile_max_nodes(change, cluster, error):
    profile = profile_from_dict({**SEED[0], **change})
    if error is None:
        check_profile(profile, cluster)
    else:
        with pytest.raises(ProfileError, match=error) as e:
            check_profile(profile, cluster)
        assert e.value.field == "max_nodes"


def test_check_profile_refuses_an_unknown_cluster():
    with pytest.raises(ProfileError, match="not known"):
        check_profile(profile_from_dict(SEED[0]), {})


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("UNLIMITED", None),
        ("infinite", None),
        ("30", 30),
        ("30:00", 30),
        ("8:00:00", 480),
        ("1-00:00:00", 1440),
        ("2-12", 3600),
        ("1-01:30", 1530),
    ],
)
def test_max_time_minutes(text, minutes):
    assert max_time_minutes(text) == minutes


def test_resource_lines():
    lines = resource_lines(profile_from_dict({**SEED[0], "max_gpus": 2}))
    assert lines["2 GPUs"] == (
        "sbatch --nodes=1 --ntasks-per-node=2 --partition=gpu --gres=gpu:2 --cpus-per-task=8 "
        "--mem=96G --time=8:00:00 --no-requeue"
    )
    assert list(lines) == ["1 GPU", "2 GPUs"]
    lines = resource_lines(profile_from_dict({**SEED[0], "max_gpus": 2, "max_nodes": 3}))
    assert list(lines) == ["1 GPU", "2 GPUs", "3 nodes × 2 GPUs"]
    assert lines["3 nodes × 2 GPUs"].startswith("sbatch --nodes=3 --ntasks-per-node=2 ")


def test_form_to_dict_keeps_what_was_typed():
    data = form_to_dict(
        {"max_gpus": [b"two"], "max_hours": [b" 12 "], "groups": [b"a, b c"], "name": [b"x"]}
    )
    assert data == {
        "name": "x",
        "max_gpus": "two",
        "max_hours": 12,
        "groups": ["a", "b", "c"],
        "enabled": False,
        "user_images": False,  # an unticked checkbox is not sent
    }
    data = form_to_dict({"image": [b"pytorch"], "user_images": [b"on"], "enabled": [b"on"]})
    assert data == {"image": "pytorch", "user_images": True, "enabled": True}


def test_whole_number_takes_ascii_digits_only():
    assert [whole_number(t) for t in ("7", " 12 ", "007", "999999999")] == [7, 12, 7, 999999999]
    # "²" passes str.isdigit, not int(); past 9 digits it is no revision nor form number
    for text in ("²", "٣", "１", "-1", "+1", "1.0", "9" * 10, "", "1 2"):
        assert whole_number(text) is None, text


def test_snapshot_round_trip():
    text = "vm gpu* gpu:4(S:0) gpu:2(IDX:0-1) 16/16/0/32 mix 196608 98304 7-00:00:00"
    partitions = parse_sinfo(text)
    _, back, jobs, errors = snapshot_from_json(snapshot_to_json(partitions, {}, "", "x"))
    assert back == partitions and jobs == {} and errors == {"cluster": "", "jobs": "x"}


IMAGE_PROFILE = {**SEED[0], "name": "pt-image", "image": "pytorch", "user_images": True}


def test_a_profiles_image_fields_round_trip_through_the_store(store):
    assert store.get("pytorch").image == "" and store.get("pytorch").user_images is False
    assert store.seed([IMAGE_PROFILE]) == ["pt-image"]
    seeded = store.get("pt-image")
    assert (seeded.image, seeded.user_images, seeded.in_container) == ("pytorch", True, True)
    updated = store.update(dataclasses.replace(seeded, image="tensorflow", user_images=False),
                           1, "carol")  # fmt: skip
    assert (updated.image, updated.user_images, updated.revision) == ("tensorflow", False, 2)
    assert store.history("pt-image")[0]["changes"] == {
        "image": ("pytorch", "tensorflow"), "user_images": (True, False),
    }  # fmt: skip
    # what a revert reads back
    assert {k: store.revision("pt-image", 1)[k] for k in ("image", "user_images")} == {
        "image": "pytorch", "user_images": True,
    }  # fmt: skip
    created = store.create(profile_from_dict({**IMAGE_PROFILE, "name": "copy"}), "carol")
    assert store.get("copy") == created and created.image == "pytorch"
    # an environment profile's history names no image field
    store.update(dataclasses.replace(store.get("mxnet"), max_gpus=1), 1, "carol")
    assert store.history("mxnet")[0]["changes"] == {"max_gpus": (4, 1)}


def test_a_store_of_schema_0004_gains_the_image_fields_and_checks(tmp_path):
    old = ProfileStore(default_url(tmp_path))
    old.upgrade("0004")
    with old.engine.begin() as db:  # the ORM knows the new columns: the old rows by hand
        assert "image" not in [
            r[1] for r in db.exec_driver_sql("pragma table_info(portal_profiles)")
        ]
        db.exec_driver_sql(
            "insert into portal_profiles (name, display_name, description, environment, "
            "partition, max_gpus, max_nodes, cores_per_gpu, mem_per_gpu_gb, default_hours, "
            "max_hours, idle_minutes, groups, enabled, revision, position, updated_at, "
            "updated_by) values ('pytorch', 'PyTorch', '', 'pytorch', 'gpu', 4, 1, 8, 48, 8, 24, "
            "0, '[]', 1, 1, 0, '2026-01-01 00:00:00', 'site settings')"
        )
        db.exec_driver_sql(
            "insert into portal_profile_changes (profile, revision, action, author, at, after) "
            "values ('pytorch', 1, 'seed', 'site settings', '2026-01-01 00:00:00', "
            """'{"display_name": "PyTorch", "max_gpus": 4, "max_nodes": 1}')"""
        )
    store = ProfileStore(default_url(tmp_path))
    store.upgrade()
    profile = store.get("pytorch")
    assert (profile.image, profile.user_images, profile.revision) == ("", False, 1)
    # a revision stored before the fields existed meant no image
    assert store.revision("pytorch", 1)["image"] == ""
    assert store.latest_image_checks() == {}
    store.update(dataclasses.replace(profile, image="pytorch"), 1, "carol")
    assert store.history("pytorch")[0]["changes"] == {"image": ("", "pytorch")}
    assert store.get("pytorch").image == "pytorch"
    downgrade(store, "0004")  # and back down, and up again
    store.upgrade()
    assert store.get("pytorch").image == ""  # the column went with the downgrade


def downgrade(store, revision):
    from alembic import command
    from alembic.config import Config

    from portal.store import MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def test_image_checks_are_kept_and_the_latest_per_image_and_framework_is_found(store):
    first = store.record_image_check("pytorch", "pytorch", "1:2", False, "image x: no torch",
                                     ["ok python3 3.11", "FAIL torch: no"], "carol")  # fmt: skip
    assert (
        first["ok"] is False
        and first["checked_by"] == "carol"
        and first["lines"][1] == ("FAIL torch: no")
    )
    store.record_image_check("pytorch", "pytorch", "1:2", True, "works", ["done"], "portal service")
    store.record_image_check("pytorch", "", "1:2", True, "works", [], "carol")
    store.record_image_check("tf", "tensorflow", "3:4", False, "fails", [], "portal service")
    latest = store.latest_image_checks()
    assert sorted(latest) == [("pytorch", ""), ("pytorch", "pytorch"), ("tf", "tensorflow")]
    assert latest[("pytorch", "pytorch")]["ok"] is True
    assert latest[("pytorch", "pytorch")]["checked_by"] == "portal service"
    history = store.image_checks("pytorch")
    assert [(c["framework"], c["ok"]) for c in history] == [
        ("", True), ("pytorch", True), ("pytorch", False),
    ]  # fmt: skip
    assert len(store.image_checks()) == 4 and len(store.image_checks(limit=1)) == 1


def statements(store):
    """The SQL statements ``store``'s engine runs from here on (a list)."""
    from sqlalchemy import event

    seen = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    return seen


def job(job_id, user):
    return dict(job_id=job_id, user=user, notebook="a.ipynb", profile="pytorch", gpus=1,
                nodes=1, hours=1, kernel="python3", submitted_by=user)  # fmt: skip


def test_reads_are_kept_until_the_database_changes_in_this_process_or_another(tmp_path):
    hub = ProfileStore(default_url(tmp_path))
    hub.upgrade()
    hub.seed(SEED)
    service = ProfileStore(default_url(tmp_path))  # another process's store, same file
    hub.record_notebook_job(**job("7", "alice"))
    first = (hub.profiles(), hub.latest_image_checks(), hub.notebook_jobs(user="alice"))
    sql = statements(hub)
    again = (hub.profiles(), hub.latest_image_checks(), hub.notebook_jobs(user="alice"))
    assert again == first and sql == []  # nothing changed: no table read
    again[2][0]["notebook"] = "mine.ipynb"  # a caller's change stays its own
    assert hub.notebook_jobs(user="alice")[0]["notebook"] == "a.ipynb"
    # another process's edit is seen at the next read
    service.update(dataclasses.replace(service.get("mxnet"), max_gpus=1), 1, "carol")
    assert [p.max_gpus for p in hub.profiles() if p.name == "mxnet"] == [1]
    service.record_image_check("img", "pytorch", "1:2", True, "works", [], "carol")
    assert list(hub.latest_image_checks()) == [("img", "pytorch")]
    # and this process's own write too
    hub.record_notebook_job(**job("8", "alice"))
    assert [j["id"] for j in hub.notebook_jobs(user="alice")] == ["8", "7"]
    hub.profiles()
    assert sql  # those read the tables, once
    sql.clear()
    hub.profiles(), hub.notebook_jobs(user="alice")
    assert sql == []


def test_a_notebook_job_keeps_the_site_choices_it_ran_with(tmp_path):
    """Schema 0011's jobs gain the site's choices as Slurm's defaults (""), the
    new ones keep theirs, and a rerun asks again for the same."""
    from portal.core.slice import Slice
    from portal.notebookjobs import recorded_choices, rerun_choices

    old = ProfileStore(default_url(tmp_path))
    old.upgrade("0011")
    with old.engine.begin() as db:
        db.exec_driver_sql(
            "insert into portal_notebook_jobs (job_id, user, notebook, profile, gpus, nodes, "
            "hours, parameters, sweep, tasks, kernel, submitted_at, submitted_by) values "
            "('5', 'bob', 'a.ipynb', 'pytorch', 1, 1, 1, '{}', '{}', '[{}]', 'python3', "
            "'2026-01-01 00:00:00', 'bob')"
        )
    store = ProfileStore(default_url(tmp_path))
    store.upgrade()
    before = store.notebook_job("5")
    assert (before["partition"], before["gpu_type"], before["account"], before["cores"]) == (
        "", "", "", 0,
    )  # fmt: skip
    assert rerun_choices(before) == {}  # the profile's partition, the user's default account
    typed = Slice(2, 16, 96, 4, "sxm2", gpu_type="v100-sxm2", account="lab-vision",
                  qos="vision", reservation="course")  # fmt: skip
    store.record_notebook_job(**job("6", "alice"), **recorded_choices(typed))
    kept = store.notebook_job("6")
    assert {k: kept[k] for k in ("partition", "gpu_type", "account", "qos", "reservation")} == {
        "partition": "sxm2", "gpu_type": "v100-sxm2", "account": "lab-vision", "qos": "vision",
        "reservation": "course",
    }  # fmt: skip
    assert kept["feature"] == "" and (kept["cores"], kept["mem_gb"]) == (0, 0)
    assert rerun_choices(kept) == {
        "partition": "sxm2", "gpu_type": "v100-sxm2", "account": "lab-vision", "qos": "vision",
        "reservation": "course",
    }  # fmt: skip
    cpu = Slice(0, 4, 16, 1, "cpu", account="lab-nlp")
    store.record_notebook_job(**{**job("7", "carol"), "gpus": 0}, **recorded_choices(cpu))
    assert rerun_choices(store.notebook_job("7")) == {
        "partition": "cpu", "account": "lab-nlp", "cores": 4, "mem_gb": 16,
    }  # fmt: skip
    downgrade(store, "0011")  # and back down, and up again
    store.upgrade()
    assert store.notebook_job("6")["gpu_type"] == ""  # the column went with the downgrade
