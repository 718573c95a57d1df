"""The portal's APIs fuzzed from their OpenAPI descriptions (docs/api, issue
40) by Schemathesis, against the test hub and its admin service: as a user
(alice) and as a portal admin (carol), at most ``CASES`` cases per
operation, valid and invalid alike, each answer checked for a server error
and against its description (status, content type, schema).

Only the test users are used, and nothing is left behind: their notebook
jobs are cancelled, and the presets, profiles and named sessions the
fuzzing made are removed (checked)."""

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.test_api_contract import new_token
from tests.support import openapi
from tests.support.hubclient import Portal
from tests.support.hubsettings import CA_CERT
from tests.support.jobs import cancel_jobs_of

CASES = 50  # per operation
BUDGET_SECONDS = 180  # the whole fuzzing
CHECKS = ",".join((
    "not_a_server_error", "status_code_conformance", "content_type_conformance",
    "response_schema_conformance",
))  # fmt: skip
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
# each run's output and JSON report, kept for reading after the test
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "api-fuzz"


def credentials(client, token):
    """Schemathesis's headers for a user: the token, and for the hub's pages'
    routes (which take no token) the login cookie with its XSRF token."""
    cookies = client.session.cookies
    hub = "; ".join(f"{c.name}={c.value}" for c in cookies if c.path in ("/", "/hub/"))
    xsrf = cookies.get("_xsrf", path="/hub/")
    assert "login" in hub and xsrf, hub
    return [
        "--header", f"Authorization: token {token}",
        "--header", f"Cookie: {hub}",
        "--header", f"X-XSRFToken: {xsrf}",
    ]  # fmt: skip


# the admin's run does not reuse ids from answers: carol may change and
# delete every profile, and the seeded ones are the later tests'
NO_REUSE = "[phases.fuzzing.extra-data-sources]\nresponses = false\n"


def fuzz(description, url, auth, report, config=None):
    """Schemathesis on one description, as one user, started: the process."""
    report.unlink(missing_ok=True)
    return subprocess.Popen(
        [
            str(SCHEMATHESIS), *(["--config-file", str(config)] if config else []),
            "run", str(openapi.API_DOCS / f"{description}.yaml"), "--url", url, *auth,
            "--tls-verify", CA_CERT, "--max-examples", str(CASES), "--checks", CHECKS,
            "--phases", "examples,fuzzing", "--seed", "40", "--workers", "2",
            "--request-timeout", "30", "--max-redirects", "0", "--no-color",
            "--report", "json", "--report-json-path", str(report),
        ],
        stdout=report.with_suffix(".txt").open("w"), stderr=subprocess.STDOUT, text=True,
        cwd=ARTIFACTS,  # its own cache (.schemathesis/) there too
    )  # fmt: skip


def snapshot(alice, carol, portal):
    return {
        "presets": {
            (u, p["id"])
            for u, c in (("alice", alice), ("carol", carol))
            for p in c.api("GET", "/portal/presets").json()
        },  # fmt: skip
        "profiles": {(p["name"], p["revision"]) for p in portal.get("api/profiles").json()},
        "servers": {
            (u, s)
            for u, c in (("alice", alice), ("carol", carol))
            for s in c.user_model(u)["servers"]
        },  # fmt: skip
    }


def test_fuzzing_finds_no_server_error_and_no_answer_off_the_description(hub, login):
    alice, carol = login("alice"), login("carol")
    admin = Portal(carol)
    auth = {
        "alice": credentials(alice, new_token(alice, "alice")),
        "carol": credentials(carol, new_token(carol, "carol")),
    }
    before = snapshot(alice, carol, admin)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    config = ARTIFACTS / "admin.toml"
    config.write_text(NO_REUSE)
    # two at a time, the hub's and the service's side by side (each its own process)
    rounds = [(("service", "alice"), ("hub", "carol")), (("hub", "alice"), ("service", "carol"))]
    results, started = [], time.monotonic()
    try:
        for pair in rounds:
            running = [
                (name, user, fuzz(name, hub + openapi.base_path(name), auth[user],
                                  ARTIFACTS / f"{name}-{user}.json",
                                  config if user == "carol" else None))
                for name, user in pair
            ]  # fmt: skip
            for name, user, process in running:
                left = BUDGET_SECONDS - (time.monotonic() - started)
                try:
                    process.wait(timeout=max(left, 1))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                report = ARTIFACTS / f"{name}-{user}.json"
                data = json.loads(report.read_text()) if report.exists() else None
                results.append((name, user, process.returncode, data))
    finally:
        elapsed = time.monotonic() - started
        cancel_jobs_of(["alice", "carol"], timeout=60)
        after = snapshot(alice, carol, admin)
        for user, preset in after["presets"] - before["presets"]:
            client = alice if user == "alice" else carol
            client.api("DELETE", f"/portal/presets/{preset}")
        for name, revision in after["profiles"] - before["profiles"]:
            if name not in {n for n, _ in before["profiles"]}:  # made by the fuzzing
                admin.send("DELETE", f"api/profiles/{name}?revision={revision}")
        for user, server in after["servers"] - before["servers"]:
            client = alice if user == "alice" else carol
            path = f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"
            client.api("DELETE", path, json={"remove": True} if server else None)
    lines, cases = [], 0
    for name, user, code, report in results:
        output = (ARTIFACTS / f"{name}-{user}.txt").read_text()
        found = output.split("=== SUMMARY ===")[0][-8000:]
        assert report is not None, f"{name} as {user}: no report (test-artifacts/api-fuzz)\n{found}"
        counted = report["test_cases"]
        cases += counted["generated"]
        lines.append(
            f"{name} as {user}: {report['operations']['tested']} operations, "
            f"{counted['generated']} cases, {counted['with_failures']} failed, "
            f"{len(report['errors'])} errors, {report['running_time']:.0f} s"
        )
        assert code == 0 and report["complete"], f"{name} as {user}:\n{found}"
    print("\n".join(lines), f"\nfuzzing: {cases} cases in {elapsed:.0f} s")
    assert elapsed <= BUDGET_SECONDS
    time.sleep(2)
    assert snapshot(alice, carol, admin) == before, "the fuzzing left something behind"
