"""A small HTTP client for the hub, as a browser uses it: login form, cookies,
the XSRF header on API calls made with the login cookie."""

import re
import time

import requests


class HubClient:
    def __init__(self, base_url):
        self.base = base_url.rstrip("/")
        self.session = requests.Session()

    def url(self, path):
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

    def wait_ready(self, name, timeout=120):
        """Wait for the default server to be ready; returns the user model."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            model = self.user_model(name)
            server = model.get("servers", {}).get("")
            if server and server.get("ready"):
                return model
            if not server or not server.get("pending"):
                if not server:
                    raise AssertionError(f"server of {name} is gone: {model}")
            time.sleep(0.3)
        raise AssertionError(f"server of {name} not ready within {timeout} s")

    def wait_stopped(self, name, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.user_model(name).get("servers"):
                return
            time.sleep(0.3)
        raise AssertionError(f"server of {name} still there after {timeout} s")
