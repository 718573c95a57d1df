"""The lines of /etc/nsswitch.conf the portal adds, and purge takes away:
``ldap`` for passwd and group (nslcd, deploy/ldap.sh), ``myhostname`` for
hosts (``*.localhost`` is loopback for this host's programs, deploy/hub.sh).
Pure text functions, and one writer that keeps the file's mode."""

import os
import re
from pathlib import Path

NSSWITCH = Path("/etc/nsswitch.conf")


def has(line, module):
    return re.search(rf"\s{module}(\s|$)", line) is not None


def with_ldap(text):
    """``text`` with ``ldap`` ending its passwd: and group: lines (once),
    and the databases that lacked it."""
    missing = [
        db
        for db in ("passwd", "group")
        if not any(line.startswith(f"{db}:") and has(line, "ldap") for line in text.splitlines())
    ]
    lines = [
        line.rstrip(" \t") + " ldap"
        if re.match(r"(passwd|group):", line) and not has(line, "ldap")
        else line
        for line in text.split("\n")
    ]
    return ("\n".join(lines) if missing else text), missing


def with_myhostname(text):
    """``text`` with ``myhostname`` after ``files`` on its hosts: line (once)."""
    if any(line.startswith("hosts:") and has(line, "myhostname") for line in text.splitlines()):
        return text
    return re.sub(r"^(hosts:\s+files)", r"\1 myhostname", text, flags=re.M)


def without(text, dbs, module):
    """``text`` with ``module`` taken off the lines of the databases ``dbs``."""
    lines = [
        re.sub(rf"\s+{module}\b", "", line, count=1) if line.split(":", 1)[0] in dbs else line
        for line in text.split("\n")
    ]
    return "\n".join(lines)


def update(change, path=NSSWITCH):
    """Apply ``change`` (text to text) to the file, keeping its mode; True
    when it changed."""
    if not path.is_file():
        return False
    old = path.read_text()
    new = change(old)
    if new == old:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(new)
    os.chmod(tmp, path.stat().st_mode & 0o7777)
    os.replace(tmp, path)
    return True
