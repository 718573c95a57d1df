"""What deploy/hub.sh prepares that only the demo needs, and the facts it
needs as shell assignments. deploy/hub.sh: start | stop | restart (the hub
alone) | status | url | proxy. The portal's own installation steps (its
accounts, root helpers, sudoers rules, state folders, internal
certificates, migrations) are ``portal setup``'s (portal/setup/), which
hub.sh runs as a site would; what the hub and the proxy run is ``portal
hub`` and ``portal proxy``, as the units of a site run them.

The demo's part, here: *.localhost resolved by this host's programs (NSS's
myhostname), and the demo's local CA and web certificate (deploy/tls.sh)
when the settings name files that do not exist.

Least privilege: hub.sh runs as root only to prepare. The hub (and the
admin service it starts) runs as [hub] user, the proxy as [hub] proxy_user,
both system accounts, each with an explicit environment (nothing of the
caller's). The proxy's token is made anew whenever hub.sh starts the proxy
(so at every ``make up``), in a file only the hub's account reads; the
proxy alone gets it, in its environment.

Pid files and the proxy's log are in folders of root's: root never writes
by path into the state folder, which the hub's account owns (a link planted
there would have root write any file).
"""

import shlex
import sys

from deploy import nsswitch, tls_setup
from deploy.base import logger, main_of
from portal import settings as site_settings
from portal.helper import extend as extendhelper
from portal.setup.install import (  # noqa: F401 (read_token: deploy/prometheus_setup.py's)
    Layout,
    is_https,
    proxy_args,
    proxy_check,
    read_token,
)

log = logger("hub")


def extend_helper():
    """The facts of the root helper that lengthens a session
    (portal/helper/extend.py: INSTALLED_AT, REGISTRY, ...), as a mapping."""
    return vars(extendhelper)


# ---------------------------------------------------------------- pure


def shell_lines(settings, layout):
    """The facts deploy/hub.sh needs, as shell assignments. The URL and the
    internal certificates' folder are the hub's own answers (portal.settings)."""
    note = (" (HTTPS)" if is_https(settings) else "") + (
        " (internal TLS)" if settings["tls"]["internal"] else ""
    )
    facts = {
        "STATE": layout.state,
        "HUB_ENV": layout.prefix,
        "RUN_DIR": layout.run_dir,
        "PROXY_PID": layout.run_dir / "proxy.pid",
        "PROXY_INTERNAL": layout.run_dir / "proxy.internal-tls",  # the running proxy's (1 or 0)
        "HUB_PID": layout.run_dir / "jupyterhub.pid",
        "PROXY_LOG": layout.proxy_log,
        "HUB_LOG": layout.state / "jupyterhub.log",  # opened by the hub's account itself
        "HUB_USER": layout.hub_user,
        "PROXY_USER": layout.proxy_user,
        "URL": site_settings.public_url(settings),
        # where hub.sh asks whether the portal answers (the proxy itself
        # behind a site's web server, [hub] public_url)
        "PROXY_URL": proxy_check(settings)[0],
        "PROXY_CONNECT": proxy_check(settings)[1],
        "PROXY_BIND": ":".join(proxy_args(settings, layout)[1:4:2]),
        "PROXY_NOTE": note,
    }
    return [f"{k}={shlex.quote(str(v))}" for k, v in facts.items()]


def demo_layout(settings):
    """The layout of the demo's hubs: the portal installed in [envs]
    prefix's hub environment."""
    from pathlib import Path

    return Layout.of(settings, Path(settings["envs"]["prefix"]) / "envs" / "hub")


# ---------------------------------------------------------------- writers


def local_names(settings):
    """Names under .localhost ([hub] domain portal.localhost: the hub and
    every NAME.portal.localhost) are loopback for this host's programs too,
    as they are for browsers: NSS's myhostname module after files."""
    domain = settings["hub"]["domain"]
    if (domain == "localhost" or domain.endswith(".localhost")) and nsswitch.update(
        nsswitch.with_myhostname
    ):
        log("added myhostname to hosts in /etc/nsswitch.conf (*.localhost resolves to loopback)")


def cmd_prepare(settings):
    """What only the demo needs before ``portal setup``: its names, and its
    local CA and web certificate when [tls] names none that exists. On a
    site's node ([cluster] embedded = false), nothing: its names and its
    certificate are the site's."""
    if not settings["cluster"]["embedded"]:
        return
    local_names(settings)
    if is_https(settings):
        tls_setup.cmd_ensure(settings)


def cmd_shell(settings):
    print("\n".join(shell_lines(settings, demo_layout(settings))))


main = main_of({"shell": cmd_shell, "prepare": cmd_prepare}, log)

if __name__ == "__main__":
    sys.exit(main())
