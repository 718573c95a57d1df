"""``GET /services/portal/health``: the portal's parts (``portal.health``), as
JSON for monitors (``?format=json`` or ``Accept: application/json``) and as
a page for people; HTTP 503 when a part is down. One check runs at a time
and its answer serves every request of the next ``FRESH_SECONDS``, however
many monitors ask.

Anyone may ask, and an anonymous visitor learns up or down alone: the
parts' detail names the directory's address, the controller's host, the
nodes and the free GPUs, which are no business of the internet's. The
detail is served to a logged-in user (the hub's login cookie) and to the
monitoring token (``Authorization: Bearer TOKEN``, the token in [hub]
state_dir/metrics-token that the login node's Prometheus holds)."""

import asyncio
import hmac
import json
import time

from jupyterhub.services.auth import HubOAuthenticated
from tornado import web

from portal import health
from portal import settings as site_settings

FRESH_SECONDS = 5.0


def anonymous(result):
    """What a visitor without a login or the monitoring token is told."""
    return {"ok": result["ok"], "checked_at": result["checked_at"]}


def bearer(header):
    """The token of an ``Authorization: Bearer TOKEN`` (or ``token TOKEN``) header, or "".

    >>> bearer("Bearer abc"), bearer("token abc"), bearer("Basic abc"), bearer("")
    ('abc', 'abc', '', '')
    """
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() in ("bearer", "token") else ""


class HealthHandler(HubOAuthenticated, web.RequestHandler):
    _last = (-float("inf"), None)
    _lock = None

    async def answer(self):
        cls = type(self)
        if cls._lock is None:
            cls._lock = asyncio.Lock()
        async with cls._lock:
            at, result = cls._last
            if result is None or time.monotonic() - at > FRESH_SECONDS:
                result = await health.check(self.settings["site_settings"])
                cls._last = (time.monotonic(), result)
        return result

    def monitoring(self):
        """The request carries the monitoring token."""
        token = bearer(self.request.headers.get("Authorization", ""))
        if not token:
            return False
        path = site_settings.metrics_token_file(self.settings["site_settings"])
        try:
            expected = path.read_text().strip()
        except OSError:
            return False
        return bool(expected) and hmac.compare_digest(token.encode(), expected.encode())

    def get_current_user(self):
        # The monitoring token is no user's: not asked of the hub (which
        # would refuse it access to this service, and log that).
        if self.monitoring():
            return None
        return super().get_current_user()

    async def get(self):
        result = await self.answer()
        detailed = self.monitoring() or self.current_user is not None
        self.set_status(200 if result["ok"] else 503)
        self.set_header("Cache-Control", "no-store")
        wants_json = self.get_argument("format", "") == "json" or "application/json" in (
            self.request.headers.get("Accept", "")
        )
        if wants_json:
            self.set_header("Content-Type", "application/json")
            return self.finish(json.dumps(result if detailed else anonymous(result)))
        if not detailed and self.get_argument("detail", "") == "1":
            return self.redirect(self.get_login_url())  # the hub's login, then back here
        template = self.settings["jinja"].get_template("health.html")
        self.finish(template.render(result=result, detailed=detailed))
