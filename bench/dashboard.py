"""TensorBoard's dashboard as a person waits for it: its first load in Chromium.

One load is a new browser context (an empty cache: every request is made
again), timed from the navigation to the moment the ``train/loss`` chart of
TensorBoard's landing page (Time Series) shows its lines. TensorBoard draws
that chart with WebGL in a worker, on an offscreen canvas the page's DOM
cannot read, so "shows" is what a person sees: a screenshot of a thin strip
across the middle of the chart holds a pixel of a run's colour (the runs
table's swatches; the worker draws all the runs' lines at once, and runs of
the same data hide each other). A line crosses the strip; the grid and the
step marker are grey, the axes outside it.

Through the portal: the session's TensorBoard at the URL its API returned, on
the hub's HTTPS, checked against the portal's CA (the browser's NSS store
trusts it, as in the browser tests). The browser logs in through the hub's
login form once, and opens the TensorBoard there (the hub's OAuth sets the
session's cookie); each load starts from that context's cookies. Directly:
TensorBoard's own server (``python -m tensorboard.main``) over TCP on the
session's node address and a free port, on the same log folder, with the
same Python (that of the session's TensorBoard), run by the same user with a
minimal environment; stopped afterwards. Loads alternate, portal then direct.
"""

import base64
import contextlib
import os
import pwd
import re
import statistics
import struct
import subprocess
import tempfile
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench.train import session_tensorboard
from tests.support.browser import CHROMIUM_ARGS, trusting_home

TAG = "train/loss"
CHART = f'scalar-card:has(tb-truncated-path.tag[title="{TAG}"]) line-chart canvas'
SWATCHES = "runs-selector button.run-color-swatch"
# A desktop screen: the template's three cards (test/accuracy, train/accuracy,
# train/loss) are all in view, as TensorBoard draws only what is.
VIEWPORT = {"width": 1920, "height": 1080}
STRIP = 8  # pixels: the width of the strip across the chart that is looked at
TOLERANCE = 24  # per channel, for the antialiased edges of a line
LOADS = 5  # of each kind
TIMEOUT = 90  # seconds for one load
LISTENING = re.compile(r"TensorBoard \S+ at (http://\S+/) ")

# The train/loss chart's place and the runs' colours, or null before there is a chart.
FIND_CHART = """([chart, swatches]) => {
  const canvas = document.querySelector(chart);
  if (!canvas) return null;
  const r = canvas.getBoundingClientRect();
  const colors = Array.from(document.querySelectorAll(swatches),
                            (e) => getComputedStyle(e).backgroundColor);
  return {x: r.x, y: r.y, width: r.width, height: r.height, colors};
}"""


@dataclass
class Request:
    """One request of a load: times in ms from the navigation's start."""

    method: str
    path: str  # below the TensorBoard's URL, without the query
    status: int
    start_ms: float
    end_ms: float
    bytes: int  # response headers and body as they came (compressed)


@dataclass
class Load:
    seconds: float
    requests: list  # the Requests finished when the chart was seen
    failed: list  # the URLs of requests that failed

    @property
    def bytes(self):
        return sum(r.bytes for r in self.requests)


# -- what the screenshot shows ------------------------------------------------


def png_pixels(data):
    """The (r, g, b) pixels of an 8-bit RGB or RGBA PNG (Chromium's screenshots)."""
    pos, idat = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color_type, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat.append(chunk)
        pos += 12 + length
    if depth != 8 or color_type not in (2, 6) or interlace:
        raise ValueError(f"PNG of depth {depth}, colour type {color_type}: not decoded here")
    bpp = 3 if color_type == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    previous = bytearray(stride)
    pixels = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = previous[i]
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                corner = previous[i - bpp] if i >= bpp else 0
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + best) & 0xFF
        pixels.extend(tuple(line[i : i + 3]) for i in range(0, stride, bpp))
        previous = line
    return pixels


def css_rgb(value):
    """``rgb(66, 80, 102)`` (a computed colour) as a tuple."""
    return tuple(int(v) for v in re.findall(r"\d+", value)[:3])


def shows_color(png, colors):
    """Whether the screenshot has a pixel of one of the colours."""
    return any(
        all(abs(a - b) <= TOLERANCE for a, b in zip(p, c, strict=True))
        for p in set(png_pixels(png))
        for c in colors
    )


def wait_drawn(page, cdp, deadline):
    """The monotonic time just before the first screenshot that showed the lines.

    The screenshots are DevTools' own (``cdp``: the page's session), a few
    times faster than Playwright's, which wait for fonts and restyle the page."""
    while time.monotonic() < deadline:
        chart = page.evaluate(FIND_CHART, [CHART, SWATCHES])
        if not chart or not chart["colors"] or chart["width"] <= STRIP:
            page.wait_for_timeout(10)
            continue
        clip = {
            "x": chart["x"] + (chart["width"] - STRIP) / 2,
            "y": chart["y"],
            "width": STRIP,
            "height": chart["height"],
            "scale": 1,
        }
        before = time.monotonic()
        shot = cdp.send("Page.captureScreenshot", {"clip": clip, "optimizeForSpeed": True})
        if shows_color(base64.b64decode(shot["data"]), [css_rgb(c) for c in chart["colors"]]):
            return before
    raise TimeoutError(f"the {TAG} chart of {page.url} showed no line in time")


# -- loads ------------------------------------------------------------------------


def request_record(request, base_path, origin_ms):
    timing = request.timing
    response = request.response()
    sizes = request.sizes()
    body = sizes["responseBodySize"]
    if body < 0 and response is not None:  # not known (a worker's script)
        body = int(response.headers.get("content-length", 0))
    path = urlsplit(request.url).path
    if path.startswith(base_path):
        path = "/" + path[len(base_path) :]
    return Request(
        method=request.method,
        path=path,
        status=response.status if response else 0,
        start_ms=timing["startTime"] - origin_ms,
        end_ms=timing["startTime"] - origin_ms + timing["responseEnd"],
        bytes=max(0, body) + max(0, sizes["responseHeadersSize"]),
    )


def load(browser, url, storage_state=None):
    """One load of ``url`` in a new context: seconds to the chart drawn and its requests."""
    context = browser.new_context(viewport=VIEWPORT, storage_state=storage_state)
    try:
        page = context.new_page()
        cdp = context.new_cdp_session(page)
        finished, failed = [], []
        page.on("requestfinished", lambda request: finished.append(request))
        page.on("requestfailed", lambda request: failed.append(request))
        started = time.monotonic()
        response = page.goto(url, wait_until="commit", timeout=TIMEOUT * 1000)
        seen = wait_drawn(page, cdp, started + TIMEOUT)
        seconds = seen - started
        seen_ms = time.time() * 1000 - (time.monotonic() - seen) * 1000
        if response.status != 200 or response.request.redirected_from is not None:
            raise RuntimeError(f"{url} answered {response.status} (redirected: {page.url})")
        origin_ms = page.evaluate("performance.timeOrigin")
        base_path = urlsplit(url).path
        requests = [request_record(r, base_path, origin_ms) for r in finished]
        return Load(
            seconds,
            [r for r in requests if r.end_ms + origin_ms <= seen_ms],
            [r.url for r in failed],
        )
    finally:
        context.close()


def login_state(browser, hub_url, name, password, tb_url):
    """The cookies of a browser logged in through the hub's form that opened ``tb_url``."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.goto(hub_url + "/hub/login")
        page.fill("#username_input", name)
        page.fill("#password_input", password)
        page.click("#login_submit")
        page.wait_for_url(lambda url: "/hub/login" not in url, timeout=60_000)
        page.goto(tb_url, timeout=TIMEOUT * 1000)  # the hub's OAuth, then TensorBoard
        wait_drawn(page, context.new_cdp_session(page), time.monotonic() + TIMEOUT)
        return context.storage_state()
    finally:
        context.close()


# -- TensorBoard, directly -------------------------------------------------------


@contextlib.contextmanager
def direct_tensorboard(user, python, logdir, netns, host, timeout=60):
    """TensorBoard's own server of ``logdir`` with ``python``, as ``user`` with a
    minimal environment, in the network namespace ``netns`` (a node's), on
    ``host`` and a free port; yields its URL, and stops it at the end."""
    home = pwd.getpwnam(user).pw_dir
    env = {"HOME": home, "USER": user, "LOGNAME": user, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    command = [
        "nsenter", f"--net={netns}",
        "sudo", "-u", user, "env", "-i", *(f"{k}={v}" for k, v in env.items()),
        python, "-P", "-m", "tensorboard.main",
        "--logdir", logdir, "--host", host, "--port", "0", "--load_fast", "false",
    ]  # fmt: skip
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            command, cwd=home, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + timeout
            while not (match := LISTENING.search(_read(output))):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"TensorBoard did not start directly:\n{_read(output)}")
                time.sleep(0.2)
            yield match.group(1)
        finally:
            process.terminate()  # sudo passes it on
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _read(f):
    f.seek(0)
    return f.read().decode("utf-8", "replace")


# -- the measurement -------------------------------------------------------------


def dashboard_loads(hub_url, user, password, tb_url, host, say, loads=LOADS):
    """``(portal, direct)``: the Loads of the dashboard through the hub at
    ``tb_url`` (the one TensorBoard the session's API started for ``user``)
    and of TensorBoard directly on ``host`` (the session's node address),
    alternating."""
    from playwright.sync_api import sync_playwright

    pid, argv = session_tensorboard(user)
    python, logdir = argv[0], argv[argv.index("--logdir") + 1]
    with (
        direct_tensorboard(user, python, logdir, f"/proc/{pid}/ns/net", host) as direct_url,
        tempfile.TemporaryDirectory() as home,
        sync_playwright() as p,
    ):
        env = {**os.environ, "HOME": trusting_home(home)}
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, env=env
        )
        try:
            say(f"TensorBoard directly at {direct_url}; the browser logs in to the hub")
            state = login_state(browser, hub_url, user, password, tb_url)
            load(browser, direct_url)  # both have now read the logs and answered once
            portal, direct = [], []
            for i in range(loads):
                portal.append(load(browser, tb_url, state))
                direct.append(load(browser, direct_url))
                say(
                    f"dashboard {i + 1}/{loads}: portal {describe(portal[-1])}, "
                    f"direct {describe(direct[-1])}"
                )
        finally:
            browser.close()
    return portal, direct


def describe(one):
    failed = f", {len(one.failed)} failed" if one.failed else ""
    return f"{one.seconds:.2f} s ({len(one.requests)} requests, {one.bytes / 1024:.0f} KiB{failed})"


def waterfall(portal, direct, top=8):
    """Lines comparing the requests' medians, portal vs direct, the largest
    difference in a request's own time first: where the portal's time goes.

    Requests are matched by method, path and order (the third chart_worker.js
    with the third); a line gives when each starts (ms from the navigation)
    and how long it takes."""

    def medians(loads):
        times = defaultdict(list)
        for one in loads:
            count = defaultdict(int)
            for r in sorted(one.requests, key=lambda r: r.start_ms):
                key = (r.method, r.path, count[r.method, r.path])
                count[r.method, r.path] += 1
                times[key].append((r.start_ms, r.end_ms - r.start_ms, r.bytes))
        return {
            key: tuple(statistics.median(v[i] for v in values) for i in range(3))
            for key, values in times.items()
        }

    ours, theirs = medians(portal), medians(direct)
    both = ours.keys() & theirs.keys()
    gaps = sorted(((ours[k][1] - theirs[k][1], k) for k in both), reverse=True)[:top]
    lines = []
    for _, key in gaps:
        (ps, pt, pb), (ds, dt, _) = ours[key], theirs[key]
        name = f"{key[0]} {key[1]}" + (f" #{key[2] + 1}" if key[2] else "")
        lines.append(
            f"{name} ({pb / 1024:.0f} KiB): portal at {ps:.0f} ms for {pt:.0f} ms, "
            f"direct at {ds:.0f} ms for {dt:.0f} ms"
        )
    return lines
