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

import sys
from pathlib import Path
from string import Template

from portal import settings as site_settings
from portal.setup.files import (  # noqa: F401 (the deploy modules' writers)
    SetupError,
    make_dir,
    replace_file,
    run,
    write_if_changed,
)

DEPLOY_DIR = Path(__file__).resolve().parent
REPO_DIR = DEPLOY_DIR.parent
TEMPLATES = DEPLOY_DIR / "templates"


class DeployError(SetupError):
    """A step that cannot go on; the message says why, and what to do (a
    SetupError, as the package's own setup raises them)."""


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
        except (SetupError, site_settings.SettingsError) as e:
            log(f"error: {e}")
            return 1

    return main
