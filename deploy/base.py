"""What the deploy modules share: the site settings, log lines like the
scripts' (``[ldap] wrote /etc/nslcd.conf``), templates, and writes that
replace a file atomically, only when its content changed.

The modules run as root under Debian's ``/usr/bin/python3`` with the
standard library alone, before any environment exists, from the scripts::

    PYTHONPATH=REPO /usr/bin/python3 -m deploy.ldap_setup SUBCOMMAND

(``deploy_py`` in deploy/common.sh). Each module keeps its pure functions
(settings and facts in, text or argv out) apart from the thin writers that
run commands and touch files.
"""

import grp
import os
import pwd
import subprocess
import sys
from pathlib import Path
from string import Template

from portal import settings as site_settings

DEPLOY_DIR = Path(__file__).resolve().parent
REPO_DIR = DEPLOY_DIR.parent
TEMPLATES = DEPLOY_DIR / "templates"


class DeployError(Exception):
    """A step that cannot go on; the message says why, and what to do."""


def logger(script):
    """``log(message)`` as deploy/SCRIPT.sh's ``log``: ``[SCRIPT] message`` on stderr."""

    def log(message):
        print(f"[{script}] {message}", file=sys.stderr, flush=True)

    return log


def render(template, **values):
    """The file ``deploy/templates/TEMPLATE`` with ``$values`` substituted."""
    return Template((TEMPLATES / template).read_text()).substitute(values)


def load_settings():
    return site_settings.load()


def write_if_changed(path, text, mode, owner="root", group="root"):
    """Write ``text`` to ``path`` (through ``path.tmp``, with ``mode`` and the
    owner) when its content differs; mode and owner are set either way.
    True when it wrote."""
    path = Path(path)
    uid, gid = pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    wrote = not path.is_file() or path.read_text() != text
    if wrote:
        replace_file(path, text, mode, uid, gid)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return wrote


def replace_file(path, text, mode=0o600, uid=0, gid=0):
    """``path`` replaced whole (through ``path.tmp``) by a file holding
    ``text``, its owner's alone until its owner and ``mode`` are set."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)
        # by the descriptor: a link put at tmp meanwhile changes nothing else
        os.fchown(f.fileno(), uid, gid)
        os.fchmod(f.fileno(), mode)
    os.replace(tmp, path)


def make_dir(path, mode=0o755, owner=None, group=None):
    """``install -d -m MODE [-o OWNER -g GROUP] PATH``: missing parents made
    0755, the folder itself given the mode (and owner) whether new or not."""
    path = Path(path)
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    path.mkdir(mode=mode, exist_ok=True)
    if owner:
        os.chown(path, pwd.getpwnam(owner).pw_uid, grp.getgrnam(group or owner).gr_gid)
    os.chmod(path, mode)


def run(argv, **kwargs):
    """Run a command (its output is the caller's); CalledProcessError on failure."""
    return subprocess.run(argv, check=True, **kwargs)


def main_of(commands, log, usage=None):
    """A module's ``main``: ``commands`` maps each subcommand to a function
    of the settings and the further arguments. A DeployError is logged as
    the scripts' ``die`` does it, with exit status 1."""

    def main(argv=None):
        argv = sys.argv[1:] if argv is None else argv
        if not argv or argv[0] not in commands:
            print(f"usage: {usage or '|'.join(commands)}", file=sys.stderr)
            return 2
        try:
            return commands[argv[0]](load_settings(), *argv[1:]) or 0
        except (DeployError, site_settings.SettingsError) as e:
            log(f"error: {e}")
            return 1

    return main
