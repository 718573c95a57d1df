"""The portal's OpenAPI descriptions (docs/api/*.yaml) in the tests: the
routes they describe, matched with those the hub and the service register
(``registered_templates``), and real responses checked against them
(``check_response``, which every ``HubClient`` call runs)."""

import functools
import json
import re
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import yaml
from jsonschema.validators import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

API_DOCS = Path(__file__).resolve().parents[2] / "docs" / "api"
DESCRIPTIONS = ("service", "hub")
METHODS = ("get", "put", "post", "delete", "patch")
# what an id in a path names (a parameter's x-portal-id): the cross-user test's
OWNED = ("user", "session", "job", "preset", "profile", "image")

# what the integration suite's own calls checked: (operationId, status) -> count
CHECKED = Counter()


class SchemaMismatch(AssertionError):
    """A real response the description does not allow."""


@functools.cache
def description(name):
    """docs/api/NAME.yaml, loaded."""
    return yaml.safe_load((API_DOCS / f"{name}.yaml").read_text())


def base_path(name):
    return description(name)["servers"][0]["url"].rstrip("/")


def resolved(doc, value):
    """``value``, or what its ``$ref`` (within description ``doc``) points at."""
    while isinstance(value, dict) and "$ref" in value:
        node = description(doc)
        for part in value["$ref"].removeprefix("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        value = node
    return value


def operations(name=None):
    """``(description name, full path template, method, operation)`` of
    every described operation; its ``parameters`` resolved, the path's own
    included, and its ``security`` (the description's, unless its own)."""
    for doc in (name,) if name else DESCRIPTIONS:
        for path, item in description(doc)["paths"].items():
            for method in METHODS:
                if method in item:
                    params = item.get("parameters", []) + item[method].get("parameters", [])
                    op = {
                        "security": description(doc).get("security", []),
                        **item[method],
                        "parameters": [resolved(doc, p) for p in params],
                    }
                    yield doc, base_path(doc) + path, method, op


def template_key(path):
    """A path template with its parameters' names dropped: ``/a/{x}/b`` -> ``/a/{}/b``."""
    return re.sub(r"\{[^}/]*\}", "{}", path)


# -- a route's regex, as the templates it serves --------------------------------


def _group_end(pattern, start):
    """The index of the ``)`` closing the group that opens at ``start``."""
    depth, i, in_class = 0, start, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced group in {pattern!r}")


LITERALS = re.compile(r"^[\w-]+(\|[\w-]+)*$")


def expand(pattern):
    """The path templates a route's regex serves, a parameter as ``{}``.

    >>> expand(r"/a/(\\d{1,12})/(cancel|rerun)")
    ['/a/{}/cancel', '/a/{}/rerun']
    >>> expand(r"/s/([^/]+)(?:/([^/]+))?/gpus")
    ['/s/{}/gpus', '/s/{}/{}/gpus']
    >>> expand(r"/api/users/([^/]+)/servers/([^/]*)")
    ['/api/users/{}/servers/{}']
    """
    pattern = pattern.removeprefix("^").removesuffix("$")
    i = pattern.find("(")
    while i > 0 and pattern[i - 1] == "\\":
        i = pattern.find("(", i + 1)
    if i < 0:
        return [re.sub(r"\\(.)", r"\1", pattern)]
    end = _group_end(pattern, i)
    head, inner, tail = pattern[:i], pattern[i + 1 : end], pattern[end + 1 :]
    optional = tail.startswith("?")
    tail = tail.removeprefix("?")
    if inner.startswith("?:"):
        choices = expand(inner[2:])
    elif LITERALS.match(inner):
        choices = inner.split("|")
    else:
        choices = ["{}"]
    if optional:
        choices = [*choices, ""]
    head = re.sub(r"\\(.)", r"\1", head)
    return sorted({head + c + rest for c in choices for rest in expand(tail)})


def methods_of(handler):
    """The HTTP methods the portal's code answers on a handler class: those
    a class of the portal's defines. JupyterHub's own (a GET or PATCH the
    portal's subclass of its handler inherits) are JupyterHub's to describe,
    in its REST API's description."""
    ours = [k for k in handler.__mro__ if k.__module__.split(".")[0] in ("portal", "spawners")]
    return {m for m in METHODS if any(m in k.__dict__ for k in ours)}


# -- responses against the description ------------------------------------------


@functools.cache
def _registry():
    registry = Registry()
    for name in DESCRIPTIONS:
        resource = Resource.from_contents(description(name), default_specification=DRAFT202012)
        registry = registry.with_resource(f"urn:portal-api:{name}", resource)
    return registry


@functools.cache
def _matchers():
    found = []
    for doc, path, method, operation in operations():
        regex = re.sub(r"\\\{[^}/]*\\\}", "[^/]+", re.escape(path))
        # a literal segment wins over a parameter (api/sessions/extensions)
        found.append((path.count("{"), re.compile(f"^{regex}$"), doc, path, method, operation))
    return sorted(found, key=lambda f: f[0])


def operation_for(method, path):
    """``(description, path template, operation)`` described for METHOD PATH, or None."""
    method = method.lower()
    for _, regex, doc, template, m, operation in _matchers():
        if m == method and regex.match(path):
            return doc, template, operation
    return None


def pointer(*parts):
    return "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def response_problem(method, path, status, content_type, body):
    """Why a response breaks its description ("" when it keeps to it; None
    when the route is not described)."""
    method = method.lower()
    found = operation_for(method, path)
    if found is None:
        return None
    doc, template, operation = found
    relative = template[len(base_path(doc)) :]
    responses = operation.get("responses", {})
    key = str(status) if str(status) in responses else f"{str(status)[0]}XX"
    if key not in responses and "default" in responses:
        key = "default"
    if key not in responses:
        return f"{method.upper()} {template}: status {status} is not described"
    CHECKED[(operation["operationId"], status)] += 1
    content = responses[key].get("content")
    if not content:
        return ""
    media = (content_type or "").split(";")[0].strip()
    if media not in content:
        return f"{method.upper()} {template} {status}: Content-Type {media!r} is not described"
    if media != "application/json" or "schema" not in content[media]:
        return ""
    ref = "#/" + pointer("paths", relative, method, "responses", key, "content", media, "schema")
    validator = Draft202012Validator({"$ref": f"urn:portal-api:{doc}{ref}"}, registry=_registry())
    try:
        data = json.loads(body)
    except ValueError:
        return f"{method.upper()} {template} {status}: the body is not JSON: {body[:200]!r}"
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        at = "/".join(str(p) for p in e.absolute_path) or "(the body)"
        return f"{method.upper()} {template} {status}: at {at}: {e.message[:300]}"
    return ""


def check_response(response, *args, **kwargs):
    """A ``requests`` response hook: a response of a described route that
    breaks its description fails the test that made it."""
    request = response.request
    path = urlparse(request.url).path
    if operation_for(request.method.lower(), path) is None:
        return response  # not read: a stream (the spawn's progress) stays a stream
    problem = response_problem(
        request.method, path, response.status_code, response.headers.get("Content-Type"),
        response.content.decode("utf8", "replace"),
    )  # fmt: skip
    if problem:
        raise SchemaMismatch(f"{problem} (docs/api): {response.text[:300]!r}")
    return response
