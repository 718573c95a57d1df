"""``GET /services/portal/health``: the portal's parts (``portal.health``), as
JSON for monitors (``?format=json`` or ``Accept: application/json``) and as
a page for people; HTTP 503 naming the parts that are down. No login: it
holds nothing of a user's. One check runs at a time and its answer serves
every request of the next ``FRESH_SECONDS``, however many monitors ask."""

import asyncio
import json
import time

from tornado import web

from portal import health

FRESH_SECONDS = 5.0


class HealthHandler(web.RequestHandler):
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

    async def get(self):
        result = await self.answer()
        self.set_status(200 if result["ok"] else 503)
        self.set_header("Cache-Control", "no-store")
        wants_json = self.get_argument("format", "") == "json" or "application/json" in (
            self.request.headers.get("Accept", "")
        )
        if wants_json:
            self.set_header("Content-Type", "application/json")
            return self.finish(json.dumps(result))
        template = self.settings["jinja"].get_template("health.html")
        self.finish(template.render(result=result))
