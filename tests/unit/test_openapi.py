"""The OpenAPI descriptions (docs/api/service.yaml, docs/api/hub.yaml) hold
every route the admin service and the hub register for the portal, with its
methods, and nothing else: a route added without its description, or a
description left behind by a removed route, fails here. The pages for
people (HTML) are listed below, by handler, and are not described."""

import doctest
import json
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema.validators import Draft202012Validator

from tests.support import openapi

REPO = Path(__file__).resolve().parents[2]

# the pages (HTML, for people): not the API's
SERVICE_PAGES = {
    "RootHandler", "HubOAuthCallbackHandler", "ProfilesPage", "ProfileEditPage",
    "ProfileActionPage", "HistoryPage", "ImagesPage", "ImageCheckPage", "ClusterPage",
    "JobsPage", "JobPage", "JobActionPage", "JobResultPage", "UsagePage", "PresetsPage",
    "PresetActionPage",
}  # fmt: skip
HUB_PAGES = {
    "PortalHomeHandler", "PortalSpawnHandler", "PresetSaveHandler", "PresetEditHandler",
    "PresetActionHandler",
}  # fmt: skip

# JupyterHub's route lists after the portal's install_routes, in a process of
# their own (it changes JupyterHub's module lists): the portal's handlers'
HUB_ROUTES = """
import json
import batchspawner.api
from jupyterhub import apihandlers as a, handlers as h
from spawners import jupyterhub_patches as p
from tests.support.openapi import methods_of
p.install_routes(None, notebook_jobs=object())
print(json.dumps([
    ["/hub" + route, cls.__name__, sorted(methods_of(cls))]
    for route, cls, *_ in h.default_handlers + a.default_handlers
    if cls.__module__.startswith("spawners.")
]))
"""


def registered(name):
    """``{(template with {} parameters, method)}`` the service or hub serves
    for its API, and the handler classes of the pages left out."""
    if name == "service":
        from portal.service.app import routes

        rows = [
            (route, cls.__name__, openapi.methods_of(cls))
            for route, cls in routes(openapi.base_path("service") + "/")
        ]
        pages = SERVICE_PAGES
    else:
        run = subprocess.run(
            [sys.executable, "-c", HUB_ROUTES], cwd=REPO, capture_output=True, text=True,
            check=True,
        )  # fmt: skip
        rows = json.loads(run.stdout)
        pages = HUB_PAGES
    found, skipped = set(), set()
    for route, cls, methods in rows:
        if cls in pages:
            skipped.add(cls)
            continue
        for template in openapi.expand(route):
            found |= {(template, m) for m in methods}
    return found, skipped


def described(name):
    return {(openapi.template_key(path), m) for _, path, m, _ in openapi.operations(name)}


def differences(registered_routes, described_routes):
    """What is served but not described, and described but not served."""
    return sorted(registered_routes - described_routes), sorted(
        described_routes - registered_routes
    )


@pytest.mark.parametrize("name", openapi.DESCRIPTIONS)
def test_every_api_route_is_described_and_every_description_is_served(name):
    found, skipped = registered(name)
    assert skipped == (SERVICE_PAGES if name == "service" else HUB_PAGES), "a page went away"
    undescribed, unserved = differences(found, described(name))
    assert undescribed == [], f"served, not in docs/api/{name}.yaml"
    assert unserved == [], f"in docs/api/{name}.yaml, not served"
    print(name, len(found), "operations described")


def test_route_expansion():
    assert doctest.testmod(openapi).failed == 0


def test_a_route_added_without_its_description_fails_the_comparison():
    found, _ = registered("service")
    extra = ("/services/portal/api/new-thing/{}", "get")
    assert differences(found | {extra}, described("service")) == ([extra], [])
    gone = sorted(found)[0]
    assert differences(found - {gone}, described("service")) == ([], [gone])


@pytest.mark.parametrize("name", openapi.DESCRIPTIONS)
def test_each_description_is_valid_and_complete(name):
    doc = openapi.description(name)
    assert doc["openapi"].startswith("3.1")
    for schema in doc.get("components", {}).get("schemas", {}).values():
        Draft202012Validator.check_schema(schema)
    ids = [op["operationId"] for *_, op in openapi.operations()]
    assert len(ids) == len(set(ids)), "operationIds are unique across both descriptions"
    for _, path, method, op in openapi.operations(name):
        where = f"{method.upper()} {path}"
        assert op.get("summary") and op.get("description"), where
        statuses = set(op["responses"])
        if op.get("security") != [{}] and {} not in op.get("security", []):
            assert statuses & {"401", "403"}, f"{where}: its refusal is not described"
        params = [p for p in op.get("parameters", []) if p["in"] == "path"]
        named = set(openapi.re.findall(r"\{([^}]+)\}", path))
        assert {p["name"] for p in params} == named, where
        for p in params:
            assert p.get("x-portal-id") in openapi.OWNED, f"{where}: {p['name']} names what?"
