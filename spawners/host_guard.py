"""The hub answers only on its own host.

With per-user origins ([hub] domain, JupyterHub's subdomain_host) the proxy
sends every host to the hub when no route matches (JupyterHub 6.1 routes the
hub at "/" for all hosts), so the hub served its real login page on
bob.DOMAIN too. A victim who logged in there left the hub's login cookie on
bob's origin, where his page read the XSRF token and made a token with her
rights (an attacker's review found it). Here every request to the hub on a
session's host (NAME.DOMAIN) is sent to the same path on the hub's own host,
except /user/ paths: for a server that does not run, the hub's own handler
sends the browser on from there. Requests on other hosts (the nodes' API
address, loopback) are left as they are.

``install(domain)`` wraps ``jupyterhub.handlers.base.BaseHandler.prepare``
(JupyterHub 6.1.1); the hub's configuration calls it (``spawners.hub_config``).
tests/integration/test_origins.py fails when the hub serves a page on a
session's host.
"""

from jupyterhub.handlers.base import BaseHandler
from jupyterhub.utils import url_path_join


def off_host(host_name, domain):
    """Whether ``host_name`` is a session's host under ``domain``, not the hub's.

    >>> off_host("bob.portal.localhost", "portal.localhost")
    True
    >>> off_host("portal.localhost", "portal.localhost")
    False
    >>> off_host("10.200.0.1", "portal.localhost")
    False
    >>> off_host("evilportal.localhost", "portal.localhost")
    False
    """
    return host_name.lower().endswith("." + domain.lower())


def install(domain):
    prepare = BaseHandler.prepare
    if getattr(prepare, "portal_host_guard", False):
        return

    async def prepare_on_the_hubs_host(self):
        if off_host(self.request.host_name, domain) and not self.request.path.startswith(
            url_path_join(self.base_url, "user/")
        ):
            self.redirect(self.settings["subdomain_host"] + self.request.uri)
            return
        return await prepare(self)

    prepare_on_the_hubs_host.portal_host_guard = True
    BaseHandler.prepare = prepare_on_the_hubs_host
