"""A page a user writes is never run on the hub's origin: each user's server
is served on an origin of its own (NAME.DOMAIN, [hub] domain), which holds
no cookie of the hub's. bob writes an HTML page into his own JupyterLab
extensions folder (served by his server without any login) and into his
home (/files, /view), and sends the links to alice and to carol (a portal
admin). Opened in their logged-in browsers, the page runs, and gets
nothing: it cannot read their hub pages or API, cannot make a token for
them, and sees none of their cookies."""

import json
import pwd
import subprocess
from urllib.parse import urlparse

import pytest

PAGE = """<!doctype html><html><head><title>running</title></head><body>
<pre id="out"></pre><script>
const HUB = %(hub)s;
(async () => {
  const got = {};
  async function attempt(name, url, options) {
    try {
      const r = await fetch(url, {credentials: "include", ...options});
      got[name] = r.type === "opaque" ? "opaque" : r.status + " " + (await r.text()).slice(0, 300);
    } catch (e) { got[name] = "blocked: " + e; }
  }
  await attempt("home", HUB + "/hub/home", {});
  await attempt("user", HUB + "/hub/api/user", {});
  for (const victim of ["alice", "carol"]) {
    await attempt("token " + victim, HUB + "/hub/api/users/" + victim + "/tokens", {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({note: "planted by bob", expires_in: 600})});
    // a form post needs no preflight: sent with the cookies, answer unreadable
    await attempt("form " + victim, HUB + "/hub/api/users/" + victim + "/tokens", {
      method: "POST", mode: "no-cors", body: new URLSearchParams({note: "planted by bob"})});
  }
  got.cookie = document.cookie;
  document.getElementById("out").textContent = JSON.stringify(got);
  document.title = "done";
})();
</script></body></html>
"""


def write_as_bob(path, text):
    subprocess.run(
        ["sudo", "-u", "bob", "sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path],
        input=text, text=True, check=True,
    )  # fmt: skip


def tokens_planted(client, name):
    r = client.api("GET", f"/users/{name}/tokens")
    assert r.status_code == 200, r.text
    return [t for t in r.json()["api_tokens"] if t.get("note") == "planted by bob"]


@pytest.mark.slow
def test_a_page_bob_writes_takes_nothing_from_alice_or_carol(
    hub, session, login, browser, browser_login, shot
):
    session("bob", profile="pytorch", gpus=1)
    home = pwd.getpwnam("bob").pw_dir
    text = PAGE % {"hub": json.dumps(hub)}
    write_as_bob(f"{home}/.local/share/jupyter/labextensions/evil/static/evil.html", text)
    write_as_bob(f"{home}/evil.html", text)
    parsed = urlparse(hub)
    bobs = f"{parsed.scheme}://bob.{parsed.hostname}:{parsed.port}"
    links = {
        # served by bob's server without any login
        "extension asset": f"{bobs}/user/bob/lab/extensions/evil/static/evil.html",
        "extension asset, by the hub's host": f"{hub}/user/bob/lab/extensions/evil/static/"
        "evil.html",
        # bob's own files: his login only
        "files": f"{bobs}/user/bob/files/evil.html",
        "view": f"{bobs}/user/bob/view/evil.html",
    }
    for victim in ("alice", "carol"):
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        page = context.new_page()
        browser_login(page, victim)
        client = login(victim)
        ran_links = set()
        for what, url in links.items():
            page.goto(url)
            # bob's page is titled "running" until its script ends; any other
            # page (a login, a 403) is not his, and nothing is waited for
            ran = page.title() in ("running", "done")
            if ran:
                page.wait_for_function("document.title === 'done'", timeout=15000)
            host = urlparse(page.url).hostname
            if not ran:  # bob's login only: the page was not served to them
                assert "planted by bob" not in page.content(), (what, page.url)
                continue
            ran_links.add(what)
            got = json.loads(page.inner_text("#out"))
            shot(page, f"user-origin-{victim}-{what.replace(' ', '-').replace(',', '')}")
            # it ran on bob's origin, never the hub's
            assert host == f"bob.{parsed.hostname}", (what, page.url)
            for key in ("home", "user", f"token {victim}"):
                assert got[key].startswith("blocked"), (what, key, got[key])
            assert got[f"form {victim}"] == "opaque", (what, got)
            assert "jupyterhub" not in got["cookie"] and "_xsrf" not in got["cookie"], got
        context.close()
        # the page served without any login did run: the attack was tried
        assert "extension asset" in ran_links, (victim, ran_links)
        assert tokens_planted(client, victim) == [], victim
