"""A PostgreSQL server of a test's own: a cluster in a temporary folder, run
as the ``postgres`` account with Debian's initdb and pg_ctl (the package
postgresql-15, deploy/packages.sh), on a spare loopback port. No system
service, no cluster of Debian's: it is removed when it stops.

Its superuser connects on the cluster's own Unix socket alone, in a folder
only ``postgres`` (and root) may enter; every other role logs in over TCP
with a password (scram-sha-256). SQL is sent on psql's standard input, so a
password never appears in a command line.
"""

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

BIN = Path("/usr/lib/postgresql/15/bin")
ACCOUNT = "postgres"


def spare_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self):
        assert (BIN / "initdb").is_file(), (
            f"no {BIN}/initdb: deploy/packages.sh installs postgresql-15"
        )
        self.folder = Path(tempfile.mkdtemp(prefix="portal-postgresql-"))
        shutil.chown(self.folder, ACCOUNT, ACCOUNT)
        self.folder.chmod(0o700)
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.port = spare_port()

    def run(self, *argv, stdin=None):
        """``argv`` as the postgres account; its output (CalledProcessError with its stderr)."""
        result = subprocess.run(
            ["runuser", "-u", ACCOUNT, "--", *map(str, argv)],
            input=stdin, capture_output=True, text=True, cwd=self.folder, timeout=120,
        )  # fmt: skip
        if result.returncode:
            raise AssertionError(f"{argv[0]} failed ({result.returncode}): {result.stderr}")
        return result.stdout

    def start(self):
        self.run(BIN / "initdb", "-D", self.data, "-U", ACCOUNT, "-E", "UTF8", "--locale=C.UTF-8",
                 "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync")  # fmt: skip
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off"
        self.run(BIN / "pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w", "-t", "60",
                 "start")  # fmt: skip
        return self

    def stop(self):
        try:
            if (self.data / "postmaster.pid").exists():
                self.run(BIN / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def sql(self, text, database="postgres"):
        """Run ``text`` as the superuser; psql's unaligned output."""
        return self.run(
            BIN / "psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
            "-h", self.folder, "-p", self.port, "-d", database, stdin=text,
        )  # fmt: skip

    def add_role(self, name, password):
        quoted = password.replace("'", "''")
        self.sql(f"CREATE ROLE {name} LOGIN PASSWORD '{quoted}';\n")

    def add_database(self, name, owner):
        self.sql(f"CREATE DATABASE {name} OWNER {owner};\n")

    def drop_database(self, name):
        self.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE);\n")

    def url(self, user, password, database):
        """The URL a site writes in [hub] or [portal] db_url."""
        return f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:{self.port}/{database}"
