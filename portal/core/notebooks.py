"""Notebooks run as Slurm jobs (issue 27): what a request may name, checked
before anything is submitted. Pure: no Slurm, no file is read here (the
notebook is read as its user by ``portal.helper.notebook``).

- the notebook's path: inside the user's home, relative to it (an absolute
  path in the home is taken as that), no ``..``, a ``.ipynb`` file;
- its parameters: the names of the notebook's ``parameters`` cell (the cell
  tagged ``parameters``, as papermill finds it), each typed from its
  default there (``epochs = 3``: a whole number);
- a sweep: lists of values for some of those names, one job of a Slurm
  array per combination, at most the profile's ``max_array``;
- where the results go: ``jobs/`` beside the notebook, named after it and
  the Slurm job (``mnist-pytorch-812.ipynb``, ``...-812_2.ipynb`` for the
  third task of an array).
"""

import ast
import itertools
import json
import posixpath
import re
import unicodedata
from dataclasses import dataclass

from .slice import FieldError

MAX_PATH = 1024
# What a path's parts may hold: anything printable but a slash or a backslash.
# A path's characters that are refused: control and format characters
# (bidirectional overrides spoof a name in a list), line and paragraph
# separators, backslashes, and braces (papermill formats a path with the
# parameters: ``{name}`` would name another notebook than the one checked).
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\\{}\u2028\u2029]")
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_VALUE_CHARS = 4096  # of one parameter's JSON
MAX_PARAMETERS = 64
MAX_CELL_CHARS = 64 * 1024  # of a parameters cell's source: parsed on the web's threads
MAX_DEPTH = 20  # of a value's lists and objects within each other
RESULTS = "jobs"  # the folder beside the notebook where its jobs write

# A default's Python type -> the type name a request's values are checked against.
TYPES = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}


class NotebookError(FieldError):
    """A notebook job that cannot be submitted; ``field`` names what to fix."""


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str  # bool int float str list dict; "any": the default is None
    default: object

    def to_dict(self):
        return {"name": self.name, "type": self.type, "default": self.default}


def notebook_path(path, home):
    """``path`` (relative to ``home``, or absolute inside it) as a normal path
    relative to the home, or NotebookError. Links are the helper's to check:
    it resolves the path as the user and refuses one that leads out."""
    if not isinstance(path, str) or not path.strip():
        raise NotebookError("notebook: give the path of a notebook in your home", "notebook")
    path = path.strip()
    if (
        len(path) > MAX_PATH
        or CONTROL_RE.search(path)
        or any(unicodedata.category(c) == "Cf" for c in path)
    ):
        raise NotebookError(
            "notebook: the path is too long or has control or format characters, "
            "backslashes or braces",
            "notebook",
        )
    if path.startswith("~/"):
        path = path[2:]
    elif path.startswith("/"):
        prefix = home.rstrip("/") + "/"
        if not path.startswith(prefix):
            raise NotebookError(f"notebook: {path[:80]!r} is not inside your home", "notebook")
        path = path[len(prefix) :]
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise NotebookError("notebook: the path may not contain '..'", "notebook")
    if not parts or not parts[-1].endswith(".ipynb") or parts[-1] == ".ipynb":
        raise NotebookError(
            f"notebook: {path[:80]!r} is not a notebook (a .ipynb file)", "notebook"
        )
    return "/".join(parts)


def result_base(notebook, job_id, task=None):
    """The results of ``notebook``'s job (relative to the home), without the
    extension: ``templates/pytorch/jobs/mnist-pytorch-812`` (``_2``: task 2).

    >>> result_base("templates/pytorch/mnist-pytorch.ipynb", "812", 2)
    'templates/pytorch/jobs/mnist-pytorch-812_2'
    >>> result_base("run.ipynb", "9")
    'jobs/run-9'
    """
    folder, name = posixpath.split(notebook)
    suffix = f"{job_id}" if task is None else f"{job_id}_{task}"
    return posixpath.join(folder, RESULTS, f"{name[: -len('.ipynb')]}-{suffix}")


# -- the parameters cell -------------------------------------------------


def parameters_of(source):
    """The parameters a ``parameters`` cell's Python ``source`` declares:
    each top-level ``NAME = LITERAL`` (or ``NAME: T = LITERAL``), in order.
    A default that is no literal (``steps = 10 * 2``) makes a parameter of
    type ``"expr"``, which a request may not set (there is no type to check).

    >>> [p.to_dict() for p in parameters_of("epochs = 3  # passes\\nrate = 0.1\\nname = 'a'")]
    ... # doctest: +NORMALIZE_WHITESPACE
    [{'name': 'epochs', 'type': 'int', 'default': 3},
     {'name': 'rate', 'type': 'float', 'default': 0.1},
     {'name': 'name', 'type': 'str', 'default': 'a'}]
    """
    if len(source or "") > MAX_CELL_CHARS:
        raise NotebookError(
            f"notebook: its parameters cell is longer than {MAX_CELL_CHARS} characters",
            "notebook",
        )
    try:
        tree = ast.parse(source or "")
    except SyntaxError as e:
        raise NotebookError(
            f"notebook: its parameters cell is not valid Python ({e.msg}, line {e.lineno})",
            "notebook",
        ) from None
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        try:
            default = ast.literal_eval(value)
            kind = "any" if default is None else TYPES.get(type(default), "expr")
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            default, kind = None, "expr"
        if kind == "expr" or not _json_safe(default):
            default, kind = None, "expr"  # a set, bytes, complex: no JSON, no type to check
        found[target.id] = Parameter(target.id, kind, default)
    return list(found.values())


def _json_safe(value):
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def depth(value, limit=MAX_DEPTH):
    """How deep ``value``'s lists and objects nest (past ``limit``: ``limit + 1``).

    >>> depth(1), depth([1, {"a": [2]}]), depth([[[[]]]], limit=2)
    (0, 3, 3)
    """
    if limit < 0 or not isinstance(value, (list, dict)):
        return 0
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((depth(v, limit - 1) for v in items), default=0)


def typed(parameter, value, where):
    """``value`` (from JSON) as ``parameter``'s type, or NotebookError."""
    kind = parameter.type
    field = where.partition(".")[0]
    if depth(value) > MAX_DEPTH:
        raise NotebookError(f"{where}: lists and objects nest deeper than {MAX_DEPTH}", field)
    if not _json_safe(value):  # NaN or Infinity, anywhere in it
        raise NotebookError(f"{where}: NaN and Infinity are not values a job takes", field)
    shown = json.dumps(value)[:60]
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "str": isinstance(value, str),
        "list": isinstance(value, list),
        "dict": isinstance(value, dict),
        "any": isinstance(value, (bool, int, float, str)) or value is None,
    }.get(kind, False)
    if kind == "expr":
        raise NotebookError(
            f"{where}: {parameter.name!r} has no literal default in the parameters cell, "
            "so its type is unknown and it cannot be set",
            where.partition(".")[0],
        )
    if not ok:
        want = {"any": "a number, text, true/false or null"}.get(kind, f"of type {kind}")
        raise NotebookError(
            f"{where}: {parameter.name!r} must be {want} (its default is "
            f"{json.dumps(parameter.default)[:40]}), not {shown}",
            where.partition(".")[0],
        )
    if len(json.dumps(value)) > MAX_VALUE_CHARS:
        raise NotebookError(
            f"{where}: the value is longer than {MAX_VALUE_CHARS} characters", where.split(".")[0]
        )
    if kind == "float":
        try:
            return float(value)
        except OverflowError:
            raise NotebookError(
                f"{where}: {parameter.name!r} is too large a number", where.partition(".")[0]
            ) from None
    return value


def _declared(declared, name, field):
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise NotebookError(f"{field}: {str(name)[:40]!r} is not a parameter name", field)
    for parameter in declared:
        if parameter.name == name:
            return parameter
    names = ", ".join(p.name for p in declared) or "none: the notebook has no parameters cell"
    raise NotebookError(
        f"{field}: {name!r} is not in the notebook's parameters cell (its parameters: {names})",
        field,
    )


def task_parameters(declared, parameters, sweep, max_array):
    """The parameters of each job to run: one dict for a plain job, one per
    combination of the ``sweep``'s values (an array of at most ``max_array``
    jobs), each over ``parameters``; every name and value checked against
    the notebook's ``declared`` parameters. NotebookError otherwise."""
    parameters = {} if parameters is None else parameters
    sweep = {} if sweep is None else sweep
    if not isinstance(parameters, dict):
        raise NotebookError("parameters must be an object {name: value}", "parameters")
    if not isinstance(sweep, dict):
        raise NotebookError("sweep must be an object {name: [values]}", "sweep")
    if len(parameters) + len(sweep) > MAX_PARAMETERS:
        raise NotebookError(f"at most {MAX_PARAMETERS} parameters may be set", "parameters")
    fixed = {}
    for name, value in parameters.items():
        parameter = _declared(declared, name, "parameters")
        fixed[name] = typed(parameter, value, f"parameters.{name}")
    axes = []
    for name, values in sweep.items():
        parameter = _declared(declared, name, "sweep")
        if name in fixed:
            raise NotebookError(f"sweep: {name!r} is also in parameters; give it once", "sweep")
        if not isinstance(values, list) or not values:
            raise NotebookError(f"sweep: {name!r} must be a non-empty list of values", "sweep")
        if len(values) > max_array:
            raise NotebookError(
                f"sweep: {name!r} has {len(values)} values, more than the {max_array} jobs "
                "this profile's arrays may have (max_array)",
                "sweep",
            )
        axes.append([(name, typed(parameter, v, f"sweep.{name}")) for v in values])
    count = 1
    for axis in axes:
        count *= len(axis)
    if count > max_array:
        raise NotebookError(
            f"sweep: {count} combinations, more than the {max_array} jobs this profile's "
            "arrays may have (max_array)",
            "sweep",
        )
    return [{**fixed, **dict(combination)} for combination in itertools.product(*axes)]


# -- JupyterLab's scheduler dialog (portal.session.scheduler) ------------------

COMPUTE_RE = re.compile(r"^(?:(\d{1,3}) nodes? × )?(\d{1,3}) GPUs?, (\d{1,4}) h$")


def compute_types(max_gpus, max_nodes, default_hours, max_hours):
    """The dialog's "compute type" choices of a profile: its slice's GPUs
    (per node), nodes where it allows several, and hours, as one text each.

    >>> compute_types(2, 1, 8, 24)
    ['1 GPU, 8 h', '1 GPU, 1 h', '1 GPU, 24 h', '2 GPUs, 8 h', '2 GPUs, 1 h', '2 GPUs, 24 h']
    >>> compute_types(1, 2, 1, 1)
    ['1 GPU, 1 h', '2 nodes × 1 GPU, 1 h']
    """
    hours = list(dict.fromkeys([default_hours, 1, max_hours]))
    nodes = [1, max_nodes] if max_nodes > 1 else [1]
    return [
        f"{'' if n == 1 else f'{n} nodes × '}{g} GPU{'s' if g > 1 else ''}, {h} h"
        for n in nodes
        for g in range(1, max_gpus + 1)
        for h in hours
    ]


def parse_compute_type(text):
    """``(gpus, nodes, hours)`` of a compute type's text, or NotebookError.

    >>> parse_compute_type("2 nodes × 1 GPU, 4 h"), parse_compute_type("3 GPUs, 8 h")
    ((1, 2, 4), (3, 1, 8))
    """
    match = COMPUTE_RE.match(text or "")
    if not match:
        raise NotebookError(f"compute type {str(text)[:40]!r} is not one of the profile's", "gpus")
    nodes, gpus, hours = match.groups()
    return int(gpus), int(nodes or 1), int(hours)


def from_text(parameter, text):
    """A value typed as text (the scheduler dialog's parameters are text),
    as ``parameter``'s type: ``typed`` then checks it as any other value.

    >>> [from_text(Parameter("n", t, d), s) for t, d, s in
    ...  [("int", 1, "300"), ("float", 0.1, "1e-3"), ("bool", False, "true"), ("str", "", "a b")]]
    [300, 0.001, True, 'a b']
    """
    kind = parameter.type
    text = str(text).strip() if kind != "str" else str(text)
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "bool" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind in ("list", "dict", "any", "bool"):
            return json.loads(text)
    except ValueError:
        pass
    return text  # as text: ``typed`` says what it should have been
