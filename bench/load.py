"""The hub's pages under simulated users: login page, spawn page, home, API polls.

Each simulated user logs in through LDAP (the login form, with its XSRF
token), then, until the time is up, asks for one page after another (login
page without cookies, as a new visitor; spawn page; home), with a think time
between pages: ``THINK``, 2 to 8 s (5 s on average: a person reads a page
before the next click; load-testing practice puts 5 to 10 s). Meanwhile each
user's open tab polls the hub's REST API for the state of its server every
``POLL_SECONDS``, 10 s, JupyterLab's own polling interval (``GET
/hub/api/users/NAME`` with the login cookie and the XSRF header, as the hub's
pages' scripts ask it): the ``api`` figures. ``STRESS_THINK``, 0.5 to 1.5 s
between pages (the first round's figure, at 50 users), is the same users
clicking ten times as fast: the hub's limit, not a site's day. One asyncio
client for all of them
(aiohttp), over HTTPS with the portal's certificate checked, at ``localhost``
(aiohttp's cookie jar keeps no cookie of an IP host).
"""

import asyncio
import random
import re
import statistics
import time

import aiohttp

from bench.hubs import ssl_context

PAGES = {"login": "/hub/login", "spawn": "/hub/spawn", "home": "/hub/home"}
THINK = (2.0, 8.0)  # seconds between a user's pages
STRESS_THINK = (0.5, 1.5)
POLL_SECONDS = 10.0  # an open tab's status poll


async def _login(session, base, name, password):
    async with session.get(base + "/hub/login") as r:
        page = await r.text()
    match = re.search(r'name="_xsrf"\s+value="([^"]+)"', page)
    data = {"username": name, "password": password}
    if match:
        data["_xsrf"] = match.group(1)
    async with session.post(base + "/hub/login", data=data, allow_redirects=False) as r:
        if r.status != 302:
            raise RuntimeError(f"login of {name} answered {r.status}")


async def _browse(base, session, anonymous, until, timings, failures, think):
    pages = list(PAGES)
    random.shuffle(pages)
    await asyncio.sleep(random.uniform(*think))
    i = 0
    while time.monotonic() < until:
        page = pages[i % len(pages)]
        i += 1
        client = anonymous if page == "login" else session
        start = time.perf_counter()
        async with client.get(base + PAGES[page], allow_redirects=False) as r:
            await r.read()
            status = r.status
        elapsed = (time.perf_counter() - start) * 1000
        if status == 200:
            timings[page].append(elapsed)
        else:
            failures.append((page, status))
        await asyncio.sleep(random.uniform(*think))


async def _poll(base, session, name, until, timings, failures, every):
    """The open tab's status poll of the hub's API, every ``every`` seconds."""
    await asyncio.sleep(random.uniform(0, every))
    url = base + f"/hub/api/users/{name}"
    while time.monotonic() < until:
        xsrf = next((c.value for c in session.cookie_jar if c.key == "_xsrf"), "")
        start = time.perf_counter()
        async with session.get(url, headers={"X-XSRFToken": xsrf}, allow_redirects=False) as r:
            body = await r.read()
            status = r.status
        elapsed = (time.perf_counter() - start) * 1000
        if status == 200 and b'"name"' in body:
            timings["api"].append(elapsed)
        else:
            failures.append(("api", status))
        await asyncio.sleep(every)


async def _run(base, accounts, duration, think, poll):
    timings = {page: [] for page in (*PAGES, "api")}
    failures = []
    timeout = aiohttp.ClientTimeout(total=60)
    tls = ssl_context()

    def client(jar):
        connector = aiohttp.TCPConnector(limit=0, ssl=tls)
        return aiohttp.ClientSession(cookie_jar=jar, connector=connector, timeout=timeout)

    anonymous = client(aiohttp.DummyCookieJar())
    sessions = {name: client(aiohttp.CookieJar()) for name in accounts}
    try:
        # every user logs in first (LDAP), then the clock starts
        await asyncio.gather(
            *(_login(sessions[name], base, name, pw) for name, pw in accounts.items())
        )
        until = time.monotonic() + duration
        await asyncio.gather(
            *(
                _browse(base, s, anonymous, until, timings, failures, think)
                for s in sessions.values()
            ),
            *(_poll(base, s, n, until, timings, failures, poll) for n, s in sessions.items()),
        )
    finally:
        for s in [anonymous, *sessions.values()]:
            await s.close()
    return timings, failures


# JupyterHub's own log line of a request: its status, path and tornado's request time
HANDLER_LINE = re.compile(r"\] (\d{3}) GET (/hub/[^\s?]*)\S* \([^)]*\) ([\d.]+)ms$")
HANDLER_PAGES = {"/hub/login": "login", "/hub/spawn": "spawn", "/hub/home": "home"}


def handler_times(log_lines):
    """{page: [ms, ...]}: the time the hub itself took for each page of the
    load (tornado's request time, from the hub's log lines), without the
    proxy, TLS and the client's side.

    >>> handler_times([
    ...     "[I 2026 JupyterHub log:192] 200 GET /hub/spawn (bench001@127.0.0.1) 16.02ms",
    ...     "[I 2026 JupyterHub log:192] 200 GET /hub/api/users/bench002 (b@1) 8.12ms",
    ...     "[I 2026 JupyterHub log:192] 200 GET /hub/api/users?state=[secret] (c@1) 7.70ms",
    ...     "[I 2026 JupyterHub log:192] 302 GET /hub/ (bench001@127.0.0.1) 1.00ms",
    ... ])
    {'login': [], 'spawn': [16.02], 'home': [], 'api': [8.12]}
    """
    times = {page: [] for page in (*PAGES, "api")}
    for line in log_lines:
        match = HANDLER_LINE.search(line.rstrip())
        if not match or match.group(1) != "200":
            continue
        path, ms = match.group(2), float(match.group(3))
        if path in HANDLER_PAGES:
            times[HANDLER_PAGES[path]].append(ms)
        elif path.startswith("/hub/api/users/") and "/" not in path[len("/hub/api/users/") :]:
            times["api"].append(ms)
    return times


def p95(values):
    return statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else 0.0


def hub_latency(hub, accounts, duration, think=THINK, poll=POLL_SECONDS):
    """{page: [ms, ...]} and the failed requests, for ``len(accounts)`` simulated
    users with ``think`` seconds (low, high) between pages and a status poll
    every ``poll`` seconds."""
    return asyncio.run(_run(hub.localhost_url, accounts, duration, think, poll))
