#!/usr/bin/python3 -I
"""portal-notebook: a user's notebook, read as that user, for notebook jobs.

The admin service (the hub's account) runs it as the job's user through
its sudoers rule, so it reads only what the user may read::

    sudo -n -u alice /usr/local/libexec/portal/portal-notebook inspect templates/a.ipynb
    sudo -n -u alice /usr/local/libexec/portal/portal-notebook read templates/jobs/a-81.ipynb
    sudo -n -u alice /usr/local/libexec/portal/portal-notebook log templates/jobs/a-81.log

PATH is relative to the user's home (their passwd entry's). It is refused
when it has ``..``, when it resolves (links followed) outside the home,
when it is no regular file or not of the command's kind (``.ipynb``;
``.log``), and when it is larger than the command reads.

- ``inspect``: a notebook's facts as one JSON object: ``path`` (as given,
  normal), ``kernel`` and ``language`` (its kernelspec's), ``parameters``
  (the source of its cell tagged ``parameters``, or null);
- ``read``: the notebook's bytes (an executed notebook, for its rendering);
- ``log``: the last ``LOG_BYTES`` of a job's log;
- ``gpus``: a job's GPU use (``NAME.gpus.json``, the runner's samples).

Errors: one line on stderr, ``portal-notebook: REASON``, exit status 1;
a malformed command line, exit status 2.

Standard library only, under ``/usr/bin/python3 -I``: the installed copy
(root's) runs only root-owned code; the service imports it for its names.
"""

import json
import os
import pwd
import resource
import stat
import sys

INSTALLED_AT = "/usr/local/libexec/portal/portal-notebook"
PREFIX = "portal-notebook: "
NOTEBOOK_BYTES = 64 * 2**20  # the largest notebook read
LOG_BYTES = 64 * 1024  # of a log's end
CELL_CHARS = 64 * 1024  # of a parameters cell (the service parses it: portal.core.notebooks)
MAX_PATH = 1024
KINDS = {"inspect": ".ipynb", "read": ".ipynb", "log": ".log", "gpus": ".gpus.json"}
GPUS_BYTES = 64 * 1024  # of a job's GPU samples


class Refused(Exception):
    pass


def home_path(home, path):
    """The absolute, resolved path of ``path`` (relative to ``home``), or
    Refused when it leaves the home, links followed."""
    if not path or len(path) > MAX_PATH or path.startswith("/") or "\x00" in path:
        raise Refused("give a path relative to your home")
    if ".." in path.split("/"):
        raise Refused("the path may not contain '..'")
    real_home = os.path.realpath(home)
    real = os.path.realpath(os.path.join(real_home, path))
    if not real.startswith(real_home.rstrip("/") + "/"):
        raise Refused(f"{path} leads outside your home (a link?)")
    return real


def open_file(real, kind, limit):
    """A read-only file object of the regular file ``real`` ending ``kind``."""
    if not real.endswith(kind):
        raise Refused(f"{os.path.basename(real)} is not a {kind} file")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Refused(f"there is no file {os.path.basename(real)}") from None
    except OSError as e:
        raise Refused(f"{os.path.basename(real)} cannot be read: {e.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise Refused(f"{os.path.basename(real)} is not a regular file")
    if limit and info.st_size > limit:
        os.close(fd)
        raise Refused(f"{os.path.basename(real)} is larger than {limit // 2**20} MB")
    return os.fdopen(fd, "rb")


def notebook_facts(data, path):
    """``inspect``'s answer for the notebook bytes ``data``."""
    try:
        nb = json.loads(data)
    except (ValueError, RecursionError):
        raise Refused(f"{path} is not a notebook (not JSON)") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise Refused(f"{path} is not a notebook (no cells)")
    if nb.get("nbformat") != 4:
        raise Refused(f"{path} is not a version 4 notebook")
    meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    spec = meta.get("kernelspec") if isinstance(meta.get("kernelspec"), dict) else {}
    lang = meta.get("language_info") if isinstance(meta.get("language_info"), dict) else {}
    source = None
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        cell_meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        tags = cell_meta.get("tags") or []
        if isinstance(tags, list) and "parameters" in tags:
            text = cell.get("source", "")
            source = "".join(map(str, text)) if isinstance(text, list) else str(text)
            if len(source) > CELL_CHARS:
                raise Refused(f"{path}: its parameters cell is longer than {CELL_CHARS} characters")
            break
    return {
        "path": path,
        "kernel": str(spec.get("name") or ""),
        "language": str(spec.get("language") or lang.get("name") or ""),
        "parameters": source,
    }


def run(command, path, home):
    """What ``command`` prints for ``path``, as bytes; Refused otherwise."""
    real = home_path(home, path)
    if command == "gpus":
        with open_file(real, ".gpus.json", GPUS_BYTES) as f:
            return f.read(GPUS_BYTES)
    if command == "log":
        with open_file(real, ".log", 0) as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - LOG_BYTES))
            return f.read(LOG_BYTES)
    with open_file(real, ".ipynb", NOTEBOOK_BYTES) as f:
        data = f.read(NOTEBOOK_BYTES + 1)
    if command == "read":
        return data
    return json.dumps(notebook_facts(data, path)).encode()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in KINDS:
        print(f"{PREFIX}usage: portal-notebook inspect|read|log|gpus PATH", file=sys.stderr)
        return 2
    # a notebook of gigabytes, or one made to be slow to parse, stops here
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
    try:
        out = run(argv[0], argv[1], pwd.getpwuid(os.getuid()).pw_dir)
    except Refused as e:
        print(f"{PREFIX}{e}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
