"""Writes of the portal's own files, as root: replaced whole and atomically,
only when their content changed, with their owner and mode.

Root never follows a link it did not make: temporary files are created
with ``O_EXCL``, owners and modes set through the descriptor.
"""

import grp
import os
import pwd
import subprocess
import sys
from pathlib import Path
from string import Template

TEMPLATES = Path(__file__).resolve().parent / "templates"


class SetupError(Exception):
    """A step that cannot go on; the message says why, and what to do."""


def say(message):
    """One line of what setup changed, or why it stops: ``[portal] message``."""
    print(f"[portal] {message}", file=sys.stderr, flush=True)


def render(template, **values):
    """The file ``portal/setup/templates/TEMPLATE`` with ``$values`` substituted."""
    return Template((TEMPLATES / template).read_text()).substitute(values)


def write_if_changed(path, text, mode, owner="root", group="root"):
    """Write ``text`` to ``path`` (through ``path.tmp``, with ``mode`` and the
    owner) when its content differs; mode and owner are set either way.
    True when it wrote."""
    path = Path(path)
    uid, gid = pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    wrote = not path.is_file() or path.is_symlink() or path.read_text() != text
    if wrote:
        replace_file(path, text, mode, uid, gid)
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, mode)
    return wrote


def replace_file(path, text, mode=0o600, uid=0, gid=0):
    """``path`` replaced whole (through ``path.tmp``) by a file holding
    ``text`` (str or bytes), its owner's alone until its owner and ``mode``
    are set."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    data = text.encode() if isinstance(text, str) else text
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(data)
        # by the descriptor: a link put at tmp meanwhile changes nothing else
        os.fchown(f.fileno(), uid, gid)
        os.fchmod(f.fileno(), mode)
    os.replace(tmp, path)


def private_copy(data, file, user):
    """``file`` becomes a file holding ``data`` (bytes) that only ``user``
    reads (``user``:root 0400), replaced only when it differs. True when
    it wrote."""
    file = Path(file)
    uid = pwd.getpwnam(user).pw_uid
    if file.is_file() and not file.is_symlink() and file.read_bytes() == data:
        st = file.lstat()
        if st.st_uid == uid and st.st_mode & 0o7777 == 0o400:
            return False
    make_dir(file.parent)
    replace_file(file, data, 0o400, uid, 0)
    return True


def make_dir(path, mode=0o755, owner=None, group=None):
    """``install -d -m MODE [-o OWNER -g GROUP] PATH``: missing parents made
    0755, the folder itself given the mode (and owner) whether new or not.
    True when it made the folder."""
    path = Path(path)
    made = not path.is_dir()
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    path.mkdir(mode=mode, exist_ok=True)
    if owner:
        os.chown(path, pwd.getpwnam(owner).pw_uid, grp.getgrnam(group or owner).gr_gid)
    os.chmod(path, mode)
    return made


def run(argv, **kwargs):
    """Run a command (its output is the caller's); CalledProcessError on failure."""
    return subprocess.run(argv, check=True, **kwargs)
