"""Small HTTP clients for the hub and its admin service, as a browser uses
them: login form, cookies, the XSRF header on API calls made with the login
cookie."""

import re
import time
from urllib.parse import unquote, urlparse

import requests
from urllib3.util.retry import Retry

from portal.core.usernames import user_host
from tests.support.hubsettings import CA_CERT
from tests.support.openapi import check_response

SERVICE = "/services/portal/"  # the admin service (portal.service)


# A path of a user's server: served on the user's own origin (NAME.DOMAIN,
# portal.core.usernames.user_host) when the hub has a domain ([hub] domain),
# as the hub redirects browsers.
USER_PATH = re.compile(r"^/user/([^/]+)/")


class HubClient:
    def __init__(self, base_url):
        self.base = base_url.rstrip("/")
        parsed = urlparse(self.base)
        # sessions on NAME.HOST where the hub is reached by name, not by address
        self.domain = parsed.hostname if not re.match(r"^[0-9.]+$", parsed.hostname) else ""
        self.scheme, self.port = parsed.scheme, parsed.port
        self.session = requests.Session()
        self.session.verify = CA_CERT
        # A GET sent on a kept-alive connection just as the proxy closes it
        # (Node's keepAliveTimeout, 5 s idle) fails with "Remote end closed
        # connection without response" before the hub sees it: a GET or HEAD
        # is sent once more on a new connection. Nothing else is retried.
        retry = Retry(
            total=1, connect=0, read=1, status=0, other=0,
            allowed_methods=frozenset({"GET", "HEAD"}), raise_on_status=False,
        )  # fmt: skip
        for prefix in ("https://", "http://"):
            self.session.mount(prefix, requests.adapters.HTTPAdapter(max_retries=retry))
        # every answer of a route docs/api describes keeps to its description
        self.session.hooks["response"].append(check_response)

    def url(self, path):
        if "://" in path:  # the hub's own answer (a server's url with its host)
            return path
        user = USER_PATH.match(path)
        if user and self.domain:
            host = user_host(unquote(user.group(1)), self.domain)
            return f"{self.scheme}://{host}:{self.port}{path}"
        return self.base + path

    def login(self, username, password):
        """POST the login form; returns the response (no redirect followed)."""
        page = self.session.get(self.url("/hub/login"), timeout=10)
        page.raise_for_status()
        match = re.search(r'name="_xsrf"\s+value="([^"]+)"', page.text)
        data = {"username": username, "password": password}
        if match:
            data["_xsrf"] = match.group(1)
        return self.session.post(
            self.url("/hub/login"), data=data, allow_redirects=False, timeout=30
        )

    def api(self, method, path, **kwargs):
        headers = kwargs.pop("headers", {})
        xsrf = self.session.cookies.get("_xsrf", path="/hub/")
        if xsrf:
            headers["X-XSRFToken"] = xsrf
        kwargs.setdefault("timeout", 30)
        return self.session.request(method, self.url("/hub/api" + path), headers=headers, **kwargs)

    def user_model(self, name):
        r = self.api("GET", f"/users/{name}")
        r.raise_for_status()
        return r.json()

    def wait_ready(self, name, timeout=120, server_name=""):
        """Wait for the server (the default one, or ``server_name``) to be
        ready; returns the user model."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            model = self.user_model(name)
            server = model.get("servers", {}).get(server_name)
            if server and server.get("ready"):
                return model
            if not server or not server.get("pending"):
                if not server:
                    raise AssertionError(f"server of {name} is gone: {model}")
            time.sleep(0.3)
        raise AssertionError(f"server of {name} not ready within {timeout} s")

    def wait_stopped_server(self, name, server_name, timeout=60):
        """Wait until the user's server ``server_name`` ("": the default)
        no longer runs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if server_name not in self.user_model(name).get("servers", {}):
                return
            time.sleep(0.3)
        raise AssertionError(f"server {server_name!r} of {name} still there after {timeout} s")

    def wait_stopped(self, name, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.user_model(name).get("servers"):
                return
            time.sleep(0.3)
        raise AssertionError(f"server of {name} still there after {timeout} s")

    def lab_answers(self, name, server_name=""):
        """Whether the user's running server (the default one, or
        ``server_name``) answers with JupyterLab."""
        path = f"/user/{name}/{server_name}/lab" if server_name else f"/user/{name}/lab"
        r = self.session.get(self.url(path), timeout=30)
        return r.status_code == 200 and "JupyterLab" in r.text


class Portal:
    """A hub client speaking to the service, as the browser does (OAuth cookie, XSRF)."""

    def __init__(self, client):
        self.client = client
        page = client.session.get(client.url(SERVICE + "profiles"), timeout=60)
        assert page.status_code in (200, 403), page.text[:300]
        self.xsrf = client.session.cookies.get("_xsrf", path=SERVICE)
        assert self.xsrf, "the service set no _xsrf cookie"

    def url(self, path):
        return self.client.url(SERVICE + path)

    def get(self, path, **kw):
        return self.client.session.get(self.url(path), timeout=60, **kw)

    def send(self, method, path, xsrf=True, **kw):
        headers = {"X-XSRFToken": self.xsrf} if xsrf else {}
        return self.client.session.request(
            method, self.url(path), headers=headers, timeout=60, **kw
        )

    def profile(self, name):
        r = self.get(f"api/profiles/{name}")
        assert r.status_code == 200, r.text
        return r.json()

    def put(self, profile_name, **fields):
        return self.send("PUT", f"api/profiles/{profile_name}", json=fields)

    def history(self, name):
        page = self.get(f"profiles/{name}/history")
        assert page.status_code == 200, page.text[:300]
        return page.text
