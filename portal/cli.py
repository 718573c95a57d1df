"""``portal``: the site administrator's command, and what the units run.

    portal setup [--units | --no-units] [--no-check]
                                         install the portal onto this login node (root),
                                         then run portal check
    portal check                         the site's preflight, live: ok, WARN or FAIL (root)
    portal uninstall [--purge]           remove what setup made, and nothing else (root)
    portal health                        each part of the portal, ok or down (exit 1: down)
    portal units                         print the systemd units setup writes
    portal hub [JUPYTERHUB_ARG...]       JupyterHub with the portal's configuration (its unit)
    portal proxy-args                    configurable-http-proxy's arguments, one a line
    portal migrate                       the databases at their newest schema (the hub's account)

The settings are the package's defaults merged with /etc/portal/portal.toml
(or the file named by $PORTAL_CONFIG).
"""

import argparse
import os
import sys

from portal import settings as site_settings

USAGE = __doc__.split("\n\n")[1]


def _setup(args, settings):
    from portal.setup import install

    install.setup(settings, with_units=args.units)
    if args.no_check:
        return 0
    return _check(args, settings)


def _check(args, settings):
    from portal import check

    return check.run(settings, out=lambda line: print(line, flush=True))


def _uninstall(args, settings):
    from portal.setup import install

    install.uninstall(settings, purge=args.purge)
    return 0


def _health(args, settings):
    from portal import health

    return health.main()


def _units(args, settings):
    from portal.setup import install, units

    layout = install.Layout.of(settings)
    config = os.environ.get("PORTAL_CONFIG", "")
    print(units.proxy_unit(settings, install.proxy_command(settings, layout),
                           install.PROXY_TOKEN_ENV))  # fmt: skip
    writable = [layout.state, layout.run_dir, install.LOG_ROOT]
    print(units.hub_unit(settings, layout.portal_bin, layout.state, writable, config), end="")
    return 0


def _hub(args, settings):
    from portal.setup import install

    jupyterhub = os.path.join(sys.prefix, "bin", "jupyterhub")
    config = str(install.hub_config_file())
    os.chdir(site_settings.state_dir(settings))
    os.execv(jupyterhub, [jupyterhub, "-f", config, *args.jupyterhub_args])


def _proxy_args(args, settings):
    """The proxy's arguments, computed as root from the settings (which may
    hold a database password the proxy's account must not read); its unit
    has them in ExecStart, the demo's hub.sh passes them on."""
    from portal.setup import install

    print("\n".join(install.proxy_args(settings, install.Layout.of(settings))))
    return 0


def _migrate(args, settings):
    """As the hub's account: the portal's store (alembic) and JupyterHub's
    database (``jupyterhub upgrade-db``, which keeps a backup of SQLite)."""
    import subprocess

    from portal import database
    from portal.setup import install
    from portal.store import ProfileStore, store_url

    try:  # each server answers first, or its setting is named with its answer
        for setting, url, application in (
            ("[hub] db_url", settings["hub"]["db_url"], "jupyterhub"),
            ("[portal] db_url", store_url(settings), "portal"),
        ):
            url = database.database_url(url, setting)
            if database.is_postgresql(url):
                database.check_connection(url, setting, application)
    except database.DatabaseError as e:
        print(e, file=sys.stderr)
        return 1
    store = ProfileStore(store_url(settings))
    before = store.schema()
    store.upgrade()
    after = store.schema()
    if before != after:
        print(f"the portal's store migrated from {before or 'nothing'} to {after}")
    jupyterhub = os.path.join(sys.prefix, "bin", "jupyterhub")
    done = subprocess.run(
        [jupyterhub, "upgrade-db", "-f", str(install.hub_config_file())],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        print(done.stdout + done.stderr, file=sys.stderr)
        return 1
    if "Upgrading" in done.stderr or "upgraded" in done.stderr.lower():
        print("the hub's database migrated (jupyterhub upgrade-db)")
    return 0


COMMANDS = {
    "setup": _setup,
    "uninstall": _uninstall,
    "check": _check,
    "health": _health,
    "units": _units,
    "hub": _hub,
    "proxy-args": _proxy_args,
    "migrate": _migrate,
}


def parser():
    top = argparse.ArgumentParser(prog="portal", description=__doc__.split("\n\n")[0],
                                  usage=USAGE, add_help=True)  # fmt: skip
    sub = top.add_subparsers(dest="command", required=True)
    setup = sub.add_parser("setup", help="install the portal onto this login node (root)")
    units = setup.add_mutually_exclusive_group()
    units.add_argument("--units", dest="units", action="store_true", default=None,
                       help="install the systemd units where systemd does not run")  # fmt: skip
    units.add_argument("--no-units", dest="units", action="store_false",
                       help="no systemd units (a host that starts the portal itself)")  # fmt: skip
    setup.add_argument("--no-check", action="store_true",
                       help="do not run portal check at the end")  # fmt: skip
    sub.add_parser("check", help="the site's preflight, live: ok, WARN or FAIL (root)")
    uninstall = sub.add_parser("uninstall", help="remove what setup made (root)")
    uninstall.add_argument("--purge", action="store_true",
                           help="the hub's state folder too (its databases)")  # fmt: skip
    sub.add_parser("health", help="each part of the portal, ok or down")
    sub.add_parser("units", help="print the systemd units setup writes")
    sub.add_parser("hub", help="JupyterHub with the portal's configuration (more: its own)")
    sub.add_parser("proxy-args", help="configurable-http-proxy's arguments, one a line")
    sub.add_parser("migrate", help="the databases at their newest schema (as the hub's account)")
    return top


def parse(argv=None):
    """The arguments; ``portal hub`` passes any it does not know to jupyterhub."""
    top = parser()
    args, extra = top.parse_known_args(argv)
    if extra and args.command != "hub":
        top.error(f"unrecognized arguments: {' '.join(extra)}")
    args.jupyterhub_args = extra
    return args


def main(argv=None):
    args = parse(argv)
    if args.command in ("setup", "uninstall", "check") and os.geteuid() != 0:
        print(f"portal {args.command}: run as root", file=sys.stderr)
        return 2
    try:
        settings = site_settings.load()
        return COMMANDS[args.command](args, settings)
    except site_settings.SettingsError as e:
        print(f"portal {args.command}: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        from portal.setup.files import SetupError

        if isinstance(e, SetupError):
            print(f"portal {args.command}: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
