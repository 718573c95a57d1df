"""The base of the admin service's handlers, pages and API alike: the user, their rights."""

import pwd
from urllib.parse import urlencode

from jupyterhub.services.auth import HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import web

from portal.core.profiles import unix_groups
from portal.roles import is_portal_admin
from portal.settings import sends_hsts
from portal.store import NotFound
from portal.tlscontext import HSTS


class BaseHandler(HubOAuthenticated, web.RequestHandler):
    def set_default_headers(self):
        # Served over HTTPS (the hub says so through JUPYTERHUB_COOKIE_OPTIONS,
        # which also makes the login cookie Secure) by the proxy itself:
        # browsers keep to HTTPS. Behind a site's web server ([hub]
        # public_url) that server sends HSTS.
        site = self.settings.get("site_settings")
        if self.hub_auth.cookie_options.get("secure") and (site is None or sends_hsts(site)):
            self.set_header("Strict-Transport-Security", HSTS)

    @property
    def ops(self):
        return self.settings["operations"]

    @property
    def store(self):
        return self.ops.store

    @property
    def is_admin(self):
        """A portal admin: the user's OAuth token holds ADMIN_SCOPE (being a
        JupyterHub admin is not enough)."""
        return is_portal_admin((self.current_user or {}).get("scopes", ()))

    @property
    def author(self):
        return self.current_user["name"]

    @property
    def groups(self):
        """The user's Unix groups (LDAP through NSS), as the spawner matches them."""
        try:
            return unix_groups(pwd.getpwnam(self.current_user["name"]))
        except (KeyError, TypeError):
            return []

    def offered(self):
        return [p for p in self.store.profiles() if self.is_admin or p.allows(self.groups)]

    def profile_or_404(self, name):
        try:
            return self.store.get(name)
        except NotFound as e:
            raise web.HTTPError(404, str(e)) from None

    def require_admin(self, message="Only portal admins may change profiles"):
        if not self.is_admin:
            raise web.HTTPError(403, message)

    def page_url(self, path, **query):
        """The URL of the service's page ``path``, with ``query``."""
        url = url_path_join(self.settings["service_prefix"], path)
        return f"{url}?{urlencode(query)}" if query else url

    def render_page(self, template_name, **context):
        prefix = self.settings["service_prefix"]
        hub = self.settings["hub_prefix"]
        template = self.settings["jinja"].get_template(template_name)
        self.write(
            template.render(
                user=self.current_user,
                is_admin=self.is_admin,
                prefix=prefix,
                hub_prefix=hub,
                static=url_path_join(hub, "static/"),
                logout_url=url_path_join(hub, "logout"),
                xsrf_token=self.xsrf_token.decode(),
                **{"active": "", **context},
            )
        )

    def error_message(self, kwargs):
        """The message of ``write_error``'s error: an HTTPError's own, else the status's reason."""
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
            return exc.log_message % exc.args if exc.args else exc.log_message
        return self._reason

    def write_error(self, status_code, **kwargs):
        message = self.error_message(kwargs)
        self.render_page("error.html", status_code=status_code, message=message)
