"""The session's launcher (``portal-session``): its port report, made early and cheap."""

import io
import json
import os
import subprocess
import sys
import urllib.error

import pytest

from portal.session import launch


def test_the_service_url_gets_the_chosen_port():
    url = "http://10.200.0.2:0/user/alice/"
    assert launch.with_port(url, 41234) == "http://10.200.0.2:41234/user/alice/"


def test_the_report_is_the_port_alone_with_the_token_in_a_header():
    request = launch.report_request("http://10.200.0.1:8081/hub/api/", "s3cret", 41234)
    assert request.full_url == "http://10.200.0.1:8081/hub/api/batchspawner"
    assert request.get_method() == "POST"
    assert json.loads(request.data) == {"port": 41234}
    assert request.get_header("Authorization") == "token s3cret"
    assert "s3cret" not in request.full_url


def test_a_free_port_is_unprivileged():
    assert 1024 <= launch.free_port() <= 65535


def refusing(code, calls):
    def opener(request, timeout):
        calls.append(request)
        raise urllib.error.HTTPError(request.full_url, code, "no", {}, io.BytesIO(b"refused"))

    return opener


def test_a_refused_report_is_final_and_says_why():
    calls = []
    reason = launch.report(object.__new__(_Request), refusing(403, calls))
    assert len(calls) == 1
    assert reason == "the hub answered 403: refused"


def test_an_unreachable_hub_is_tried_again_then_given_up(monkeypatch):
    monkeypatch.setattr(launch.time, "sleep", lambda s: None)
    calls = []

    def opener(request, timeout):
        calls.append(request)
        raise ConnectionRefusedError("Connection refused")

    reason = launch.report(object.__new__(_Request), opener, tries=3)
    assert len(calls) == 3
    assert reason.startswith("the hub could not be reached")


def test_a_hub_error_then_success_is_a_report(monkeypatch):
    monkeypatch.setattr(launch.time, "sleep", lambda s: None)
    calls = []

    def opener(request, timeout):
        calls.append(request)
        if len(calls) == 1:
            raise urllib.error.HTTPError("u", 502, "bad gateway", {}, io.BytesIO(b""))
        return _Answer(201)

    assert launch.report(object.__new__(_Request), opener) is None
    assert len(calls) == 2


class _Request:
    full_url = "http://hub/hub/api/batchspawner"


class _Answer(io.BytesIO):
    def __init__(self, status):
        super().__init__(b"{}")
        self.status = status


def test_a_malformed_answer_is_a_failure_not_a_dead_thread(monkeypatch):
    import http.client

    monkeypatch.setattr(launch.time, "sleep", lambda s: None)

    def opener(request, timeout):
        raise http.client.BadStatusLine("garbage")

    reason = launch.report(object.__new__(_Request), opener, tries=2)
    assert reason.startswith("the hub's answer could not be read")


def test_the_report_follows_no_redirect_and_no_proxy(monkeypatch):
    """A 302 is an answer, not a place to send the token; proxy variables are ignored."""
    import http.server
    import threading

    hits = []

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            hits.append(self.path)
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.end_headers()

        def log_message(self, *args):
            pass

    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    server = http.server.HTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = f"http://127.0.0.1:{server.server_port}/hub/api"
        request = launch.report_request(api, "t0ken", 41234)
        reason = launch.report(request, launch.opener({}), tries=1)
    finally:
        server.shutdown()
    assert hits == ["/hub/api/batchspawner"]  # reached directly, not through the proxy
    assert reason.startswith("the hub answered 302")


def test_only_listening_on_the_port_signals_the_report(monkeypatch):
    import socket
    import threading

    monkeypatch.setattr(socket.socket, "listen", socket.socket.listen)  # restored after
    port = launch.free_port()
    listening = threading.Event()
    launch.signal_listening(port, listening)
    with socket.socket() as other:  # another port
        other.bind(("127.0.0.1", 0))
        other.listen()
    assert not listening.is_set()
    with socket.socket() as bound:  # the port, bound but not yet listening
        bound.bind(("127.0.0.1", port))
        assert not listening.is_set()
        bound.listen()
        assert listening.is_set()


def test_the_launcher_reports_before_any_heavy_import():
    """batchspawner's wrapper imports JupyterHub's service auth (SQLAlchemy,
    Alembic: half a second) before it reports; ours imports none of it."""
    code = (
        "import sys, portal.session.launch\n"
        "heavy = {'jupyterhub', 'requests', 'sqlalchemy', 'tornado', 'traitlets'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_missing_hub_variables_end_it_with_a_clear_message():
    env = {"PATH": os.environ["PATH"]}
    result = subprocess.run(
        [sys.executable, "-m", "portal.session.launch", "true"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode != 0
    assert "JUPYTERHUB_API_URL is not set" in result.stderr


@pytest.mark.parametrize("argv", [[], ["no-such-command-here"]])
def test_a_bad_command_line_is_refused(argv):
    result = subprocess.run(
        [sys.executable, "-m", "portal.session.launch", *argv], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "portal-session" in result.stderr


def test_a_refused_report_ends_the_server_with_the_reason(tmp_path):
    """A real launcher process whose hub refuses the report: the command
    (here a long sleep) is ended at once, the reason is in its log."""
    import http.server
    import threading

    seen = []

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append((self.path, self.headers["Authorization"], self.rfile.read(11)))
            self.send_response(403)
            self.end_headers()
            self.wfile.write(b"This token belongs to no starting portal server")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sleeper = tmp_path / "slow-server"  # listens on its port, then would run a minute
        sleeper.write_text(
            "import os, socket, time, urllib.parse\n"
            "url = urllib.parse.urlsplit(os.environ['JUPYTERHUB_SERVICE_URL'])\n"
            "s = socket.socket()\n"
            "s.bind((url.hostname, url.port))\n"
            "s.listen()\n"
            "time.sleep(60)\n"
        )
        sleeper.chmod(0o755)
        env = {
            "PATH": f"{tmp_path}:{os.environ['PATH']}",
            "JUPYTERHUB_API_URL": f"http://127.0.0.1:{server.server_port}/hub/api",
            "JUPYTERHUB_API_TOKEN": "t0ken",
            "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:0/user/alice/",
        }
        result = subprocess.run(
            [sys.executable, "-m", "portal.session.launch", "slow-server"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
    finally:
        server.shutdown()
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "the port report failed, ending the session: the hub answered 403" in result.stderr
    assert seen[0][:2] == ("/hub/api/batchspawner", "token t0ken")


def test_the_server_starts_with_the_collector_off_and_it_is_on_once_listening(tmp_path):
    """A real launcher process: its command sees the cyclic collector off
    until it listens on its port, then on, with its start frozen out of it."""
    import http.server
    import threading

    class Taking(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Taking)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        command = tmp_path / "server"
        command.write_text(
            "import gc, os, socket, time, urllib.parse\n"
            "print('starting', gc.isenabled(), flush=True)\n"
            "url = urllib.parse.urlsplit(os.environ['JUPYTERHUB_SERVICE_URL'])\n"
            "s = socket.socket()\n"
            "s.bind((url.hostname, url.port))\n"
            "s.listen()\n"
            "deadline = time.monotonic() + 20\n"
            "while not gc.isenabled() and time.monotonic() < deadline:\n"
            "    time.sleep(0.02)\n"
            "print('listening', gc.isenabled(), gc.get_freeze_count() > 0, flush=True)\n"
        )
        command.chmod(0o755)
        env = {
            "PATH": f"{tmp_path}:{os.environ['PATH']}",
            "JUPYTERHUB_API_URL": f"http://127.0.0.1:{server.server_port}/hub/api",
            "JUPYTERHUB_API_TOKEN": "t0ken",
            "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:0/user/alice/",
        }
        result = subprocess.run(
            [sys.executable, "-m", "portal.session.launch", "server"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["starting False", "listening True True"]
