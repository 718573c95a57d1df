"""A portal admin on the test hub: carol (portal-admins) holds the
portal-admin role, not JupyterHub's admin role. She cannot point the hub at
another proxy (which would send her the proxy's token, and with it every
route: /hub/login to a page of hers), nor at another service, make admins,
add herself or others to the admin group, or mint tokens for others; she
keeps what a portal admin does: the admin page, listing users and sessions,
starting, stopping and extending anyone's session, editing profiles."""

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from portal.roles import ADMIN_SCOPE
from tests.support.internaltls import proxy_routes
from tests.support.jobs import scontrol_job, user_jobs, wait_no_jobs


class Listener(ThreadingHTTPServer):
    """carol's listener: records every request the hub would send it."""

    def __init__(self):
        self.seen = []
        listener = self

        class Record(BaseHTTPRequestHandler):
            def record(self):
                listener.seen.append((self.command, self.path, self.headers.get("Authorization")))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = record

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Record)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def listener():
    server = Listener()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def carols_token(login):
    """A token carol makes for herself (all her rights), deleted at the end."""
    carol = login("carol")
    r = carol.api("POST", "/users/carol/tokens", json={"note": "admin-role test"})
    assert r.status_code == 201, r.text
    yield r.json()["token"]
    carol.api("DELETE", f"/users/carol/tokens/{r.json()['id']}")


def refused(r, scope):
    """JupyterHub's refusal for want of ``scope`` (not an XSRF or login failure)."""
    return r.status_code == 403 and f"requires any of [{scope}]" in r.json()["message"]


def test_a_portal_admin_holds_her_role_and_no_hub_admin(login):
    me = login("carol").api("GET", "/user").json()
    assert me["admin"] is False and "portal-admins" in me["groups"]
    scopes = set(me["scopes"])
    assert {"admin-ui", "list:users", "read:users", "servers", ADMIN_SCOPE} <= scopes
    assert not scopes & {"proxy", "admin:users", "tokens", "access:servers", "shutdown"}


def test_a_portal_admin_cannot_point_the_hub_at_another_proxy(hub, login, carols_token, listener):
    routes = proxy_routes()
    carol = login("carol")
    elsewhere = {"api_url": listener.url}
    # with her login cookie and the hub's XSRF header, as the admin page would
    r = carol.api("PATCH", "/proxy", json=elsewhere)
    assert refused(r, "proxy"), r.text
    r = carol.api("PATCH", "/proxy", json={**elsewhere, "auth_token": "hers"})
    assert refused(r, "proxy"), r.text
    # with the token she made for herself
    bearer = {"Authorization": f"token {carols_token}"}
    r = requests.patch(f"{hub}/hub/api/proxy", json=elsewhere, headers=bearer, timeout=30)
    assert refused(r, "proxy"), r.text
    # nor may she read the routes or make the hub resync them
    assert refused(carol.api("GET", "/proxy"), "proxy")
    assert refused(requests.post(f"{hub}/hub/api/proxy", headers=bearer, timeout=30), "proxy")
    # nor ask for a token that has the scope
    r = carol.api("POST", "/users/carol/tokens", json={"scopes": ["proxy"]})
    assert r.status_code == 400 and "not held by User carol" in r.json()["message"], r.text

    # the hub sent nothing to her listener, and still routes through its proxy
    assert listener.seen == []
    assert proxy_routes() == routes
    assert login("bob").session.get(f"{hub}/hub/home", timeout=30).status_code == 200
    assert listener.seen == []


def test_a_portal_admin_cannot_add_a_service_at_her_address(hub, login, listener):
    carol = login("carol")
    r = carol.api("POST", "/services/mine", json={"url": listener.url, "oauth_no_confirm": True})
    assert refused(r, "admin:services"), r.text
    assert "/services/mine/" not in proxy_routes()
    assert listener.seen == []


def test_a_portal_admin_makes_no_admins_and_takes_no_tokens(login):
    for name in ("alice", "bob"):
        login(name)  # known to the hub
    carol = login("carol")
    for name in ("bob", "carol"):
        r = carol.api("PATCH", f"/users/{name}", json={"admin": True})
        assert refused(r, "admin:users"), (name, r.text)
    assert refused(
        carol.api("POST", "/users", json={"usernames": ["mallory"], "admin": True}), "admin:users"
    )
    # the admin group comes from LDAP: nobody joins it through the hub
    r = carol.api("POST", "/groups/portal-admins/users", json={"users": ["bob"]})
    assert refused(r, "groups"), r.text
    # no token for another user, nor a look at theirs
    r = carol.api("POST", "/users/alice/tokens", json={"note": "mine"})
    assert r.status_code == 403 and "no permissions to generate tokens" in r.json()["message"]
    # without read:tokens the hub does not say the list exists (404, not 403)
    r = carol.api("GET", "/users/alice/tokens")
    assert r.status_code in (403, 404), r.text
    bob = carol.user_model("bob")
    assert bob["admin"] is False and "portal-admins" not in bob["groups"]
    assert "auth_state" not in bob


def test_a_portal_admin_keeps_the_admin_page_and_the_sessions(
    hub, login, portal, session, restore_profiles
):
    alice = session("alice", profile="pytorch", gpus=1, hours=2)
    ((job_id, _),) = user_jobs("alice")
    carol, carols_portal = login("carol"), portal("carol")

    # the hub's admin page, its link, and what it lists
    page = carol.session.get(f"{hub}/hub/admin", timeout=30)
    assert page.status_code == 200 and 'id="react-admin-hook"' in page.text
    home = carol.session.get(f"{hub}/hub/home", timeout=30).text
    assert 'href="/hub/admin"' in home
    assert 'href="/hub/admin"' not in login("bob").session.get(f"{hub}/hub/home", timeout=30).text
    r = carol.api("GET", "/users", params={"include_stopped_servers": "1"})
    assert r.status_code == 200, r.text
    users = {u["name"]: u for u in r.json()}
    assert {"alice", "carol"} <= set(users)
    assert users["alice"]["servers"][""]["ready"] and users["alice"]["last_activity"]
    assert carol.api("GET", "/groups").status_code == 200

    # alice's session: its GPU figures and its extension, from the hub and the service
    r = carol.session.get(f"{hub}/hub/portal/sessions/alice/gpus", timeout=30)
    assert r.status_code == 200 and "gpus" in r.json(), r.text
    r = carols_portal.send("POST", "api/sessions/alice/extend", json={"hours": 1})
    assert r.status_code == 200 and r.json()["time_limit"] == "03:00:00", r.text
    xsrf = re.search(r'xsrf_token: "([^"]+)"', home).group(1)
    r = carol.session.post(
        f"{hub}/hub/portal/sessions/alice/extend",
        data={"_xsrf": xsrf, "hours": "1"},
        allow_redirects=False,
        timeout=60,
    )
    assert r.status_code == 303, r.text
    assert scontrol_job(job_id)["TimeLimit"] == "04:00:00"

    # she does not enter alice's JupyterLab (it would run on the hub's origin)
    r = carol.session.get(f"{hub}/user/alice/lab", timeout=60)
    # refused (403, or 404 where the hub does not say the server exists to her)
    assert r.status_code in (403, 404) and "JupyterLab" not in r.text, r.url
    assert alice.lab_answers("alice")

    # a profile edit on the admin service, whose pages link to the admin page
    current = carols_portal.profile("tensorflow")
    r = carols_portal.put(
        "tensorflow", display_name="TensorFlow (admin)", revision=current["revision"]
    )
    assert r.status_code == 200 and r.json()["display_name"] == "TensorFlow (admin)", r.text
    page = carols_portal.get("profiles").text
    assert 'href="/hub/admin"' in page
    assert 'href="/hub/admin"' not in portal("bob").get("profiles").text

    # she stops alice's session
    r = carol.api("DELETE", "/users/alice/server")
    assert r.status_code in (202, 204), r.text
    carol.wait_stopped("alice")
    wait_no_jobs("alice")
