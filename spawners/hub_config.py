"""The hub's configuration, one small function per area.

``jupyterhub_config.py`` loads the site settings (``portal.settings``) and
calls these; each only sets values on ``c`` from ``settings``.
"""

import asyncio
import json
import logging
import os
import ssl
import sys
from pathlib import Path

from portal import database
from portal import settings as site_settings
from portal.core import usernames
from portal.core.profiles import slice_defaults
from portal.tlscontext import HSTS
from portal.web import live_js, theme_css


def configure_hub(c, settings):
    hub = settings["hub"]
    site_settings.check_public_url(settings)
    state = Path(site_settings.state_dir(settings))
    c.JupyterHub.bind_url = hub["bind_url"]
    c.JupyterHub.hub_ip = site_settings.hub_api_ip(settings)
    c.JupyterHub.hub_port = hub["api_port"]
    c.JupyterHub.hub_connect_ip = hub["connect_ip"] or site_settings.hub_api_ip(settings)
    db_url = database.database_url(hub["db_url"], "[hub] db_url")
    if database.is_postgresql(db_url):  # with psycopg 3 named, the connect bounded
        c.JupyterHub.db_url = database.SecretURL(db_url.render_as_string(hide_password=False))
        c.JupyterHub.db_kwargs = {"connect_args": database.connect_args(db_url, "jupyterhub")}
    else:  # as written: JupyterHub reads a SQLite file's path from it
        c.JupyterHub.db_url = hub["db_url"]
    c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
    # Sessions are Slurm jobs that outlive the hub: a hub restart or upgrade
    # must neither cancel them (batchspawner's default would) nor lose them.
    c.JupyterHub.cleanup_servers = False
    c.JupyterHub.cleanup_proxy = False
    # Tokens the hub hands out expire: the OAuth tokens of sessions and the
    # service (in cookies) after [hub] token_hours, API tokens users create
    # within 30 days at most. Group changes apply sooner (refresh_user).
    c.JupyterHub.oauth_token_expires_in = int(hub["token_hours"] * 3600)
    c.JupyterHub.token_expires_in_max_seconds = 30 * 24 * 3600
    # Several sessions per user: named servers. JupyterHub's limit counts the
    # named ones a user has made, running or not; the spawner counts those
    # that run, the default one among them (PortalSpawner.sessions_per_user).
    sessions = hub["sessions_per_user"]
    c.JupyterHub.allow_named_servers = sessions > 1
    c.JupyterHub.named_server_limit_per_user = sessions
    c.PortalSpawner.sessions_per_user = sessions
    if hub["public_url"]:
        # A site's web server (nginx, Apache) faces browsers and forwards to
        # the proxy on loopback: redirects and cookies follow the public URL,
        # not the request's, and the client's address is taken from
        # X-Forwarded-For past that web server's own address only (tornado
        # takes the last address it does not trust; the proxy appends its
        # peer's). HSTS is that web server's to send.
        c.JupyterHub.public_url = site_settings.public_url(settings)
        c.JupyterHub.trusted_downstream_ips = site_settings.front_proxy_ips(settings)
    if is_https(settings):
        # Browsers use HTTPS (the proxy's TLS, or the front web server's):
        # cookies are Secure (the sessions' too, through
        # JUPYTERHUB_COOKIE_OPTIONS); where the proxy serves TLS itself,
        # browsers are told to keep to HTTPS.
        c.JupyterHub.tornado_settings = {"cookie_options": {"secure": True}}
        if site_settings.sends_hsts(settings):
            c.JupyterHub.tornado_settings["headers"] = {"Strict-Transport-Security": HSTS}
    if hub["domain"]:
        # Each user's sessions on an origin of their own (NAME.DOMAIN): what
        # a user's server serves never runs on the hub's origin. __Host-
        # cookies: no session's host can set one the hub would read.
        c.JupyterHub.subdomain_host = site_settings.origin(settings)
        c.JupyterHub.subdomain_hook = subdomain
        c.JupyterHub.cookie_host_prefix_enabled = is_https(settings)
        # and the hub's pages only on the hub's own host, never on a session's
        from spawners import jupyterhub_patches

        jupyterhub_patches.install_host_guard(hub["domain"])


def check_database(settings):
    """Connect once to the hub's PostgreSQL database ([hub] db_url) as the
    hub loads its configuration: a wrong address, password or database name
    stops the hub with the server's answer and the setting to check, rather
    than JupyterHub's advice to upgrade its schema. (The profile store's is
    checked as it is migrated, ``portal.store.ProfileStore.upgrade``.)"""
    url = database.database_url(settings["hub"]["db_url"], "[hub] db_url")
    if database.is_postgresql(url):
        database.check_connection(url, "[hub] db_url", "jupyterhub")


def subdomain(name, domain, kind):
    """JupyterHub's subdomain hook: a user's sessions on a host of their own
    under DOMAIN, ``portal.core.usernames.user_host``: NAME.DOMAIN for a
    plain lower-case name, a hashed label for any other (J.Smith on
    u-jsmith--1530429.DOMAIN; JupyterHub's own "idna" hook would keep upper
    case, which browsers lower and the proxy's host routes do not match);
    services on the hub's own DOMAIN (the admin service serves only the
    portal's pages, at /services/portal/ beside /hub/).

    >>> subdomain("alice", "portal.localhost", "user")
    'alice.portal.localhost'
    >>> subdomain("J.Smith", "portal.localhost", "user")
    'u-jsmith--1530429.portal.localhost'
    >>> subdomain("portal", "portal.localhost", "service")
    'portal.localhost'
    """
    return domain if kind == "service" else usernames.user_host(name, domain)


def is_https(settings):
    """Whether browsers reach the portal over HTTPS ([hub] public_url's
    scheme, else bind_url's)."""
    return site_settings.is_https(settings)


def is_internal_tls(settings):
    """Whether the hub, the proxy, the services and the sessions speak mutual
    TLS among themselves ([tls] internal: JupyterHub's internal_ssl)."""
    return settings["tls"]["internal"]


def internal_scheme(settings):
    return "https" if is_internal_tls(settings) else "http"


def hub_alt_names(settings):
    """The names of the hub's certificate (and the proxy's) beside
    JupyterHub's own (localhost, 127.0.0.1, this host's FQDN): where the
    sessions and the proxy reach the hub's API, [hub] api_ip and connect_ip;
    and, under host routing ([hub] domain), every host the proxy sends the
    hub (its route "/" takes the hosts no session holds: a stopped session's
    link); only the hub holds this key."""
    from portal.core.tlsnames import alt_names

    names = alt_names([site_settings.hub_api_ip(settings), settings["hub"]["connect_ip"]])
    domain = settings["hub"]["domain"]
    return names + [f"DNS:*.{domain}"] if domain else names


def configure_internal_ssl(c, settings):
    """JupyterHub's internal_ssl ([tls] internal): the hub's API, the proxy's
    API, the admin service and the sessions serve HTTPS and require a client
    certificate of the internal CAs. Each session's certificate is made and
    sent by ``PortalSpawner.create_certs`` and ``move_certs``; the proxy's,
    made here first by ``jupyterhub --generate-certs``, are copied for it by
    deploy/hub.sh. Certificates are kept across restarts (the proxy and the
    sessions outlive the hub)."""
    if not is_internal_tls(settings):
        return
    from spawners import jupyterhub_patches

    c.JupyterHub.internal_ssl = True
    c.JupyterHub.internal_certs_location = site_settings.internal_certs_location(settings)
    c.JupyterHub.trusted_alt_names = hub_alt_names(settings)
    # the hub waits for the admin service at its https URL (a JupyterHub fix);
    # under host routing the services' certificates name the hub's host
    jupyterhub_patches.install_internal_tls(settings["hub"]["domain"])


def configure_proxy(c, settings):
    """configurable-http-proxy runs on its own (deploy/hub.sh), so that a
    hub restart leaves every session reachable."""
    hub = settings["hub"]
    c.ConfigurableHTTPProxy.should_start = False
    scheme = internal_scheme(settings)
    c.ConfigurableHTTPProxy.api_url = f"{scheme}://127.0.0.1:{hub['proxy_api_port']}"
    # From its file (the hub's account only), never from the environment,
    # which Spawner.env_keep or a child process could pass on.
    token_file = Path(hub["state_dir"]) / "proxy_token"
    if token_file.exists():
        c.ConfigurableHTTPProxy.auth_token = token_file.read_text().strip()


def configure_auth(c, settings):
    """ldapauthenticator's traits from [ldap], refused at start when they
    cannot work (``spawners.ldap_settings.check_ldap``)."""
    from spawners.auth import login_attribute
    from spawners.ldap_settings import (
        MEMBER_OF,
        MEMBERSHIP,
        check_ldap,
        hub_account_uids,
        read_password_file,
    )

    ldap = settings["ldap"]
    check_ldap(settings)
    c.JupyterHub.authenticator_class = "spawners.auth.PortalLDAPAuthenticator"
    c.LDAPAuthenticator.server_address = ldap["server_address"]
    c.LDAPAuthenticator.server_port = ldap["server_port"]
    c.LDAPAuthenticator.tls_strategy = ldap["tls_strategy"]
    # ldap3 checks no certificate unless told to; the directory's CA may
    # differ from the web certificate's
    c.LDAPAuthenticator.tls_kwargs = {
        "validate": ssl.CERT_REQUIRED,
        "ca_certs_file": site_settings.ldap_ca_cert(settings),
    }
    people = ldap["user_search_base"] or f"ou=people,{ldap['base_dn']}"
    c.LDAPAuthenticator.user_search_base = people
    if ldap["bind_dn_template"]:
        c.LDAPAuthenticator.bind_dn_template = [ldap["bind_dn_template"]]
    else:
        # the one entry under user_search_base whose user_attribute is the name
        c.LDAPAuthenticator.lookup_dn = True
        c.LDAPAuthenticator.user_attribute = ldap["user_attribute"]
        c.LDAPAuthenticator.lookup_dn_user_dn_attribute = ldap["user_attribute"]
    if ldap["lookup_bind_dn"]:
        # the service account of the DN lookup and of the refreshes
        # (PortalLDAPAuthenticator.lookup_groups); its password stays in the
        # hub's memory, never in argv or an environment
        c.LDAPAuthenticator.lookup_dn_search_user = ldap["lookup_bind_dn"]
        c.LDAPAuthenticator.lookup_dn_search_password = read_password_file(
            ldap["lookup_password_file"], hub_account_uids(settings["hub"]["user"])
        )
    c.LDAPAuthenticator.allowed_groups = list(ldap["allowed_groups"])
    search_filter, attributes = MEMBERSHIP[ldap["group_membership"]]
    c.LDAPAuthenticator.group_search_filter = search_filter
    c.LDAPAuthenticator.group_attributes = attributes
    # read with the user's entry at login: the directory's spelling of the
    # login name (PortalLDAPAuthenticator.unix_name), and with memberOf the
    # groups (PortalLDAPAuthenticator.member_of)
    user_attribute = None if ldap["bind_dn_template"] else ldap["user_attribute"]
    attributes = [login_attribute(user_attribute, [ldap["bind_dn_template"]])]
    if ldap["group_membership"] == MEMBER_OF:
        attributes.append(MEMBER_OF)
        c.PortalLDAPAuthenticator.member_of = True
    c.LDAPAuthenticator.auth_state_attributes = [a for a in attributes if a]
    c.PortalLDAPAuthenticator.admin_groups = list(ldap["admin_groups"])
    # Group changes in LDAP apply within refresh_seconds, and before any spawn
    # (PortalLDAPAuthenticator.refresh_user).
    c.Authenticator.auth_refresh_age = ldap["refresh_seconds"]
    c.Authenticator.refresh_pre_spawn = True
    # Password guessing is slowed, then refused, per user name (spawners.throttle).
    c.PortalLDAPAuthenticator.login_failures_allowed = ldap["login_failures_allowed"]
    c.PortalLDAPAuthenticator.login_failure_window_seconds = ldap["login_failure_window_seconds"]
    c.PortalLDAPAuthenticator.login_lockout_seconds = ldap["login_lockout_seconds"]
    c.PortalLDAPAuthenticator.login_failure_delay_seconds = ldap["login_failure_delay_seconds"]
    # Hub names are the Unix accounts that run the Slurm jobs, spelled as NSS
    # has them ([hub] username_pattern within portal.core.usernames.SAFE):
    # checked before the bind (ldapauthenticator) and after (JupyterHub).
    rule = usernames.check_pattern(settings["hub"]["username_pattern"]).pattern
    c.Authenticator.username_pattern = rule
    c.LDAPAuthenticator.valid_username_regex = rule


def settings_profiles():
    """The profiles of the site settings, read anew at each call, as dicts with
    the [slurm] defaults filled in; the spawner validates them. They seed the
    profile store on its first start."""
    site = site_settings.load()
    return [{**slice_defaults(site), **p} for p in site["profiles"]]


def unseeded_edits(store, seeded):
    """{name: fields} of the settings' profiles (dicts, as seeded) whose fields
    differ from the store's: an edit of portal.toml after the first start,
    which the store, the truth, never takes."""
    from portal.core.profiles import profile_from_dict
    from portal.store import NotFound, fields_of

    edits = {}
    for data in seeded:
        try:
            held = fields_of(store.get(data["name"]))
            wanted = fields_of(profile_from_dict(data))
        except (NotFound, ValueError, KeyError):
            continue
        fields = [f for f in wanted if f != "revision" and wanted[f] != held[f]]
        if fields:
            edits[data["name"]] = fields
    return edits


class StoreProfiles:
    """The spawner's profile source: every profile of the store, read at each
    call (each spawn page and spawn), so an admin's edit applies at the next
    spawn. The store is created or migrated, and seeded from the site settings
    on its first start, when the hub loads its configuration.

    A profile of a site image (``image``, a folder of ``[containers]
    images``) is offered only while the latest check of that image with the
    profile's environment passed at the image's current stamp: an image that
    fails its check, is gone, or was rebuilt and not checked since, is never
    offered (the admin service checks, ``portal.service.images``)."""

    def __init__(self, settings):
        from portal.store import ProfileStore, store_url

        self.images_dir = settings["containers"]["images"]
        self._logged = set()  # (profile, image, stamp, why) already logged
        self.store = ProfileStore(store_url(settings))
        self.store.upgrade()
        seeded = settings_profiles()
        self.store.seed(seeded)
        for name, fields in unseeded_edits(self.store, seeded).items():
            logging.getLogger("portal").warning(
                "Profile %s in the settings differs from the profile store's (%s): sessions "
                "use the store's. The settings seed only profiles the store never held; "
                "edit this one at /services/portal/profiles/%s",
                name, ", ".join(fields), name,
            )  # fmt: skip

    def __call__(self):
        from portal.helper.imagecheck import offer_problem

        profiles = self.store.profiles()
        checks = self.store.latest_image_checks() if any(p.image for p in profiles) else {}
        offered = []
        for p in profiles:
            stamp, why = "", ""
            if p.image:
                stamp, why = offer_problem(self.images_dir, p.image, p.environment, checks)
            if not why:
                offered.append(p)
            elif p.enabled and (p.name, p.image, stamp, why) not in self._logged:
                self._logged.add((p.name, p.image, stamp, why))
                logging.getLogger("portal").warning(
                    "Profile %s is not offered: %s (its image's checks: /services/portal/images)",
                    p.name, why,
                )  # fmt: skip
        return offered

    def __deepcopy__(self, memo):
        # traitlets deep-copies config values into each spawner: share the one store
        return self


def configure_service(c, settings):
    """The admin service (portal.service) at /services/portal/, its scope
    ADMIN_SCOPE and its own role; who holds the scope is ``configure_admins``'."""
    from portal.roles import ADMIN_SCOPE, JOBS_SCOPE

    portal = settings["portal"]
    repo = Path(__file__).resolve().parent.parent
    env = {"PORTAL_CONFIG": os.environ["PORTAL_CONFIG"]} if "PORTAL_CONFIG" in os.environ else {}
    if is_https(settings):
        # the service ignores X-Forwarded-Proto: it is told its cookies are Secure
        env["JUPYTERHUB_COOKIE_OPTIONS"] = json.dumps({"secure": True})
        if settings["hub"]["domain"]:
            # a __Host- cookie, as the hub's: no session's host can set one
            # the service reads (it is on the hub's host, sessions on others)
            env["JUPYTERHUB_COOKIE_HOST_PREFIX_ENABLED"] = "1"
    c.JupyterHub.services = [
        {
            "name": "portal",
            # https with internal_ssl: the service serves its certificate
            # (JUPYTERHUB_SSL_*) and takes the proxy's and the hub's only
            "url": f"{internal_scheme(settings)}://127.0.0.1:{portal['service_port']}",
            "command": [sys.executable, "-m", "portal.service"],
            "cwd": str(repo),
            "environment": {"PYTHONPATH": str(repo), **env},
            "oauth_no_confirm": True,
            "oauth_client_allowed_scopes": [ADMIN_SCOPE],
        }
    ]
    c.JupyterHub.custom_scopes = {
        ADMIN_SCOPE: {
            "description": "Create, edit and delete the portal's spawner profiles; "
            "extend anyone's session."
        },
        JOBS_SCOPE: {
            "description": "Run one's own notebooks as Slurm jobs, see and cancel them "
            "(the hub's /hub/api/portal/jobs)."
        },
    }
    # everyone logged in may open the service (profiles offered to them, the
    # cluster) and run their own notebooks as jobs (also through the hub's API)
    c.JupyterHub.extra_user_scopes = {"access:services!service=portal", JOBS_SCOPE}
    token_file = site_settings.metrics_token_file(settings)
    if token_file.is_file():
        # the monitoring service (the login node's Prometheus, a site's): its
        # token (deploy/hub.sh makes it) reads /hub/metrics and nothing else
        c.JupyterHub.services.append(
            {"name": "monitoring", "api_token": token_file.read_text().strip()}
        )
    c.JupyterHub.load_roles = [
        {
            "name": "monitoring",
            "description": "Reads the hub's Prometheus series (/hub/metrics) only",
            "scopes": ["read:metrics"],
            "services": ["monitoring"] if token_file.is_file() else [],
        },
        {
            "name": "portal-service",
            "description": "The admin service: lists sessions for the cluster page, "
            "finds a session's Slurm job (its server's state) to extend it",
            "scopes": ["list:users", "read:users", "read:servers", "admin:server_state"],
            "services": ["portal"],
        },
    ]
    # the session's server token: the server role's scopes, and JupyterLab's
    # scheduler submitting the user's notebook jobs (portal.session.scheduler)
    c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", JOBS_SCOPE]


PORTAL_ADMIN_SCOPES = [
    # the hub's admin page, and what it lists: users with their groups, last
    # activity and servers; the groups (read only: they come from LDAP)
    "admin-ui",
    "list:users",
    "read:users",
    "list:groups",
    "read:groups",
    # start and stop anyone's session, from the admin page or the spawn page
    # /hub/spawn/NAME (read:servers, start:servers, delete:servers)
    "servers",
    # the hub's Prometheus series, JupyterHub's and the portal's (/hub/metrics)
    "read:metrics",
]
"""JupyterHub's scopes of the portal-admin role (besides the service's
ADMIN_SCOPE). Never ``proxy`` (the proxy's address and token),
``admin:users`` (make admins), ``groups`` (join the admin group),
``tokens``, ``admin:services``, ``shutdown``, nor ``access:servers``: a
portal admin stops, starts and extends a user's session, but does not open
it (their JupyterLab would run on the hub's origin).
``tests/unit/test_roles.py`` checks them against each endpoint."""


def configure_admins(c, settings):
    """Who administers the portal, and who the hub. Members of the [ldap]
    admin_groups (JupyterHub groups, synchronised from LDAP at login) get the
    portal-admin role: PORTAL_ADMIN_SCOPES and the service's ADMIN_SCOPE
    (profiles, extending anyone's session, every session on the cluster
    page). No one gets JupyterHub's admin role, which can do anything
    (re-point the proxy and receive its token, make admins), except the
    break-glass accounts a site names in ``c.Authenticator.admin_users``
    (``jupyterhub_config.d/``): JupyterHub adds those to the role below, and
    logs that it merges them. The role's members are exactly those: an
    account made admin before (portal admins were) is not one after the next
    start. Call after ``configure_service``."""
    from portal.roles import ADMIN_SCOPE

    c.JupyterHub.load_roles.extend(
        [
            # JupyterHub refuses other scopes or description for its admin role
            {"name": "admin", "users": []},
            {
                "name": "portal-admin",
                "description": "Administers the portal: the admin page, starts and stops "
                "sessions, extends them, edits profiles",
                "scopes": [*PORTAL_ADMIN_SCOPES, ADMIN_SCOPE],
                "groups": [site_settings.group_name(dn) for dn in settings["ldap"]["admin_groups"]],
            },
        ]
    )


# A managed service's command prefix: SIGTERM to it when the hub's process ends.
DIES_WITH_THE_HUB = ["/usr/bin/setpriv", "--pdeathsig", "TERM", "--"]


def configure_culling(c, settings):
    """Idle sessions stopped by jupyterhub-idle-culler, a hub service, after
    [culling] idle_minutes; each session reports its own activity, busy
    kernels and GPUs included (``portal.session.activity``), with what the
    spawner exports to it. Call after ``configure_service``."""
    from portal.core.idle import CULLER_SERVICE, check_culling, site_idle_seconds

    culling = settings["culling"]
    check_culling(culling)
    timeout = site_idle_seconds(culling)
    c.PortalSpawner.idle_timeout = timeout if culling["enabled"] else 0
    c.PortalSpawner.activity_interval = culling["activity_seconds"]
    c.PortalSpawner.gpu_busy_percent = culling["gpu_busy_percent"]
    if not culling["enabled"]:
        return
    command = [
        # ended with the hub: JupyterHub 6.1.1 stops it with SIGINT, which
        # the culler's tornado loop takes as one failed callback and runs on
        # (each bench or test hub stopped left one behind)
        *DIES_WITH_THE_HUB,
        sys.executable,
        "-m",
        "jupyterhub_idle_culler",
        f"--timeout={timeout}",
        f"--cull-every={culling['every_seconds']}",
        # each session's own limit (a profile's longer idle_minutes), from its state
        f"--config={Path(__file__).parent / 'idle_culler_config.py'}",
    ]
    if is_internal_tls(settings):
        # the culler calls the hub's API with the hub's own internal
        # certificate (it runs as the hub's account, and reads no other)
        command += [
            "--ssl-enabled=true",
            f"--internal-certs-location={site_settings.internal_certs_location(settings)}",
        ]
    c.JupyterHub.services.append({"name": CULLER_SERVICE, "command": command})
    c.JupyterHub.load_roles.append(
        {
            "name": CULLER_SERVICE,
            "description": "Stops sessions idle for [culling] idle_minutes",
            # admin:server_state: each session's own idle limit, in its state
            "scopes": [
                "list:users",
                "read:users:activity",
                "read:servers",
                "admin:server_state",
                "delete:servers",
            ],  # fmt: skip
            "services": [CULLER_SERVICE],
        }
    )


def configure_spawner(c, settings):
    from portal.notebookjobs import NotebookJobs
    from spawners import gpu_use, jupyterhub_patches, metrics, quota, route_check
    from spawners.job_notices import JobNotices, hub_lookup_mail
    from spawners.poller import SlurmPoller

    slurm, envs = settings["slurm"], settings["envs"]
    configure_slurm_commands(c, slurm["bin_dir"], slurm["private_data"])
    c.JupyterHub.spawner_class = "spawners.PortalSpawner"
    profiles = StoreProfiles(settings)
    c.PortalSpawner.profile_source = profiles
    # batchspawner's port callback sets any attribute it is sent: ours takes a
    # port only; a stop during a spawn answers the spawn's request as stopped,
    # not with a 500; the session card's "Extend by N hours" and GPU figures
    notebook_jobs = NotebookJobs(profiles.store, settings)
    notebook_jobs.site_view = site_view(SlurmPoller.instance(slurm["job_name"]))
    jupyterhub_patches.install_routes(profiles.store, notebook_jobs)
    # a page's user from its login cookie, and a user by name, without a query
    jupyterhub_patches.install_user_lookups()
    # JupyterHub's check that a started session answers takes the spawner's
    jupyterhub_patches.install_answered_wait()
    # the notebook jobs' starts and ends, with the sessions' notices (the shared poll's)
    notices = SlurmPoller.instance(slurm["job_name"]).notices
    notices.sender = notices.sender or site_settings.mail_from(settings)
    job_notices = JobNotices(
        notebook_jobs, notices, site_settings.public_url(settings) + "hub/", hub_lookup_mail
    )
    when_the_hub_runs(job_notices.start)
    sampler = gpu_use.install(active_spawners, profiles.store, settings)
    when_the_hub_runs(sampler.start)
    routes = route_check.install(settings)
    when_the_hub_runs(routes.start)
    metrics.install(
        active_spawners, SlurmPoller.instance(slurm["job_name"]), job_notices, profiles.store,
        sampler, routes,
    )  # fmt: skip
    # each user's QOS read as they log in, ahead of their first spawn page
    c.Authenticator.post_auth_hook = quota.read_ahead_at_login(slurm["job_name"], profiles)
    c.PortalSpawner.cluster_snapshot = site_settings.cluster_snapshot(settings)
    c.PortalSpawner.poll_interval_slurm = slurm["poll_interval"]
    c.Spawner.poll_interval = int(max(slurm["poll_interval"], 1))
    c.PortalSpawner.poll_interval_active = slurm["poll_interval_active"]
    c.PortalSpawner.cluster_interval = slurm["cluster_interval"]
    c.PortalSpawner.catalog_interval = slurm["catalog_interval"]
    c.PortalSpawner.unknown_grace = slurm["unknown_grace"]
    c.PortalSpawner.warn_minutes = slurm["warn_minutes"]
    c.PortalSpawner.gpu_memory_gb = site_settings.gpu_memory(settings)
    c.PortalSpawner.prewarm_imports = site_settings.prewarm_imports(settings)
    c.PortalSpawner.notice_from = site_settings.mail_from(settings)
    c.PortalSpawner.notice_hub_url = site_settings.public_url(settings) + "hub/"
    c.JupyterHub.template_paths = [str(Path(__file__).parent / "templates")]
    c.JupyterHub.template_vars = {"portal_theme_css": theme_css(), "portal_live_js": live_js()}
    c.PortalSpawner.slurm_timeout = slurm["command_timeout"]
    c.PortalSpawner.job_name = slurm["job_name"]
    c.PortalSpawner.python_env = envs["jupyter"]
    c.PortalSpawner.log_dir = slurm["log_dir"]
    c.PortalSpawner.templates_dir = f"{envs['prefix']}/notebook_templates"
    c.PortalSpawner.shared_data = settings["data"]["shared_data"]
    c.PortalSpawner.envs_prefix = envs["prefix"]
    c.PortalSpawner.images_dir = settings["containers"]["images"]
    c.PortalSpawner.container_runtime = settings["containers"]["runtime"]
    # Sessions run only for accounts in the portal's groups, with a uid in the
    # site's user range; sudoers allows the same groups only (deploy/hub.sh).
    c.PortalSpawner.allowed_unix_groups = site_settings.portal_groups(settings)
    c.PortalSpawner.uid_min = settings["hub"]["uid_min"]
    c.PortalSpawner.uid_max = settings["hub"]["uid_max"]
    c.Spawner.default_url = "/lab"
    # A queued Slurm job may take a while; the spawn page shows why.
    c.Spawner.start_timeout = 900
    c.Spawner.http_timeout = 120


def configure_slurm_commands(c, bin_dir, private_data="auto"):
    """Every Slurm command of the hub, its spawners and its polls from
    ``bin_dir`` ([slurm] bin_dir), first on the sessions' PATH too; the hub
    refuses to start (SettingsError, naming the setting) when one of Slurm's
    commands is not there, or [slurm] private_data is none of its values.
    The hub reads its jobs as ``private_data`` says (``check_private_data``
    logs how)."""
    from portal.slurm import commands

    commands.use_bin_dir(bin_dir, check=True)
    commands.use_private_data(private_data)
    c.PortalSpawner.slurm_bin_dir = bin_dir
    c.PortalSpawner.job_path = commands.job_path(bin_dir)


def start_shared_poll(c):
    """Start the shared Slurm poll with the hub rather than at the first spawn
    page, so that page shows what is free from the start."""
    from spawners.spawner import PortalSpawner

    when_the_hub_runs(lambda: PortalSpawner(config=c).poller.poke())


def check_extensions(settings):
    """Ask, as the hub starts, whether the hub's account can extend sessions
    through the root helper (``portal.extend.ExtensionCheck``): if not, the
    hub's log says so at once, with the command that fixes it, rather than a
    user's first try."""
    from traitlets.log import get_logger

    from portal.extend import ExtensionCheck

    slurm = settings["slurm"]
    check = ExtensionCheck.shared(slurm["command_timeout"], slurm["job_name"])
    when_the_hub_runs(lambda: asyncio.ensure_future(check.at_start(get_logger())))


def check_private_data(settings):
    """Ask Slurm, as the hub starts, how the hub reads its jobs ([slurm]
    private_data; "auto": whether PrivateData hides them), and say it in the
    hub's log; when through the root helper, whether sudo lets the hub's
    account run it (if not, the log names the fix at once, rather than a
    session taken for ended)."""
    from traitlets.log import get_logger

    when_the_hub_runs(lambda: asyncio.ensure_future(private_data_problem(settings, get_logger())))


async def private_data_problem(settings, log):
    """The start check of ``check_private_data``: the problem logged, or ""."""
    from portal.helper import slurmread
    from portal.slurm import commands

    timeout = settings["slurm"]["command_timeout"]
    mode = settings["slurm"]["private_data"]
    if not await commands.reads_through_helper(timeout):
        log.info("[slurm] private_data = %r: the hub reads its jobs as its own account", mode)
        return ""
    try:
        allowed = await commands.may_run_read_helper(timeout)
    except (commands.SlurmError, OSError) as e:
        allowed, why = False, f"sudo did not answer: {e}"
    else:
        why = "sudo has no rule for it"
    if allowed:
        log.info(
            "[slurm] private_data = %r: the hub reads its jobs through %s (Slurm's PrivateData "
            "hides other users' jobs)", mode, slurmread.INSTALLED_AT,
        )  # fmt: skip
        return ""
    problem = (
        f"the hub's account {settings['hub']['user']} cannot run {slurmread.INSTALLED_AT} "
        f"({why}), and Slurm's PrivateData hides its sessions' jobs: run portal setup as root"
    )
    log.error("%s", problem)
    return problem


def check_slurm_account(settings):
    """Ask slurmctld, as the hub starts, whether it knows the hub's account by
    its uid: one it heard of before the Unix account existed it holds with
    none, and refuses every request of (the spawn page's expected starts,
    ``sbatch --test-only``). The hub's log then says what to run."""
    from traitlets.log import get_logger

    when_the_hub_runs(lambda: asyncio.ensure_future(slurm_account_problem(settings, get_logger())))


async def slurm_account_problem(settings, log):
    """The start check of ``check_slurm_account``: the problem logged, or ""."""
    from portal.slurm import commands

    account = settings["hub"]["user"]
    try:
        uids = await commands.slurm_uids(account, settings["slurm"]["command_timeout"])
    except (commands.SlurmError, OSError) as e:
        problem = f"Slurm did not say whether it knows the hub's account {account}: {e}"
    else:
        if account not in uids:
            problem = (
                f"Slurm has no user {account} (the hub's account): run as root on the "
                "login node: deploy/slurm.sh sync-users"
            )
        elif uids[account] is None:
            problem = (
                f"Slurm holds the hub's account {account} without a uid and refuses its "
                "requests (the spawn page's expected starts): run as root on the login "
                "node: scontrol reconfigure"
            )
        else:
            return ""
    log.error("%s", problem)
    return problem


def site_view(poller):
    """``async () -> (partitions, catalog)`` of the shared ``poller``: what a
    notebook job's choices are checked against, as a session's (the catalog
    awaited 2 s at most when none was read yet)."""

    async def view():
        await poller.partitions_since(5.0, timeout=2.0)
        catalog = poller.catalog
        if catalog is None:
            catalog = await poller.catalog_since(2 * poller.catalog_interval, timeout=2.0)
        return poller.partitions, catalog

    return view


def active_spawners():
    """Every session of the running hub that runs or starts (its Prometheus series)."""
    from jupyterhub.app import JupyterHub

    app = JupyterHub.instance() if JupyterHub.initialized() else None
    if app is None or not app.tornado_settings:
        return []  # the hub is starting: it has no users loaded yet
    return [s for u in app.users.values() for s in u.spawners.values() if s.active]


def when_the_hub_runs(callback):
    """Call ``callback`` as soon as the hub's event loop runs: JupyterHub loads
    its config inside its running event loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not inside the hub (e.g. --generate-config)
        return
    from jupyterhub.app import JupyterHub

    if JupyterHub.initialized() and JupyterHub.instance().generate_certs:
        return  # jupyterhub --generate-certs (deploy/hub.sh): it makes certificates and exits
    loop.call_soon(callback)


def check_spawner_settings(c):
    """Stop the hub at start, rather than ignore it, when the configuration
    (site overrides in jupyterhub_config.d included) sets a batchspawner
    setting that PortalSpawner does not use; the message names the portal's
    setting to use instead (``spawners.unused_settings``). Settings given on
    jupyterhub's command line (``deploy/hub.sh start ARGS``) count too. Another
    spawner class (the benchmark's stock SlurmSpawner) is left alone."""
    from copy import deepcopy

    from jupyterhub.app import JupyterHub
    from traitlets.utils.importstring import import_item

    from spawners.spawner import PortalSpawner
    from spawners.unused_settings import refuse_unused_settings

    config = deepcopy(c)
    if JupyterHub.initialized():
        config.merge(JupyterHub.instance().cli_config)
    spawner_class = config.JupyterHub.get("spawner_class")
    if isinstance(spawner_class, str) and "." in spawner_class:
        spawner_class = import_item(spawner_class)
    if isinstance(spawner_class, type) and issubclass(spawner_class, PortalSpawner):
        refuse_unused_settings(spawner_class, config)
