"""The admin service's tornado application: its routes, and the process the hub starts.

The handlers live beside it: ``pages`` (HTML), ``api`` (JSON), both on
``handlers.BaseHandler``; every write goes through ``operations.ProfileOperations``.
"""

import json
import logging
import os
import signal
from pathlib import Path
from urllib.parse import urlparse

import jinja2
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from tornado import httpclient, ioloop, web
from tornado.httpserver import HTTPServer

from portal import settings as site_settings
from portal import tlscontext
from portal.core.profiles import IMAGE_RE, NAME_RE
from portal.extend import ExtensionCheck, SessionExtender
from portal.notebookjobs import NotebookJobs
from portal.service.cluster import ClusterSource
from portal.slurm.commands import use_bin_dir, use_private_data
from portal.store import ProfileStore, store_url
from portal.web import live_js, theme_css

from . import api, jobs, pages, presets, usage
from .health import HealthHandler
from .images import ImageChecks
from .operations import ProfileOperations, SessionOperations

log = logging.getLogger("portal.service")

TEMPLATES = Path(__file__).parent / "templates"


def routes(prefix):
    """The service's routes under ``prefix``: ``(URL pattern, handler class)``.
    docs/api/service.yaml describes those of its API (tests/unit/test_openapi.py
    holds the two together)."""

    def route(path):
        return url_path_join(prefix, path)

    name = f"({NAME_RE.pattern.strip('^$')})"  # a profile's name (the form's "new" too)
    image = f"({IMAGE_RE.pattern.strip('^$')})"  # a site image's, its folder's
    return [
        (prefix, pages.RootHandler),
        (route("oauth_callback"), HubOAuthCallbackHandler),
        (route("profiles"), pages.ProfilesPage),
        (route(f"profiles/{name}"), pages.ProfileEditPage),
        (route(f"profiles/{name}/(enable|disable|delete|revert)"), pages.ProfileActionPage),
        (route(f"profiles/{name}/history"), pages.HistoryPage),
        (route("images"), pages.ImagesPage),
        (route(f"images/{image}/check"), pages.ImageCheckPage),
        (route("cluster"), pages.ClusterPage),
        (route("api/profiles"), api.ProfilesAPI),
        (route("api/profiles/([^/]+)"), api.ProfileAPI),
        (route("api/check"), api.CheckAPI),
        (route("api/images"), api.ImagesAPI),
        (route(f"api/images/{image}/check"), api.ImageCheckAPI),
        (route("api/sessions/extensions"), api.ExtensionsAPI),
        (route("api/sessions/([^/]+)"), api.SessionAPI),
        (route("api/sessions/([^/]+)/extend"), api.SessionExtendAPI),
        *jobs.routes(route),
        *usage.routes(route),
        *presets.routes(route),
        (route("health"), HealthHandler),
    ]


def create_application(settings=None, store=None, image_runner=None):
    """The service's application; ``image_runner`` runs an image's check
    (``ImageChecks``; by default ``portal.helper.imagecheck.run_check``)."""
    settings = settings or site_settings.load()
    use_bin_dir(settings["slurm"]["bin_dir"])  # the hub refused to start without them
    use_private_data(settings["slurm"]["private_data"])  # its notebook jobs, its usage report
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/portal/")
    hub_prefix = url_path_join(os.environ.get("JUPYTERHUB_BASE_URL", "/"), "hub/")
    hub_auth = HubOAuth(api_token=os.environ["JUPYTERHUB_API_TOKEN"], cache_max_age=60)
    if store is None:
        store = ProfileStore(store_url(settings))
        store.upgrade()  # the hub has done it already, unless the service runs alone
    cluster = ClusterSource(
        site_settings.cluster_snapshot(settings),
        max_age=max(3 * settings["slurm"]["cluster_interval"], 60),
        timeout=settings["slurm"]["command_timeout"],
        catalog_max_age=3 * settings["slurm"]["catalog_interval"],
    )
    client = httpclient.AsyncHTTPClient()
    # the hub's internal_ssl: the service's certificate, the hub's checked
    hub_tls = tlscontext.ssl_context(hub_auth.keyfile, hub_auth.certfile, hub_auth.client_ca)

    async def hub_api(path):
        response = await client.fetch(
            url_path_join(hub_auth.api_url, path),
            headers={"Authorization": f"token {hub_auth.api_token}"},
            request_timeout=20,
            ssl_options=hub_tls,
        )
        return json.loads(response.body)

    notebook_jobs = NotebookJobs(store, settings)
    notebook_jobs.site_view = cluster.site_view  # the hub's poll's, from its files
    images = ImageChecks(store, settings, **({"runner": image_runner} if image_runner else {}))
    operations = ProfileOperations(store, cluster, settings, hub_api, images)
    slurm = settings["slurm"]
    extender = SessionExtender(store, slurm["job_name"], slurm["command_timeout"])
    sessions = SessionOperations(extender, hub_api)
    jinja = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    jinja.globals["portal_theme_css"] = theme_css()
    jinja.globals["portal_live_js"] = live_js()

    handlers = routes(prefix)
    return web.Application(
        handlers,
        default_handler_class=pages.NotFoundPage,
        hub_auth=hub_auth,
        operations=operations,
        images=images,
        sessions=sessions,
        notebook_jobs=notebook_jobs,
        jinja=jinja,
        site_settings=settings,
        service_prefix=prefix,
        hub_prefix=hub_prefix,
        cookie_secret=os.urandom(32),
        login_url=hub_auth.login_url,
        xsrf_cookies=False,  # HubOAuth checks XSRF for cookie-authenticated writes
    )


def main():
    logging.basicConfig(
        level=logging.INFO, format="[%(levelname).1s %(asctime)s %(name)s] %(message)s"
    )
    app = create_application()
    url = os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")
    parsed = urlparse(url)
    # No X-Forwarded-* trust: the proxy and any local user alike connect from
    # loopback, so such headers could be forged by a direct connection.
    # With the hub's internal_ssl, HTTPS with the files the hub gives the
    # service (JUPYTERHUB_SSL_*), for clients with a certificate of the CAs
    # it trusts only: the proxy, the hub.
    tls = tlscontext.from_environ(server=True)
    server = HTTPServer(app, xheaders=False, ssl_options=tls)
    server.listen(parsed.port, parsed.hostname)
    log.info("portal admin service on %s", url)
    # The hub starts and stops this service; if the hub dies without stopping
    # it, it goes too (a new hub starts its own, with a new token).
    parent = os.getppid()

    def exit_with_the_hub():
        if os.getppid() != parent:
            log.warning("the hub (pid %d) is gone; stopping", parent)
            ioloop.IOLoop.current().stop()

    ioloop.PeriodicCallback(exit_with_the_hub, 1000).start()
    loop = ioloop.IOLoop.current()
    # whether the hub's account can extend sessions (the root helper): logged now if not
    loop.spawn_callback(ExtensionCheck.shared().at_start)
    # the images that enabled profiles name, checked again now and whenever rebuilt
    loop.spawn_callback(app.settings["images"].watch)
    # The hub stops its services with SIGINT (then SIGTERM after 10 s). Set
    # explicitly: a hub started in the background (hub.sh) passes SIGINT on
    # ignored, Python then installs no handler, and the hub's stop waited its
    # full 10 s for this service.
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.asyncio_loop.add_signal_handler(signum, loop.stop)
    loop.start()
    log.info("stopped")
