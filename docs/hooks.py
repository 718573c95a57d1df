"""MkDocs hooks of the docs site (mkdocs.yml): the reference pages are made
from the code at each build (portal/reference.py, of the repository that
holds mkdocs.yml), never written by hand; the APIs' page from their OpenAPI
descriptions (docs/api/*.yaml, served beside it as they are)."""

import importlib
import sys
from pathlib import Path

import yaml
from mkdocs.structure.files import File

PAGES = {
    "reference/configuration.md": "config_page",
    "reference/command.md": "command_page",
}
METHODS = ("get", "put", "post", "delete", "patch")
DESCRIPTIONS = {
    "service": "The admin service's API",
    "hub": "The hub's portal routes",
}


def api_page(api_dir):
    """The APIs' reference (Markdown): each described operation, who may
    call it and what it answers, from docs/api/NAME.yaml."""
    out = [
        "# The portal's APIs",
        "",
        "The portal serves two sets of JSON routes. Each is described in OpenAPI 3.1,",
        "and this page is made from those files at each `make docs`:",
        "",
    ]
    for name, title in DESCRIPTIONS.items():
        out.append(f"- {title}: [`api/{name}.yaml`](../api/{name}.yaml)")
    out += [
        "",
        "A script authenticates with a JupyterHub API token, sent as",
        "`Authorization: token TOKEN`. A user makes one on the hub's token page,",
        "under their menu. A browser's calls use the login cookie and send its",
        "`X-XSRFToken` header with every change.",
        "",
        "A call without a login or token is refused: 401 or 403, with a JSON",
        "body, never the login page. The admin service's errors are",
        '`{"error": "...", "field": "..."}`, where `field` names the field that was',
        "refused, or is null. Errors from JupyterHub's own API code are",
        '`{"status": N, "message": "..."}`.',
        "",
        "The tests hold the portal to these files: every route the hub and the",
        "service register is described, real answers are checked against the",
        "schemas, Schemathesis fuzzes every operation, and every call by one",
        "user on another's ids is refused (see [the tests](../developers/tests.md)).",
        "",
    ]
    for name, title in DESCRIPTIONS.items():
        doc = yaml.safe_load((api_dir / f"{name}.yaml").read_text())
        base = doc["servers"][0]["url"].rstrip("/")
        out += [f"## {title} {{#{name}}}", "", doc["info"].get("description", "").strip(), ""]
        out += ["| Method | Path | What it does | Answers |", "|---|---|---|---|"]
        for path, item in doc["paths"].items():
            for method in METHODS:
                if method not in item:
                    continue
                op = item[method]
                answers = ", ".join(sorted(op.get("responses", {})))
                summary = op.get("summary", "").replace("|", "\\|")
                out.append(f"| {method.upper()} | `{base}{path}` | {summary} | {answers} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def on_files(files, config):
    repo = str(Path(config.config_file_path).resolve().parent)
    if sys.path[0] != repo:
        sys.path.insert(0, repo)
    reference = importlib.import_module("portal.reference")
    for path, page in PAGES.items():
        files.append(File.generated(config, path, content=getattr(reference, page)()))
    api = api_page(Path(config.docs_dir) / "api")
    files.append(File.generated(config, "reference/api.md", content=api))
    return files
