"""Every change the portal makes to JupyterHub's and batchspawner's internals.

The hub's environment pins jupyterhub==6.1.1 and batchspawner==1.3.0
(deploy/requirements-hub.txt). Each patch below says which of their
behaviours it relies on or works around; tests/unit/test_jupyterhub_patches.py
checks each of those behaviours, so an upgrade starts there: a failing test
names the patch to revisit. Where JupyterHub documents an extension point, it
is used instead of a patch: the admin service is a managed service, the idle
culler's rule is its ``cull_arbiter_hook``, the session's life is
``PortalSpawner``'s hooks.

The hub's configuration (``spawners.hub_config``) calls the ``install_*``
functions; importing this module changes nothing.
"""

import ssl
import time

from jupyterhub import app, objects, user, utils
from jupyterhub.objects import Server
from tornado.log import app_log

from portal.tlscontext import ssl_context

PINNED = {"jupyterhub": "6.1.1", "batchspawner": "1.3.0"}


# -- routes -------------------------------------------------------------------


def install_routes(store, notebook_jobs=None):
    """The portal's handlers in JupyterHub's route lists (idempotent).

    JupyterHub 6.1.1 builds its routes, once, from the module lists
    ``jupyterhub.handlers.default_handlers`` and
    ``jupyterhub.apihandlers.default_handlers`` (``JupyterHub.init_handlers``,
    hub prefix added), after loading its configuration; its own way to add
    routes, ``c.JupyterHub.extra_handlers``, is deprecated since 3.1 and
    cannot replace one. batchspawner 1.3.0 appends its port report
    (``/api/batchspawner``) to the API list when ``batchspawner.api`` is
    imported. Replaced: batchspawner's port report (it sets any spawner
    attribute it is sent), ``UserServerAPIHandler`` and ``SpawnHandler`` (a
    stop during a spawn answered 500), ``HomeHandler`` (the card's notice,
    the user's notebook jobs from the store ``store``);
    added: the card's extension (with the profile store ``store``), GPU
    figures, the pages' notices, the spawn page's expected start, the presets
    (``spawners.presets``) and, with ``notebook_jobs``
    (``portal.notebookjobs.NotebookJobs``), the notebook jobs' API
    (``spawners.jobs_api``). Fails, and with it the hub's start, if a
    replaced handler has no route any more.
    """
    import batchspawner.api  # noqa: F401 (registers the handler replaced here)
    from jupyterhub import apihandlers, handlers
    from jupyterhub.apihandlers.users import UserServerAPIHandler
    from jupyterhub.handlers.pages import HomeHandler, SpawnHandler

    from . import handlers as ours

    replacements = {
        UserServerAPIHandler: ours.PortalUserServerAPIHandler,
        SpawnHandler: ours.PortalSpawnHandler,
        HomeHandler: ours.PortalHomeHandler,
    }
    # initialize()'s
    arguments = {ours.PortalHomeHandler: {"jobs": notebook_jobs, "store": store}}
    added = {
        ours.PORT_ROUTE: (ours.PortReportHandler,),
        ours.EXTEND_ROUTE: (ours.SessionExtendHandler, {"store": store}),
        ours.GPUS_ROUTE: (ours.SessionGPUsHandler,),
        ours.NOTICES_ROUTE: (ours.NoticesHandler,),
        ours.EXPECTED_ROUTE: (ours.ExpectedStartHandler,),
    }
    lists = (handlers.default_handlers, apihandlers.default_handlers)
    for routes in lists:
        routes[:] = [
            (route, new, arguments[new]) if new in arguments else (route, new, *rest)
            for route, cls, *rest in routes
            if route not in added
            for new in [replacements.get(cls, cls)]
        ]
    installed = {cls for routes in lists for _, cls, *_ in routes}
    missing = [cls.__name__ for cls in replacements if replacements[cls] not in installed]
    if missing:
        raise RuntimeError(f"JupyterHub has no route for {', '.join(missing)} to replace")
    apihandlers.default_handlers.append((ours.PORT_ROUTE, *added.pop(ours.PORT_ROUTE)))
    if notebook_jobs is not None:
        from . import jobs_api

        api_routes = {route for route, *_ in jobs_api.routes(None)}
        apihandlers.default_handlers[:] = [
            r for r in apihandlers.default_handlers if r[0] not in api_routes
        ]
        apihandlers.default_handlers.extend(jobs_api.routes(notebook_jobs))
    for route, target in added.items():
        handlers.default_handlers.append((route, *target))
    from . import presets

    for routes, new in (
        (handlers.default_handlers, presets.page_routes(store)),
        (apihandlers.default_handlers, presets.api_routes(store)),
    ):
        taken = {route for route, *_ in new}
        routes[:] = [r for r in routes if r[0] not in taken]
        routes.extend(new)


def stop_pending(spawner):
    """Whether a stop of ``spawner`` is under way: JupyterHub 6.1.1's private
    ``Spawner._stop_pending``, True from the start of ``User.stop`` to its end
    (the idle culler's stop mark is cleared when a DELETE started no stop)."""
    return spawner._stop_pending


def mark_cookie_request(handler):
    """Before ``refresh_user`` answers False (log in again): JupyterHub
    6.1.1's ``BaseHandler.refresh_auth`` then reads
    ``handler._token_authenticated``, which it sets on token-authenticated
    requests only, so a cookie request (a browser's) failed with
    AttributeError (a 500 at spawn) instead of asking for a new login. A
    request without it was not token-authenticated."""
    if handler is not None and not hasattr(handler, "_token_authenticated"):
        handler._token_authenticated = False


# -- the login cookie's user, from memory ----------------------------------------

COOKIE_USERS_MAX = 100_000  # cookie ids and names kept (``install_user_lookups``)


def install_user_lookups():
    """A page's user from its login cookie, and a user by name, without a
    database query (idempotent).

    JupyterHub 6.1.1's ``BaseHandler._user_for_cookie`` finds the user of
    every cookie-authenticated request with ``query(orm.User).filter(
    cookie_id == ...)``, which loads the user's roles and groups as well
    (``selectin``): under 200 browsing users a third of the hub's time went
    there. Here a cookie id found once is kept in memory with its user's id;
    its next request is answered from the hub's own ``users`` (its
    ``UserDict``, what the query's answer is looked up in), while that user
    is still there and still holds that cookie id. JupyterHub 6.1.1 never
    changes a user's ``cookie_id`` (it is set when the user is made), and a
    deleted user leaves ``users`` (``UserDict.delete``); any other cookie
    goes the original way, which still clears the invalid ones. The secure
    cookie's signature and age are checked at every request, as before.
    ``find_user`` (a user by name: the REST API's user routes) is kept the
    same way: a name's user id, answered while that user still has the name
    (a renamed user's old name goes the original way, and finds no one).
    """
    from jupyterhub.handlers.base import BaseHandler

    original = BaseHandler._user_for_cookie
    if getattr(original, "portal_cookie_users", False):
        return
    kept = {}  # cookie id: the user's id

    def _user_for_cookie(self, cookie_name, cookie_value=None):
        cookie_id = self.get_secure_cookie(
            cookie_name, cookie_value, max_age_days=self.cookie_max_age_days
        )
        cookie_id = cookie_id.decode("utf8", "replace") if cookie_id is not None else None
        user_id = kept.get(cookie_id)
        if user_id is not None and user_id in self.users:
            user = self.users[user_id]
            if user.orm_user.cookie_id == cookie_id:
                user.db = self.db
                if self._record_activity(user):
                    self.db.commit()
                return user
        user = original(self, cookie_name, cookie_value)
        if user is not None and cookie_id is not None:
            if len(kept) >= COOKIE_USERS_MAX:
                kept.clear()
            kept[cookie_id] = user.id
        return user

    _user_for_cookie.portal_cookie_users = True
    BaseHandler._user_for_cookie = _user_for_cookie

    find_user = BaseHandler.find_user
    named = {}  # user name: the user's id

    def find_user_by_name(self, name):
        """JupyterHub's ``find_user`` (``orm.User.find``: a query per REST
        call on a user, each open tab's status poll), answered from the hub's
        ``users`` while the id found for ``name`` still has that name."""
        user_id = named.get(name)
        if user_id is not None and user_id in self.users:
            user = self.users[user_id]
            if user.orm_user.name == name:
                user.db = self.db
                return user
        user = find_user(self, name)
        if user is not None:
            if len(named) >= COOKIE_USERS_MAX:
                named.clear()
            named[name] = user.id
        return user

    BaseHandler.find_user = find_user_by_name


# -- the hub's pages on its own host -------------------------------------------


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


def install_host_guard(domain):
    """The hub answers only on its own host (idempotent).

    With per-user origins (``subdomain_host``) the proxy sends every host to
    the hub when no route matches (JupyterHub 6.1.1 routes the hub at "/" for
    all hosts), so the hub served its real login page on bob.DOMAIN too. A
    victim who logged in there left the hub's login cookie on bob's origin,
    where his page read the XSRF token and made a token with her rights. Here
    every request to the hub on a session's host (NAME.DOMAIN) is sent to the
    same path on the hub's own host, except /user/ paths: for a server that
    does not run, the hub's own handler sends the browser on from there.
    Wraps ``jupyterhub.handlers.base.BaseHandler.prepare``, which every page
    and API handler of JupyterHub 6.1.1 runs first.
    tests/integration/test_origins.py fails when the hub serves a page on a
    session's host.
    """
    from jupyterhub.handlers.base import BaseHandler
    from jupyterhub.utils import url_path_join

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


# -- internal TLS ---------------------------------------------------------------


def make_ssl_context(keyfile, certfile, cafile=None, purpose=ssl.Purpose.SERVER_AUTH, **kwargs):
    """``jupyterhub.utils.make_ssl_context``, trusting ``cafile`` alone."""
    if kwargs or not cafile:  # its deprecated arguments, or no CA file: JupyterHub's own
        return utils.make_ssl_context(keyfile, certfile, cafile, purpose=purpose, **kwargs)
    return ssl_context(keyfile, certfile, cafile, server=purpose == ssl.Purpose.CLIENT_AUTH)


def _app_client_context():
    from .internal_tls import _client_context

    if not app.JupyterHub.initialized():
        return None
    hub = app.JupyterHub.instance()
    if not hub.internal_ssl or not hub.internal_ssl_key:
        return None
    return _client_context(hub.internal_ssl_key, hub.internal_ssl_cert, hub.internal_ssl_ca)


def install_internal_tls(domain=""):
    """Three fixes to JupyterHub 6.1.1's ``internal_ssl`` (idempotent):

    - the hub's contexts trust the internal CAs alone: its
      ``make_ssl_context`` (imported by name into ``app``, ``user`` and
      ``objects``) adds the system's CA store, so the hub's API took a client
      certificate of any CA the system trusts (a public CA's, the portal's own
      local CA's), not only an internal one;
    - the hub waits for a managed service at an https URL (the admin service)
      with its client context: JupyterHub hands ``Server.wait_up`` the hub's
      own *server* context, with which no client connection can be opened
      ("Cannot create a client socket with a PROTOCOL_TLS_SERVER context"):
      the service never counted as up and the hub exited;
    - ``domain`` (the hub's host under host routing, [hub] domain): the
      services' certificates name it too. The proxy checks a backend's
      certificate against the request's Host, and JupyterHub 6.1.1's
      ``_ServiceSpawner`` makes them for localhost and 127.0.0.1 alone.
    """
    for module in (app, user, objects):
        module.make_ssl_context = make_ssl_context
    if domain:
        _name_services(domain)
    if getattr(Server.wait_up, "portal_internal_tls", False):
        return
    original = Server.wait_up

    def wait_up(self, timeout=10, http=False, ssl_context=None, extra_path=""):
        if http and (ssl_context is None or ssl_context.protocol == ssl.PROTOCOL_TLS_SERVER):
            ssl_context = _app_client_context() or ssl_context
        return original(
            self, timeout=timeout, http=http, ssl_context=ssl_context, extra_path=extra_path
        )

    wait_up.portal_internal_tls = True
    Server.wait_up = wait_up


# -- the check that a started server answers ---------------------------------

ANSWER_FRESH_SECONDS = 5  # how old an answer JupyterHub's own check takes


def note_answer(server, url, response):
    """Record that the spawner's own check (``spawners.reach``) had
    ``response`` from ``url`` of the started ``server`` (``Server``): the
    check of JupyterHub's that follows takes it (``install_answered_wait``)."""
    server.portal_answer = (url, response, time.monotonic())


async def _answered(response):
    return response


def install_answered_wait():
    """JupyterHub 6.1.1 checks a started server's answer itself as soon as
    ``Spawner.start`` returns (``User._wait_up``: ``Server.wait_up(http=True,
    extra_path="api")`` with the hub's client context, the response's
    ``X-JupyterHub-Version`` read). ``PortalSpawner.start`` returns once its
    own check of that same URL, with that same context, has had an answer
    (``spawners.reach``, which tells an unreachable node from a slow
    start): asking again cost each spawn a new TLS connection and about
    40 ms. ``Server.wait_up`` takes the answer noted (``note_answer``) for
    its URL when it is at most ``ANSWER_FRESH_SECONDS`` old, once; else it
    asks, as JupyterHub does (idempotent)."""
    if getattr(Server.wait_up, "portal_answered", False):
        return
    original = Server.wait_up

    def wait_up(self, timeout=10, http=False, ssl_context=None, extra_path=""):
        noted = vars(self).pop("portal_answer", None)
        if http and noted is not None:
            url, response, when = noted
            fresh = time.monotonic() - when <= ANSWER_FRESH_SECONDS
            if fresh and url == utils.url_path_join(self.url, extra_path):
                app_log.debug("%s answered the spawner's check: not asked again", url)
                return _answered(response)
            app_log.debug("%s: the spawner's check (of %s) is not taken", self.url, url)
        return original(
            self, timeout=timeout, http=http, ssl_context=ssl_context, extra_path=extra_path
        )

    wait_up.portal_answered = True
    Server.wait_up = wait_up


def _name_services(domain):
    from jupyterhub.services.service import _ServiceSpawner

    if getattr(_ServiceSpawner.create_certs, "portal_internal_tls", False):
        return
    create_certs = _ServiceSpawner.create_certs

    async def create_certs_for_the_hubs_host(self):
        self.ssl_alt_names = [*self.ssl_alt_names, f"DNS:{domain}"]
        return await create_certs(self)

    create_certs_for_the_hubs_host.portal_internal_tls = True
    _ServiceSpawner.create_certs = create_certs_for_the_hubs_host


async def forget_unstarted(db, user, server_name):
    """Remove ``user``'s named server ``server_name`` when it was stored but
    never started (a spawn page's GET stores one in JupyterHub 6.1.1), as
    JupyterHub's own ``DELETE .../servers/NAME`` with ``remove`` does:
    ``User._delete_spawner`` (private), then the stored row."""
    from jupyterhub.utils import maybe_future

    orm = user.orm_spawners.get(server_name)
    spawner = user.spawners.get(server_name) if orm is not None else None
    if orm is None or (spawner is not None and spawner.active):
        return
    if spawner is not None:
        await maybe_future(user._delete_spawner(spawner))
    db.delete(orm)
    user.spawners.pop(server_name, None)
    db.commit()
