"""What spawners/jupyterhub_patches.py relies on in JupyterHub 6.1.1 and
batchspawner 1.3.0: each test names a patch, and fails when the behaviour
it patches or works around changes (the internal TLS contexts' own check is
tests/unit/test_internal_tls.py's ``test_contexts_trust_the_internal_cas_alone``)."""

import doctest
import inspect
import logging
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from jupyterhub.app import JupyterHub
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.objects import Server
from jupyterhub.services.service import _ServiceSpawner
from jupyterhub.spawner import Spawner
from jupyterhub.user import User

from spawners import jupyterhub_patches
from spawners.jupyterhub_patches import PINNED, mark_cookie_request


def test_the_examples_hold():
    assert doctest.testmod(jupyterhub_patches).failed == 0


def test_the_installed_versions_are_the_ones_the_patches_were_checked_against():
    assert {name: version(name) for name in PINNED} == PINNED


def python(code):
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def test_install_routes_replaces_and_adds_the_portals_handlers_once():
    assert python(
        "\n".join(
            [
                "import batchspawner.api",
                "from jupyterhub import apihandlers as a, handlers as h",
                "before = list(h.default_handlers) + list(a.default_handlers)",
                "from spawners import jupyterhub_patches as p, handlers as ours",
                "assert list(h.default_handlers) + list(a.default_handlers) == before",
                "p.install_routes(None); p.install_routes(None)",  # idempotent
                "pages = {r: c.__name__ for r, c, *_ in h.default_handlers}",
                "api = {r: c.__name__ for r, c, *_ in a.default_handlers}",
                "print(pages['/spawn'], pages['/home'], api[r'/api/users/([^/]+)/server'])",
                "print(pages[ours.EXTEND_ROUTE], pages[ours.GPUS_ROUTE], api[ours.PORT_ROUTE])",
                "print(pages[ours.NOTICES_ROUTE], pages[ours.EXPECTED_ROUTE])",
                "from spawners import presets as pr",
                "print(pages[pr.ACTION_ROUTE], pages[pr.EDIT_ROUTE], api[pr.API_ITEM_ROUTE])",
                "print(len(h.default_handlers) - len(before) + len(a.default_handlers))",
                "print([r for r, *_ in a.default_handlers].count(ours.PORT_ROUTE))",
            ]
        )
    ) == [
        "PortalSpawnHandler", "PortalHomeHandler", "PortalUserServerAPIHandler",
        "SessionExtendHandler", "SessionGPUsHandler", "PortReportHandler",
        "NoticesHandler", "ExpectedStartHandler",
        "PresetActionHandler", "PresetEditHandler", "PresetAPI", "9", "1",
    ]  # fmt: skip


def test_jupyterhub_builds_its_routes_from_the_module_lists_once():
    source = inspect.getsource(JupyterHub.init_handlers)
    assert "h.extend(handlers.default_handlers)" in source
    assert "h.extend(apihandlers.default_handlers)" in source


def test_batchspawner_registers_its_port_report_when_its_api_is_imported():
    assert python(
        "from jupyterhub import apihandlers as a\n"
        "before = any(r == '/api/batchspawner' for r, *_ in a.default_handlers)\n"
        "import batchspawner.api\n"
        "after = [c.__name__ for r, c, *_ in a.default_handlers if r == '/api/batchspawner']\n"
        "print(before, after)"
    ) == ["False", "['BatchSpawnerAPIHandler']"]


def test_a_stop_under_way_is_jupyterhubs_private_stop_pending():
    assert "_stop_pending" in inspect.getsource(User.stop)
    assert Spawner._stop_pending is False
    assert jupyterhub_patches.stop_pending(Spawner()) is False


def test_refresh_auth_still_reads_token_authenticated_of_every_request():
    # when JupyterHub sets it on every request (or stops reading it), the fix may go
    assert "not self._token_authenticated" in inspect.getsource(BaseHandler.refresh_auth)
    assert not hasattr(BaseHandler, "_token_authenticated")

    class Request:
        pass

    cookie, token = Request(), Request()
    token._token_authenticated = True
    mark_cookie_request(cookie), mark_cookie_request(token), mark_cookie_request(None)
    assert (cookie._token_authenticated, token._token_authenticated) == (False, True)


def test_every_handler_prepares_through_base_handlers_prepare():
    assert inspect.iscoroutinefunction(BaseHandler.prepare)
    from jupyterhub.apihandlers.base import APIHandler

    assert "prepare" not in vars(APIHandler) or "super().prepare()" in inspect.getsource(
        APIHandler.prepare
    )


def test_internal_ssl_parts_the_fixes_replace_are_where_they_were():
    from jupyterhub import app, objects, user

    for module in (app, objects, user):  # imported by name: replaced in each
        assert "make_ssl_context" in vars(module)
    assert list(inspect.signature(Server.wait_up).parameters) == [
        "self", "timeout", "http", "ssl_context", "extra_path",
    ]  # fmt: skip
    assert "create_certs" in vars(_ServiceSpawner) or hasattr(_ServiceSpawner, "create_certs")
    # the services' certificates name localhost alone: the fix adds the hub's host
    assert "DNS:localhost" in inspect.getsource(app) or "localhost" in inspect.getsource(
        _ServiceSpawner
    )


def test_a_named_server_is_removed_as_jupyterhubs_api_removes_it():
    """jupyterhub_patches.forget_unstarted removes a server stored for a
    form only, as JupyterHub's DELETE with remove does (6.1.1)."""
    from jupyterhub.apihandlers.users import UserServerAPIHandler
    from jupyterhub.user import User

    source = inspect.getsource(UserServerAPIHandler.delete)
    assert "user._delete_spawner(spawner)" in source
    assert "self.db.delete(spawner.orm_spawner)" in source
    assert "user.spawners.pop(server_name, None)" in source
    assert callable(User._delete_spawner)


def test_jupyterhub_finds_a_cookies_user_by_a_cookie_id_it_never_changes():
    """install_user_lookups keeps a cookie id's user while JupyterHub 6.1.1
    looks users up by cookie_id and never assigns one after a user is made."""
    from jupyterhub import handlers, orm

    pkg = Path(handlers.__file__).parent.parent
    source = (pkg / "handlers" / "base.py").read_text()
    assert "orm.User.cookie_id == cookie_id" in source
    # find_user is orm.User.find by name, looked up in the hub's users
    assert "orm_user = orm.User.find(db=self.db, name=name)" in source
    code = "\n".join(p.read_text() for p in pkg.rglob("*.py") if "tests" not in p.parts)
    assert re.findall(r"\.cookie_id\s*=[^=]", code) == []
    assert orm.User.cookie_id.property.columns[0].unique


def test_a_cookies_user_comes_from_memory_while_it_is_still_that_users(monkeypatch):
    from jupyterhub import orm
    from jupyterhub.user import UserDict

    monkeypatch.setattr(BaseHandler, "_user_for_cookie", BaseHandler._user_for_cookie)
    monkeypatch.setattr(BaseHandler, "find_user", BaseHandler.find_user)
    db = orm.new_session_factory("sqlite:///:memory:")()
    alice, bob = orm.User(name="alice"), orm.User(name="bob")
    db.add_all([alice, bob])
    db.commit()
    alice_cookie = alice.cookie_id
    queries = []

    class Handler:  # what _user_for_cookie uses of a BaseHandler
        cookie_max_age_days = 14
        settings = {"activity_resolution": 30}
        _record_activity = BaseHandler._record_activity
        _user_from_orm = BaseHandler._user_from_orm
        hub = type("Hub", (), {"base_url": "/hub/"})
        log = logging.getLogger("test")

        def __init__(self, cookie):
            self.cookie, self.db = cookie, db
            self.users = users

        def get_secure_cookie(self, name, value=None, max_age_days=None):
            return self.cookie.encode() if self.cookie else None

        def get_cookie(self, name):
            return self.cookie

        def clear_cookie(self, *args, **kwargs):
            pass

    users = UserDict(lambda: db, {})
    jupyterhub_patches.install_user_lookups()
    jupyterhub_patches.install_user_lookups()  # idempotent
    lookup = BaseHandler._user_for_cookie
    from sqlalchemy import event

    event.listen(db.bind, "before_cursor_execute", lambda *a: queries.append(a[2]))
    assert lookup(Handler(alice.cookie_id), "c").name == "alice"
    queries.clear()
    assert lookup(Handler(alice.cookie_id), "c").name == "alice"
    assert [q for q in queries if q.startswith("SELECT")] == []  # from memory
    assert lookup(Handler(bob.cookie_id), "c").name == "bob"
    assert lookup(Handler("no-such-cookie-id"), "c") is None
    # a user by name, the same way
    find = BaseHandler.find_user
    assert find(Handler(None), "bob").name == "bob"
    queries.clear()
    assert find(Handler(None), "bob").name == "bob" and queries == []
    bob.name = "robert"  # renamed: the old name finds no one
    db.commit()
    assert find(Handler(None), "bob") is None
    assert find(Handler(None), "robert").name == "robert"
    users.delete(alice)  # a deleted user's cookie finds no one, nor their name
    assert lookup(Handler(alice_cookie), "c") is None
    assert find(Handler(None), "alice") is None


def test_a_preset_starts_through_the_spawn_handlers_own_steps():
    """spawners.presets.PresetActionHandler.spawn_preset takes the steps of
    JupyterHub 6.1.1's ``SpawnHandler._post`` with options of its own."""
    from jupyterhub.handlers.pages import SpawnHandler

    post = inspect.getsource(SpawnHandler._post)
    for step in (
        "self._check_named_server_request(user, server_name, display_name)",
        "user.get_or_create_spawner(",
        "pending_url = self._get_pending_url(user, server_name)",
        "self._wrap_spawn_single_user(",
    ):
        assert step in post, step
    assert list(inspect.signature(SpawnHandler._wrap_spawn_single_user).parameters) == [
        "self", "user", "server_name", "display_name", "spawner", "pending_url", "options",
    ]  # fmt: skip
    assert list(inspect.signature(BaseHandler._check_named_server_request).parameters)[:4] == [
        "self", "user", "server_name", "display_name",
    ]  # fmt: skip


def test_jupyterhub_checks_a_started_server_through_wait_up_of_its_api():
    """install_answered_wait relies on User._wait_up asking Server.wait_up
    with http=True and extra_path="api", and reading the answer's headers."""
    source = inspect.getsource(User._wait_up)
    assert "server = spawner.server" in source
    assert re.search(r"server\.wait_up\(\s*http=True,.*extra_path=\"api\"", source, re.S)
    assert "resp.headers.get('X-JupyterHub-Version')" in source


async def test_wait_up_takes_the_spawners_fresh_answer_of_its_url_once(monkeypatch):
    asked = []

    async def ask(self, timeout=10, http=False, ssl_context=None, extra_path=""):
        asked.append((self.url, extra_path))
        return "asked"

    monkeypatch.setattr(Server, "wait_up", ask)
    jupyterhub_patches.install_answered_wait()
    jupyterhub_patches.install_answered_wait()  # idempotent
    server = Server(ip="n1", port=4242, base_url="/user/a/")
    url = "http://n1:4242/user/a/api"
    jupyterhub_patches.note_answer(server, url, "answered")
    assert await server.wait_up(http=True, extra_path="api") == "answered"
    assert asked == []
    assert await server.wait_up(http=True, extra_path="api") == "asked"  # once only
    # another URL's answer, or a stale one, is not taken
    jupyterhub_patches.note_answer(server, "http://n2:4242/user/a/api", "answered")
    assert await server.wait_up(http=True, extra_path="api") == "asked"
    jupyterhub_patches.note_answer(server, url, "answered")
    url, response, when = server.portal_answer
    server.portal_answer = (url, response, when - jupyterhub_patches.ANSWER_FRESH_SECONDS - 1)
    assert await server.wait_up(http=True, extra_path="api") == "asked"
    assert len(asked) == 3
