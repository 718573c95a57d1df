"""PostgreSQL for the hub's database and the profile store, on a real
PostgreSQL 15 of the module's own (tests/support/postgres.py: a cluster in a
temporary folder, stopped and removed at the end).

The store: its migrations from nothing and from the first schema with rows,
its unit tests of a seeded store again on PostgreSQL, the tables the unit
tests do not reach, migrations by several processes at once, a connection
the server dropped. The hub: a hub of its own with [hub] db_url and
[portal] db_url both on PostgreSQL, written as a site writes them; a login
and the admin service's profile page work, their rows are in PostgreSQL, and
the password is in no process's command line or environment and in no line
of the hub's log (at debug level). A wrong password stops that hub at start
with the server's answer and the setting to check.
"""

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from portal.core.profiles import MAX_REVISION
from portal.presets import PresetError
from portal.store import NotFound, ProfileStore
from tests.support import REPO
from tests.support.hubclient import HubClient, Portal
from tests.support.hubsettings import PYTORCH_PROFILE, fresh_state, hub_settings, public_url
from tests.support.postgres import Cluster
from tests.support.testhub import PORT as TEST_PORT
from tests.support.testhub import deploy

# The unit tests' seed and downgrade, and their tests of a seeded store, run
# again here on PostgreSQL (their ``store`` fixture is this module's).
from tests.unit.test_profile_store import (  # noqa: F401
    SEED,
    downgrade,
    test_a_profiles_image_fields_round_trip_through_the_store,
    test_an_edit_of_the_settings_after_the_first_start_is_named,
    test_an_unchanged_save_makes_no_revision,
    test_create_delete_recreate_goes_on_with_revisions,
    test_image_checks_are_kept_and_the_latest_per_image_and_framework_is_found,
    test_seed_in_order_then_only_names_never_held,
    test_update_history_and_conflict,
)

PORT = TEST_PORT + 40  # PORT+1, +2, +81: its proxy's API, its service, its API
STATE = Path(f"/var/lib/portal/test-postgresql-hub-{PORT}")
SETTINGS_FILE = Path(f"/var/lib/portal/test-postgresql-settings-{PORT}.toml")
HUB_LOG = STATE / "jupyterhub.log"
JOB_NAME = f"portal-test-postgresql-{PORT}"
ROLE = "portal"
# what a password may hold: an @, a slash and a colon are escaped in the URL
SECRET = secrets.token_hex(12)
PASSWORD = f"pw{SECRET}@/:"


@pytest.fixture(scope="module")
def postgres():
    cluster = Cluster().start()
    try:
        cluster.add_role(ROLE, PASSWORD)
        for name in ("jupyterhub", "portal"):
            cluster.add_database(name, ROLE)
        yield cluster
    finally:
        cluster.stop()


def query(postgres, database, sql):
    """Rows of ``sql`` in ``database``, as the portal's role over TCP."""
    with psycopg.connect(host="127.0.0.1", port=postgres.port, user=ROLE, password=PASSWORD,
                         dbname=database, connect_timeout=10) as db:  # fmt: skip
        return db.execute(sql).fetchall()


@pytest.fixture
def scratch(postgres, request):
    """The URL of a new database of the portal's role, dropped at the end."""
    name = "store_" + request.node.name.lower()[:40].replace("[", "_").replace("]", "")
    postgres.add_database(name, ROLE)
    yield postgres.url(ROLE, PASSWORD, name)
    postgres.drop_database(name)


@pytest.fixture
def store(scratch):
    """A migrated store on PostgreSQL, seeded as the unit tests' is."""
    s = ProfileStore(scratch)
    s.upgrade()
    s.seed(SEED)
    yield s
    s.engine.dispose()


def test_the_tables_the_unit_tests_do_not_reach_round_trip(store):
    extension = store.record_extension("carol", "alice", 812, "pytorch", 60, 180)
    assert extension["to_limit"] == "03:00:00" and store.extension_count() == 1
    assert store.extensions(user="alice")[0]["job_id"] == "812"
    store.record_session_job(812, "alice", "pytorch", 2, 1)
    store.record_session_job(812, "alice", "pytorch", 2, 1)  # merged, not a second row
    assert store.record_gpu_sample(812, 1, 40.0) and store.record_gpu_sample(812, 2, 60.0)
    assert not store.record_gpu_sample(999, 1, 1.0)
    store.record_idle_cull(812, 1800)
    [use] = store.session_gpu_use(user="alice")
    assert (use["gpu_samples"], use["gpu_busy"], use["gpus_used"]) == (2, 50.0, 2)
    job = store.record_notebook_job(
        job_id="813", user="alice", notebook="études/train.ipynb", profile="pytorch", gpus=1,
        nodes=1, hours=2, parameters={"lr": 0.1, "name": "ü\u0000"}, sweep={"lr": [0.1, 1]},
        tasks=[{"lr": 0.1}, {"lr": 1}], kernel="python3", submitted_by="alice", notify=True,
    )  # fmt: skip
    assert store.notebook_job("813") == job and job["parameters"]["name"] == "ü\u0000"
    assert store.job_profiles(["812", "813_1", "9"]) == {
        "812": ("pytorch", 1800), "813_1": ("pytorch", 0),
    }  # fmt: skip
    # the hub and the service count refusals in the same row
    other = ProfileStore(store.url.render_as_string(hide_password=False))
    for s in (store, other, store):
        s.count_refusal("too_many_gpus", 2)
    assert other.refusal_counts() == {"too_many_gpus": 6}
    other.engine.dispose()
    # the largest revision a form or the API may name is an INTEGER
    with pytest.raises(NotFound):
        store.revision("pytorch", MAX_REVISION)
    # saved presets: a user's, then the published ones; a name once per owner
    mine = store.save_preset("alice", "ResNet 4×V100 12 h", {"gpus": "4"}, "train", "alice")
    store.save_preset("", "Course", {"hours": 2}, "", "carol")
    assert [p["name"] for p in store.presets("alice")] == ["ResNet 4×V100 12 h", "Course"]
    with pytest.raises(PresetError):
        store.save_preset("alice", "ResNet 4×V100 12 h", {}, "", "alice")
    store.delete_preset(mine["id"], "alice")
    assert [p["name"] for p in store.presets("alice")] == ["Course"]


def test_a_store_of_the_first_schema_with_rows_is_migrated_down_and_up(scratch):
    old = ProfileStore(scratch)
    old.upgrade("0001")
    with old.engine.begin() as db:
        db.exec_driver_sql(
            "insert into portal_profiles values ('old', 'Old', '', 'pytorch', 'gpu', 4, 8, 48, "
            "8, 24, '[]', true, 1, 0, '2026-01-01 00:00:00', 'site settings')"
        )
        db.exec_driver_sql(
            "insert into portal_profile_changes (profile, revision, action, author, at, after) "
            "values ('old', 1, 'seed', 'site settings', '2026-01-01 00:00:00', "
            """'{"display_name": "Old", "max_gpus": 4}')"""
        )
    old.engine.dispose()
    store = ProfileStore(scratch)
    store.upgrade()
    profile = store.get("old")
    assert (profile.max_nodes, profile.image, profile.user_images, profile.max_array) == (
        1, "", False, 16,
    )  # fmt: skip
    assert store.revision("old", 1)["max_nodes"] == 1
    downgrade(store, "base")  # every migration's downgrade, then up again
    store.upgrade()
    assert store.profiles() == []


def test_processes_that_migrate_at_once_take_turns(scratch):
    """The hub and its service migrate the store as each starts."""
    code = (
        "import sys, time; from portal.store import ProfileStore; s = ProfileStore(sys.argv[1]); "
        "time.sleep(max(0, float(sys.argv[2]) - time.time())); s.upgrade()"
    )
    at = str(time.time() + 5)  # each has imported by then: the three begin together
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", code, scratch, at],
            cwd=REPO,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    errors = [run.communicate(timeout=120)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], errors
    store = ProfileStore(scratch)
    assert store.profiles() == [] and store.seed(SEED) == ["pytorch", "mxnet"]


def test_a_connection_the_server_dropped_is_replaced_and_statements_are_bounded(store, postgres):
    assert store.profiles()
    with store.engine.connect() as db:
        assert db.exec_driver_sql("SHOW statement_timeout").scalar() == "15s"
    ended = postgres.sql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'portal' AND usename = 'portal'"
    )
    assert int(ended) >= 1
    assert [p.name for p in store.profiles()] == ["pytorch", "mxnet"]


# -- a hub on PostgreSQL --------------------------------------------------------


def settings_text(postgres, password=PASSWORD):
    text = hub_settings(PORT, STATE, JOB_NAME)
    text = text.replace(f'db_url = "sqlite:///{STATE}/jupyterhub.sqlite"\n', "")
    text = text.replace(
        "[hub]\n", f'[hub]\ndb_url = "{postgres.url(ROLE, password, "jupyterhub")}"\n'
    )
    text = text.replace(
        "[portal]\n", f'[portal]\ndb_url = "{postgres.url(ROLE, password, "portal")}"\n'
    )
    return text + PYTORCH_PROFILE


def hub_env(postgres, password=PASSWORD):
    """The environment of deploy/hub.sh with the hub's settings, which hold
    the password: root's and the hub account's group's to read."""
    SETTINGS_FILE.write_text(settings_text(postgres, password))
    os.chown(SETTINGS_FILE, 0, int(subprocess.check_output(["id", "-g", "portal"])))
    SETTINGS_FILE.chmod(0o640)
    return {**os.environ, "PORTAL_CONFIG": str(SETTINGS_FILE)}


def hub_log():
    return HUB_LOG.read_text(errors="replace") if HUB_LOG.exists() else ""


@pytest.fixture(scope="module")
def pg_hub(cluster, postgres):
    """A hub of its own on PostgreSQL, at debug level (what is logged of its
    databases); stopped at the end."""
    env = hub_env(postgres)
    deploy("hub.sh", "stop", env=env)
    if STATE.is_dir():
        fresh_state(STATE)
    result = deploy("hub.sh", "start", "--debug", env=env, check=False)
    assert result.returncode == 0, result.stderr
    yield public_url(PORT)
    deploy("hub.sh", "stop", env=env)
    SETTINGS_FILE.unlink(missing_ok=True)


def test_a_wrong_password_stops_the_hub_at_start_with_the_servers_answer(cluster, postgres):
    env = hub_env(postgres, password="not-the-password-" + SECRET)
    deploy("hub.sh", "stop", env=env)
    try:
        result = deploy("hub.sh", "start", env=env, check=False)
    finally:
        deploy("hub.sh", "stop", env=env)
        SETTINGS_FILE.unlink(missing_ok=True)
    said = result.stderr + result.stdout
    assert result.returncode != 0
    assert "[hub] db_url: cannot connect to postgresql+psycopg://portal:***@127.0.0.1:" in said
    assert 'password authentication failed for user "portal"' in said
    assert SECRET not in said and SECRET not in hub_log()


def test_a_login_and_the_admin_services_profiles_work_on_postgresql(pg_hub, postgres, accounts):
    alice = HubClient(pg_hub)
    assert alice.login("alice", accounts["alice"]["password"]).status_code == 302
    carol = HubClient(pg_hub)
    assert carol.login("carol", accounts["carol"]["password"]).status_code == 302
    service = Portal(carol)
    page = service.get("profiles")
    assert page.status_code == 200 and "PyTorch" in page.text
    r = service.put("pytorch", max_gpus=2, revision=1)
    assert r.status_code == 200, r.text
    assert service.get("profiles/pytorch/history").status_code == 200
    # the rows are PostgreSQL's, and no SQLite file was made instead
    users = {name for (name,) in query(postgres, "jupyterhub", "SELECT name FROM users")}
    assert {"alice", "carol"} <= users
    pytorch = "SELECT max_gpus, revision FROM portal_profiles WHERE name = 'pytorch'"
    assert query(postgres, "portal", pytorch) == [(2, 2)]
    # the hub's connections and the store's (the hub's, the service's) say whose they are
    names = postgres.sql("SELECT DISTINCT application_name FROM pg_stat_activity "
                         "WHERE usename = 'portal'").split()  # fmt: skip
    assert {"jupyterhub", "portal"} <= set(names)
    assert not list(STATE.glob("*.sqlite*"))


def test_the_password_is_in_no_command_line_environment_or_log_line(pg_hub):
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        for name in ("cmdline", "environ"):
            try:
                content = (proc / name).read_bytes()
            except OSError:  # gone, or a kernel thread
                continue
            assert SECRET.encode() not in content, f"pid {proc.name}'s {name}"
    log = hub_log()
    assert "Connecting to db: postgresql+psycopg://portal:[redacted]@127.0.0.1:" in log
    assert SECRET not in log
