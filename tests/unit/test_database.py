"""The databases' URLs (portal.database): the ones taken, the refusals with
their fix, the password kept out of messages and the hub's configuration
dump, and a server that does not answer (a real socket, the real driver).
A real PostgreSQL: tests/integration/test_postgresql.py."""

import socket
import sys
import time

import pytest
from sqlalchemy.engine import make_url
from traitlets.config import Config

from portal import database, settings
from portal.core.profiles import MAX_REVISION, ProfileError, profile_from_dict
from portal.database import DatabaseError, database_url, masked
from portal.store import ProfileStore

PASSWORD = "pa:ss/w?rd"  # what make_url reads up to the "@"


@pytest.mark.parametrize(
    "url, driver, database_name",
    [
        ("sqlite:////var/lib/portal/hub/hub.sqlite", "sqlite", "/var/lib/portal/hub/hub.sqlite"),
        ("sqlite:///relative.sqlite", "sqlite", "relative.sqlite"),
        ("postgresql://portal:pw@db.example.org/jupyterhub", "postgresql+psycopg", "jupyterhub"),
        ("postgresql+psycopg://portal:pw@db:6432/portal", "postgresql+psycopg", "portal"),
        ("postgresql:///portal?host=/run/postgresql", "postgresql+psycopg", "portal"),
    ],
)  # fmt: skip
def test_sqlite_and_postgresql_urls_are_taken_postgresql_with_psycopg3(url, driver, database_name):
    parsed = database_url(url, "[hub] db_url")
    assert (parsed.drivername, parsed.database) == (driver, database_name)


@pytest.mark.parametrize(
    "url, fix",
    [
        (f"postgres://portal:{PASSWORD}@db/hub", 'write "postgresql://"'),
        (f"postgresql+psycopg2://portal:{PASSWORD}@db/hub", 'without "+psycopg2"'),
        (f"postgresql+asyncpg://portal:{PASSWORD}@db/hub", "psycopg 3, not asyncpg"),
        (f"mysql://portal:{PASSWORD}@db/hub", "SQLite or PostgreSQL"),
        (f"postgresql://portal:{PASSWORD}@db:5432x/hub", "its port is not a number"),
        (f"postgresql://portal:{PASSWORD}@db", "name the database"),
        (f"postgresql://portal:{PASSWORD}@db/", "name the database"),
        ("db.example.org/jupyterhub", "not a database URL"),
        ("", "not a database URL"),
    ],
)
def test_other_urls_are_refused_with_the_fix_and_no_password(url, fix):
    with pytest.raises(DatabaseError) as e:
        database_url(url, "[portal] db_url")
    assert str(e.value).startswith("[portal] db_url = ")
    assert fix in str(e.value)
    assert PASSWORD not in str(e.value) and "pa:ss" not in str(e.value)


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://portal:{PASSWORD}@db.example.org:5432/jupyterhub",
        "postgresql://portal:p%40ss%2Fword@db/jupyterhub",
        "postgresql+psycopg://a@b:secret-one@host/db",
        "postgresql://portal@db/hub?sslmode=require&password=secret-two",
    ],
)
def test_masked_hides_the_password_sqlalchemy_reads(url):
    parsed = make_url(url)
    password = parsed.password or parsed.query.get("password")
    assert password and password not in masked(url)
    assert password not in masked(parsed)
    assert password not in masked(database_url(url, "[hub] db_url"))
    assert "***" in masked(url)


def test_urls_without_a_password_are_shown_as_they_are():
    for url in ("sqlite:////var/lib/x.sqlite", "postgresql://portal@db:5432/hub"):
        assert masked(url) == url


def test_the_connect_is_bounded_and_a_urls_own_parameters_win():
    url = database_url("postgresql://portal:pw@db/hub?connect_timeout=30", "[hub] db_url")
    args = database.connect_args(url, "jupyterhub")
    assert "connect_timeout" not in args  # the URL's 30 s
    assert args["application_name"] == "jupyterhub" and args["keepalives_idle"] == 30
    plain = database_url("postgresql://portal:pw@db/hub", "[hub] db_url")
    assert database.connect_args(plain, "x")["connect_timeout"] == database.CONNECT_TIMEOUT
    assert database.connect_args(database_url("sqlite:///x.sqlite", "x"), "x") == {}


def hub_config(tmp_path, monkeypatch, db_url):
    from spawners.hub_config import configure_hub

    site = tmp_path / "portal.toml"
    site.write_text(f'[hub]\ndb_url = "{db_url}"\n')
    monkeypatch.setenv("PORTAL_CONFIG", str(site))
    c = Config()
    configure_hub(c, settings.load())
    return c


def test_the_hub_opens_postgresql_with_psycopg3_and_its_config_dump_hides_the_password(
    tmp_path, monkeypatch
):
    c = hub_config(tmp_path, monkeypatch, "postgresql://portal:s3cret-pw@db.example.org/hub")
    assert c.JupyterHub.db_url == "postgresql+psycopg://portal:s3cret-pw@db.example.org/hub"
    connect = c.JupyterHub.db_kwargs["connect_args"]
    assert connect["connect_timeout"] == database.CONNECT_TIMEOUT
    assert connect["application_name"] == "jupyterhub"
    # what traitlets logs of a bad configuration ("Config at the time: ...")
    assert "s3cret-pw" not in repr(c) and "s3cret-pw" not in str(c)
    assert "portal:***@db.example.org" in repr(c)


def test_the_hubs_sqlite_keeps_jupyterhubs_own_connect_arguments(tmp_path, monkeypatch):
    c = hub_config(tmp_path, monkeypatch, f"sqlite:///{tmp_path}/jupyterhub.sqlite")
    assert c.JupyterHub.db_url == f"sqlite:///{tmp_path}/jupyterhub.sqlite"
    assert "db_kwargs" not in c.JupyterHub  # JupyterHub's check_same_thread=False stays


def test_a_wrong_hub_url_stops_the_configuration(tmp_path, monkeypatch):
    with pytest.raises(DatabaseError, match=r'\[hub\] db_url = .*write "postgresql://"'):
        hub_config(tmp_path, monkeypatch, "postgres://portal:pw@db/hub")


@pytest.fixture
def silent_server():
    """A port that takes connections and never answers (a server that hangs)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


@pytest.fixture
def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_does_not_answer_is_given_up_after_the_connect_timeout(
    silent_server, monkeypatch
):
    monkeypatch.setattr(database, "CONNECT_TIMEOUT", 2)  # libpq's least
    store = ProfileStore(f"postgresql://portal:{PASSWORD}@127.0.0.1:{silent_server}/portal")
    start = time.monotonic()
    with pytest.raises(DatabaseError) as e:
        store.upgrade()
    assert time.monotonic() - start < 8
    assert str(e.value).startswith("[portal] db_url: cannot connect to postgresql+psycopg://")
    assert "timeout" in str(e.value).lower() and PASSWORD not in str(e.value)


def test_a_closed_port_is_said_at_once_with_the_setting_to_check(
    closed_port, tmp_path, monkeypatch
):
    from spawners.hub_config import check_database

    url = f"postgresql://portal:{PASSWORD}@127.0.0.1:{closed_port}/jupyterhub"
    site = tmp_path / "portal.toml"
    site.write_text(f'[hub]\ndb_url = "{url}"\n')
    monkeypatch.setenv("PORTAL_CONFIG", str(site))
    with pytest.raises(DatabaseError) as e:
        check_database(settings.load())
    message = str(e.value)
    assert message.startswith("[hub] db_url: cannot connect to postgresql+psycopg://portal:***@")
    assert "Connection refused" in message and "[hub] db_url" in message.split(")")[-1]
    assert PASSWORD not in message


def test_a_revision_fits_postgresqls_integer():
    assert MAX_REVISION == 2**31 - 1
    base = {"name": "p", "display_name": "P", "environment": "pytorch", "partition": "gpu"}
    with pytest.raises(ProfileError, match="revision"):
        profile_from_dict({**base, "revision": 2**31})


def test_a_missing_driver_is_named_with_the_package_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg fails
    with pytest.raises(DatabaseError, match=r"\(postgresql\+psycopg\) is not installed.*"
                       r"pip install 'dsportal\[postgresql\]'"):  # fmt: skip
        ProfileStore(f"postgresql://portal:{PASSWORD}@127.0.0.1/portal")
