"""The portal's two databases: which URLs they take and how they are opened.

``[hub] db_url`` is JupyterHub's own database; ``[portal] db_url`` is the
profile store's (``portal.store``). Each is SQLite
(``sqlite:////var/lib/portal/hub/jupyterhub.sqlite``) or PostgreSQL, written
as a site writes it: ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE``, with
libpq's parameters in the query if needed (``?sslmode=verify-full``).

PostgreSQL is opened with psycopg 3 (``psycopg[binary]``, which
deploy/requirements-hub.txt and the package's ``postgresql`` extra install),
named in the URL given to SQLAlchemy (``postgresql+psycopg``): SQLAlchemy's
own default for ``postgresql://`` is psycopg2 before 2.1, psycopg 3 since.

Decided here once, for the hub and the store:
- ``database_url``: the URLs taken; any other is refused with the fix;
- ``connect_args``: a connect that gives up after ``CONNECT_TIMEOUT`` and
  TCP keepalives, so that a server that is gone costs the hub's event loop
  seconds, never minutes;
- ``masked``: a URL as messages and log lines show it (no password);
- ``SecretURL``: the URL as the hub's configuration holds it, whose repr
  (a dump of the configuration) is masked;
- ``check_connection``: one connection at start, refused with the server's
  answer and the setting to check.
"""

import re

POSTGRESQL = "postgresql+psycopg"
CONNECT_TIMEOUT = 10  # seconds to reach the server and log in
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
              "keepalives_count": 3}  # fmt: skip
EXAMPLES = (
    '"sqlite:////var/lib/portal/hub/jupyterhub.sqlite" or '
    '"postgresql://USER:PASSWORD@HOST:PORT/DATABASE"'
)
# What SQLAlchemy takes for the password (make_url): after the scheme and the
# user name, up to the first "@"; and libpq's password parameter.
_PASSWORD = re.compile(r"^([\w+.-]+://[^:/]*:)[^@]*@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&]*")


class DatabaseError(ValueError):
    """A database setting that cannot be used; the message names the
    setting, shows the URL masked and says what to do."""


class SecretURL(str):
    """A database URL: itself to JupyterHub and the driver, masked in its
    repr (what a dump of the hub's configuration or a debug line shows)."""

    def __repr__(self):
        return repr(masked(str(self)))


def masked(url):
    """``url`` (text or SQLAlchemy URL) with its password shown as ***.

    >>> masked("postgresql://portal:s3cr/t@db.example.org/jupyterhub")
    'postgresql://portal:***@db.example.org/jupyterhub'
    >>> masked("postgresql://portal@db/hub?sslmode=require&password=x")
    'postgresql://portal@db/hub?sslmode=require&password=***'
    """
    if not isinstance(url, str):
        url = url.render_as_string(hide_password=False)
    return _QUERY_PASSWORD.sub(r"\1***", _PASSWORD.sub(r"\1***@", url))


def database_url(url, setting):
    """``url`` as the SQLAlchemy URL the portal opens: SQLite as it is,
    PostgreSQL with psycopg 3 named. DatabaseError for any other, naming
    ``setting`` and the fix.

    >>> database_url("postgresql://portal:pw@db:5432/hub", "[hub] db_url").drivername
    'postgresql+psycopg'
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    def refuse(why):
        return DatabaseError(f"{setting} = {masked(url)!r}: {why}")

    if not isinstance(url, str) or "://" not in url:
        raise refuse(f"not a database URL; write {EXAMPLES}")
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as e:
        # its message would repeat the URL with its password
        reason = "its port is not a number" if "int()" in str(e) else f"write {EXAMPLES}"
        raise refuse(f"not a database URL: {reason}") from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite" and driver in ("", "pysqlite"):
        return parsed
    if backend == "postgres":
        raise refuse('write "postgresql://" ("postgres://" is not a scheme SQLAlchemy knows)')
    if backend != "postgresql":
        raise refuse(f"the portal keeps its databases in SQLite or PostgreSQL; write {EXAMPLES}")
    if driver not in ("", "psycopg"):
        raise refuse(
            f'the portal opens PostgreSQL with psycopg 3, not {driver}: write "postgresql://" '
            f'without "+{driver}"'
        )
    if not parsed.database:
        raise refuse('name the database: "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"')
    return parsed.set(drivername=POSTGRESQL)


def is_postgresql(url):
    return url.get_backend_name() == "postgresql"


def connect_args(url, application):
    """The driver's connect arguments for ``url`` (a ``database_url``):
    for PostgreSQL a bounded connect, keepalives and ``application_name``
    (what ``pg_stat_activity`` shows), each unless the URL's query sets it."""
    if not is_postgresql(url):
        return {}
    wanted = {"connect_timeout": CONNECT_TIMEOUT, **KEEPALIVES, "application_name": application}
    return {k: v for k, v in wanted.items() if k not in url.query}


def create_engine(url, setting, **kwargs):
    """SQLAlchemy's engine of ``url`` (a ``database_url``); DatabaseError
    naming ``setting`` and the fix when its driver is not installed."""
    import sqlalchemy
    from sqlalchemy.exc import NoSuchModuleError

    try:
        return sqlalchemy.create_engine(url, **kwargs)
    except (ImportError, NoSuchModuleError):
        raise DatabaseError(
            f"{setting} = {masked(url)!r}: its driver ({url.drivername}) is not installed in "
            f"this environment: pip install 'dsportal[postgresql]'"
        ) from None


def check_connection(url, setting, application):
    """Connect once to ``url`` (a ``database_url``) and close; DatabaseError
    with the server's or the driver's answer, the URL masked and ``setting``
    named, when that fails."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.pool import NullPool

    args = connect_args(url, application)
    engine = create_engine(url, setting, poolclass=NullPool, connect_args=args)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except DBAPIError as e:
        raise DatabaseError(connection_failed(url, setting, e)) from None
    finally:
        engine.dispose()


def connection_failed(url, setting, error):
    """The message of a connection to ``url`` that failed with ``error`` (a
    DBAPIError): the driver's first lines, never the password."""
    reason = " ".join(str(getattr(error, "orig", None) or error).split())
    if url.password:
        reason = reason.replace(url.password, "***")
    return (
        f"{setting}: cannot connect to {masked(url)} ({reason[:400]}). Check that the server "
        "runs and takes connections from this host, and the user, password and database in "
        f"{setting}"
    )
