"""The shared data folder ([data] shared_data), world-readable, with copies
of the demo data sets that Debian packages: fashion-mnist, from
/usr/share/datasets/fashion-mnist (gzipped IDX files, dataset-fashion-mnist,
30 MB). deploy/data.sh runs this.

Copies, not links: a session in a container image sees the host's shared
data folder alone (it is bound there), where a link to /usr/share would
dangle. A link that an earlier version made (DATA/NAME pointing to exactly
the data set's Debian folder) is replaced by the copy.

On a real site the folder is a mount (NFS, Isilon) holding the site's own
data: a data set is copied only where its name is free, and nothing else
there is replaced, moved or deleted. A copy is made as DATA/.NAME.new, then
renamed into place, so a session never sees half of one.
"""

import filecmp
import os
import shutil
import sys
from pathlib import Path

from deploy.base import logger, main_of, make_dir

log = logger("data")

# The demo data sets: name in the shared data folder -> the Debian folder copied.
DEMO_DATA = {"fashion-mnist": Path("/usr/share/datasets/fashion-mnist")}

# ---------------------------------------------------------------- pure


def action(dest, source):
    """What becomes of DATA/NAME (``dest``) for the data set ``source``:
    ``copy`` where nothing is there, ``replace`` for the link an earlier
    version made (to exactly ``source``), ``keep`` for anything else (a
    site's data, a link of its own, a copy made before)."""
    if os.path.islink(dest):
        return "replace" if os.readlink(dest) == str(source) else "keep"
    return "keep" if os.path.lexists(dest) else "copy"


def is_copy_of(folder, source):
    """``folder`` is a folder (not a link) holding exactly ``source``'s files
    and folders, byte for byte: the copy this module made (``make purge``
    removes it, and nothing else)."""

    def listing(root):
        return sorted(
            (os.path.relpath(path, root), sorted(dirs), sorted(files))
            for path, dirs, files in os.walk(root)
        )

    if os.path.islink(folder) or not os.path.isdir(folder):
        return False
    if listing(folder) != listing(source):
        return False
    for path, _, files in os.walk(folder):
        for name in files:
            copy = os.path.join(path, name)
            original = os.path.join(source, os.path.relpath(copy, folder))
            if os.path.islink(copy) or not filecmp.cmp(copy, original, shallow=False):
                return False
    return True


# ---------------------------------------------------------------- writers


def world_readable(root):
    """``chmod -R a+rX``, without following a link (there is none in a copy)."""
    for path, _, files in os.walk(root):
        os.chmod(path, os.stat(path).st_mode | 0o555)
        for name in files:
            file = os.path.join(path, name)
            os.chmod(file, os.lstat(file).st_mode | 0o444)


def copy_data_set(dest, source):
    work = dest.with_name(f".{dest.name}.new")
    if work.is_dir() and not work.is_symlink():
        shutil.rmtree(work)
    elif os.path.lexists(work):
        work.unlink()
    shutil.copytree(source, work)  # links in source are copied as files
    world_readable(work)
    if dest.is_symlink():
        dest.unlink()
    work.rename(dest)


def cmd_ensure(settings):
    data = settings["data"]["shared_data"]
    if not data:
        log("[data] shared_data is empty: no shared data folder")
        return
    data = Path(data)
    if not data.is_dir():
        log(f"creating {data}")
        make_dir(data, 0o755)
    os.umask(0o022)
    for name, source in DEMO_DATA.items():
        dest = data / name
        todo = action(dest, source)
        if todo == "keep":
            continue
        if not source.is_dir():
            log(f"no {source}: {dest} not copied")
            continue
        if todo == "replace":
            log(f"replacing the link {dest} -> {source} by a copy")
        else:
            log(f"copying {source} to {dest}")
        copy_data_set(dest, source)


main = main_of({"ensure": cmd_ensure}, log)

if __name__ == "__main__":
    sys.exit(main())
