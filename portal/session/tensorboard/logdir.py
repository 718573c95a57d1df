"""Which folder a TensorBoard may show, and its id: pure functions.

A log folder is named as the Jupyter file browser names paths (relative to
the server's root folder, the user's home; "" is the root itself) or by an
absolute path inside the root. It is resolved with ``realpath``, so a link
that leads out of the root is refused like a path that starts outside it.
"""

import hashlib
import os
from pathlib import PurePosixPath

ID_LENGTH = 12
ID_PATTERN = f"[0-9a-f]{{{ID_LENGTH}}}"


class LogdirError(ValueError):
    """A log folder that is refused; ``str()`` is the message the user sees."""


def resolve_logdir(root, logdir):
    """The real path of the folder ``logdir`` inside ``root``; LogdirError if refused."""
    if not isinstance(logdir, str):
        raise LogdirError("logdir must be a folder name (a string)")
    if "\0" in logdir:
        raise LogdirError("logdir may not contain a NUL character")
    if ".." in PurePosixPath(logdir).parts:
        raise LogdirError(f"logdir may not contain '..': {logdir}")
    root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(root, logdir))
    # checked before existence, so nothing is told about folders outside
    if os.path.commonpath([root, path]) != root:
        raise LogdirError(f"{logdir} is outside your home folder ({root})")
    if not os.path.exists(path):
        raise LogdirError(f"No such folder: {logdir}")
    if not os.path.isdir(path):
        raise LogdirError(f"Not a folder: {logdir}")
    return path


def relative_logdir(root, path):
    """``path`` as the file browser names it: relative to ``root`` ('' for the root)."""
    relative = os.path.relpath(path, os.path.realpath(root))
    return "" if relative == "." else relative


def tensorboard_id(path):
    """A short id of a real path, the same in every session."""
    return hashlib.sha256(os.fsencode(path)).hexdigest()[:ID_LENGTH]
