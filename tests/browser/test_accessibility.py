"""WCAG 2.1 AA by machine: axe-core (tests/support/axe.py) on every page the
portal serves, logged out, as a user (alice, before and with a running
session) and as a portal admin (carol), in the light and the dark theme (the
hub's toggle, stored in localStorage, which the admin service's pages
follow too). No serious or critical violation may be found outside the
checked-in allowlist (tests/browser/axe-allowlist.json), and every entry of
the allowlist must still match one: a new entry or a stale one fails.

Reflow (WCAG 1.4.10): each page, measured at 1280 CSS pixels wide, at 640
(a 1280-pixel window at 200 % zoom) and at 320 (at 400 %), never scrolls
sideways. Every page has a title of its own.

The test of the test: a violation injected into a page is found."""

import pytest

from tests.support.axe import judge, load_allowlist, violations

THEMES = ("light", "dark")
ANONYMOUS = ["/hub/login", "/services/portal/health"]
USER = [
    "/hub/home",
    "/hub/spawn",
    "/hub/token",
    "/hub/no-such-page",
    "/hub/user/alice/",
    "/services/portal/profiles",
    "/services/portal/presets",
    "/services/portal/jobs",
    "/services/portal/usage",
    "/services/portal/cluster",
    "/services/portal/health?detail=1",
    "/services/portal/no-such-page",
]
ADMIN = [
    "/hub/admin",
    "/services/portal/profiles",
    "/services/portal/profiles/new",
    "/services/portal/profiles/pytorch",
    "/services/portal/profiles/pytorch/history",
    "/services/portal/images",
    "/services/portal/usage",
    "/services/portal/jobs",
]
WITH_SESSION = ["/hub/home"]
# a 1280-pixel window at 100, 200 and 400 % zoom, in CSS pixels
REFLOW_WIDTHS = (1280, 640, 320)
OVERFLOW = """() => {
  const d = document.documentElement;
  return d.scrollWidth - d.clientWidth;
}"""


def themed_page(browser, theme):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_init_script(f"localStorage.setItem('jupyterhub-bs-theme', '{theme}')")
    return context, context.new_page()


def scan(page, hub, paths, who, theme, overflows, shot=None):
    found, titles = [], {}
    for path in paths:
        page.goto(hub + path)
        try:
            page.wait_for_load_state("networkidle", timeout=5000)
        except Exception:
            pass  # a page that polls: scanned as it is
        assert page.evaluate("document.documentElement.dataset.bsTheme") == theme, path
        titles[path] = page.title()
        found += violations(page, path.split("?")[0])
        if theme == "light":  # the layout is the same in both
            for width in REFLOW_WIDTHS:
                page.set_viewport_size({"width": width, "height": 800})
                page.wait_for_timeout(50)
                if (over := page.evaluate(OVERFLOW)) > 0:
                    overflows[(who, path, width)] = over
            page.set_viewport_size({"width": 1280, "height": 800})
        if shot and path in ("/hub/home", "/services/portal/usage"):
            name = path.strip("/").replace("/", "-")
            shot(page, f"a11y-{who}-{theme}-{name}")
    return found, titles


def login_as(page, hub, name, accounts):
    """Log in (a user with a running session is sent on to it)."""
    page.goto(hub + "/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", accounts[name]["password"])
    with page.expect_navigation():
        page.click("#login_submit")


@pytest.mark.slow
def test_every_page_passes_axe_core_in_light_and_dark(
    hub, browser, browser_login, accounts, session, shot, capsys
):
    entries = load_allowlist()
    found, counts, titles, overflows = [], {}, {}, {}

    def record(who, theme, paths, page):
        got, seen = scan(page, hub, paths, who, theme, overflows, shot)
        found.extend(got)
        titles.update({(who, p): t for p, t in seen.items()})
        for v in got:
            key = (who, theme, v["page"], v["impact"])
            counts[key] = counts.get(key, 0) + 1

    for theme in THEMES:
        context, page = themed_page(browser, theme)
        record("anonymous", theme, ANONYMOUS, page)
        context.close()
        for who, paths in (("alice", USER), ("carol", ADMIN)):
            context, page = themed_page(browser, theme)
            browser_login(page, who)
            record(who, theme, paths, page)
            context.close()

    session("alice", profile="pytorch", gpus=1)
    for theme in THEMES:
        context, page = themed_page(browser, theme)
        login_as(page, hub, "alice", accounts)
        record("alice-with-session", theme, WITH_SESSION, page)
        assert page.locator(".session-card").count() == 1
        context.close()

    unexplained, unused = judge(found, entries)
    with capsys.disabled():
        print("\naxe-core violations (WCAG 2.1 A/AA) per page, by impact:")
        for (who, theme, path, impact), n in sorted(counts.items()):
            print(f"  {who:<18} {theme:<5} {path:<42} {impact:<9} {n}")
        print(f"  pages scanned: {len(titles)} per theme; allowlist entries: {len(entries)}")
        print(f"  reflow at {REFLOW_WIDTHS} CSS pixels: {len(overflows)} pages scroll sideways")
    assert not overflows, f"pages that scroll sideways (who, path, width): pixels: {overflows}"
    assert not unexplained, "\n".join(
        f"{v['page']}: {v['rule']} ({v['impact']}) at {v['target']}: {v['summary']}"
        for v in unexplained
    )
    assert not unused, f"allowlist entries that match nothing any more: {unused}"
    # every page has a title of its own (hub pages: not JupyterHub's one title)
    for who in ("alice", "carol"):
        mine = {p: t for (w, p), t in titles.items() if w == who}
        assert len(set(mine.values())) == len(mine), mine


def test_an_injected_violation_and_a_stale_allowlist_entry_are_found(hub, page):
    page.goto(hub + "/hub/login")
    page.evaluate("""() => {
      const p = document.createElement("p");
      p.id = "injected";
      p.textContent = "grey on grey";
      p.style.cssText = "color: #777; background: #888";
      document.querySelector("main").append(p);
    }""")
    entries = load_allowlist()
    unexplained, unused = judge(violations(page, "/hub/login"), entries)
    assert [(v["rule"], v["target"]) for v in unexplained] == [("color-contrast", "#injected")]
    # this page has nothing of the admin page's entry: it would be stale here
    assert unused == entries
    # allowed by an entry of its own, it is no longer reported, and the entry is used
    own = {"page": "/hub/login", "rule": "color-contrast", "target": "#inj.*", "why": "a test"}
    assert judge(violations(page, "/hub/login"), [own]) == ([], [])
