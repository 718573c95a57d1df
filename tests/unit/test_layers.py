"""Each process has its package, and a path says what its code may import.

- pure (``portal.core``, ``portal.slurm``, ``portal.settings``,
  ``portal.contract``, ``portal.roles``, ``portal.tlscontext``,
  ``portal.helper``, ``portal.setup``): no jupyterhub, batchspawner, tornado or jupyter_server,
  and nothing of the processes below nor of the shared layer;
- shared (``portal.store``, ``portal.extend``, ``portal.migrations``): used
  by the hub and the service; the pure layer only, no web framework;
- the session (``portal.session``, in the Slurm job): never the hub's code
  (``spawners``), the service's, jupyterhub or batchspawner;
- the admin service (``portal.service``): never the hub's or the session's;
- the hub (``spawners``): never the service's or the session's;
- the deploy tool (``deploy``): the pure layer only;
- the hub's configuration (``spawners.hub_config``) is imported by the
  JupyterHub configuration files alone (``jupyterhub_config.py``, the
  package's ``spawners/jupyterhub_config.py`` and the stock hub's
  ``bench/stock_config.py``), never by other code;
- ``bench`` uses the tests' support library (``tests.support``) only;
- no cycle between packages.

The rules are read from the source (every ``import``, lazy ones included),
and ``test_the_rules_catch_*`` shows each on a deliberate example.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from portal.core.numbers import whole_number
from portal.core.profiles import ProfileError, profile_from_dict
from portal.core.slice import SliceError, make_slice

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("portal", "spawners", "deploy", "bench")
CONFIG_FILES = {"jupyterhub_config", "spawners.jupyterhub_config", "bench.stock_config"}
FRAMEWORKS = ("jupyterhub", "batchspawner", "tornado", "jupyter_server")
PURE = ("portal.core", "portal.slurm", "portal.settings", "portal.contract", "portal.roles",
        "portal.tlscontext", "portal.helper", "portal.setup")  # fmt: skip
SHARED = ("portal.store", "portal.extend", "portal.migrations", "portal.notebookjobs",
          "portal.health", "portal.usage")  # fmt: skip
HUB, SERVICE, SESSION = ("spawners",), ("portal.service",), ("portal.session",)
HUB_CONFIG = "spawners.hub_config"


def within(name, packages):
    return any(name == p or name.startswith(p + ".") for p in packages)


def module_name(path, root):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path, name):
    """Every module ``path`` (the module ``name``) imports, relative ones resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def import_graph(root):
    """{module: the modules it imports} of the product's code under ``root``."""
    files = [root / "jupyterhub_config.py"] if (root / "jupyterhub_config.py").exists() else []
    for top in ROOTS:
        files += sorted((root / top).rglob("*.py")) if (root / top).is_dir() else []
    return {module_name(f, root): imports_of(f, module_name(f, root)) for f in files}


def node(name):
    """The package a module counts in for cycles: ``portal``'s subpackages and
    modules each, ``spawners``, ``deploy``, ``bench`` whole."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "portal" and len(parts) > 1 else parts[0]


def violations(graph):
    """Each import a rule forbids, as ``importer -> imported: rule``."""
    found = []

    def forbid(module, imported, rule):
        found.append(f"{module} -> {imported}: {rule}")

    for module, imported in sorted(graph.items()):
        for name in sorted(imported):
            first = name.split(".")[0]
            if name == HUB_CONFIG and module not in CONFIG_FILES and module != HUB_CONFIG:
                forbid(module, name, "only a JupyterHub configuration file imports it")
            if within(module, PURE) and (
                first in FRAMEWORKS or within(name, SHARED + HUB + SERVICE + SESSION)
            ):
                forbid(module, name, "pure code imports no framework, process or shared code")
            if within(module, SHARED) and (
                first in FRAMEWORKS or within(name, HUB + SERVICE + SESSION)
            ):
                forbid(module, name, "shared code imports the pure layer only")
            if within(module, SESSION) and (
                first in ("jupyterhub", "batchspawner") or within(name, HUB + SERVICE)
            ):
                forbid(module, name, "session code imports no hub or service code")
            if within(module, SERVICE) and within(name, HUB + SESSION + ("batchspawner",)):
                forbid(module, name, "service code imports no hub or session code")
            if within(module, HUB) and within(name, SERVICE + SESSION):
                forbid(module, name, "hub code imports no service or session code")
            own = first in ("portal", "spawners") and name != "portal"
            if within(module, ("deploy",)) and (
                first in FRAMEWORKS or (own and not within(name, PURE))
            ):
                forbid(module, name, "deploy code imports the pure layer only")
            if (
                within(module, ("bench",))
                and first == "tests"
                and not within(name, ("tests.support",))
            ):
                forbid(module, name, "bench uses tests.support only")
    return found


def cycles(graph):
    """The package cycles of ``graph``, each as ``a -> b -> a``."""
    edges = {}
    for module, imported in graph.items():
        for name in imported:
            target = next((m for m in (name, name.rpartition(".")[0]) if m in graph), None)
            if target and node(target) != node(module):
                edges.setdefault(node(module), set()).add(node(target))
    found, done = [], set()

    def visit(at, path):
        if at in path:
            found.append(" -> ".join(path[path.index(at) :] + [at]))
            return
        if at in done:
            return
        for nxt in sorted(edges.get(at, ())):
            visit(nxt, path + [at])
        done.add(at)

    for start in sorted(edges):
        visit(start, [])
    return sorted(set(found))


def test_every_process_imports_only_what_its_layer_may():
    assert violations(import_graph(REPO)) == []


def test_no_package_cycle():
    assert cycles(import_graph(REPO)) == []


def write(root, files):
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return import_graph(root)


def test_the_rules_catch_a_session_module_that_imports_the_hub(tmp_path):
    graph = write(
        tmp_path,
        {
            "portal/session/bad.py": "import jupyterhub.utils\nfrom spawners import spawner\n",
            "portal/session/lazy.py": "def f():\n    from ..service import app\n",
            "spawners/spawner.py": "",
        },
    )
    assert violations(graph) == [
        "portal.session.bad -> jupyterhub.utils: session code imports no hub or service code",
        "portal.session.bad -> spawners: session code imports no hub or service code",
        "portal.session.bad -> spawners.spawner: session code imports no hub or service code",
        "portal.session.lazy -> portal.service: session code imports no hub or service code",
        "portal.session.lazy -> portal.service.app: session code imports no hub or service code",
    ]


def test_the_rules_catch_an_import_of_the_hubs_configuration(tmp_path):
    graph = write(
        tmp_path,
        {
            "jupyterhub_config.py": "from spawners import hub_config\n",
            "spawners/hub_config.py": "",
            "portal/service/app.py": "from spawners.hub_config import HSTS\n",
        },
    )
    assert violations(graph) == [
        "portal.service.app -> spawners.hub_config: only a JupyterHub configuration file "
        "imports it",
        "portal.service.app -> spawners.hub_config: service code imports no hub or session code",
        "portal.service.app -> spawners.hub_config.HSTS: service code imports no hub or session "
        "code",
    ]


def test_the_rules_catch_a_package_cycle_and_pure_code_importing_a_framework(tmp_path):
    graph = write(
        tmp_path,
        {
            "portal/store.py": "from portal.core import profiles\n",
            "portal/core/profiles.py": "import tornado.web\nfrom portal import store\n",
        },
    )
    assert cycles(graph) == ["portal.core -> portal.store -> portal.core"]
    assert violations(graph) == [
        "portal.core.profiles -> portal.store: pure code imports no framework, process or "
        "shared code",
        "portal.core.profiles -> tornado.web: pure code imports no framework, process or "
        "shared code",
    ]


def python(*lines):
    """What a fresh interpreter prints running ``lines``."""
    run = subprocess.run([sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_the_pure_layers_import_without_the_hub():
    assert (
        python(
            "import sys",
            "import portal.core.numbers, portal.core.slice, portal.core.profiles",
            "import portal.core.script, portal.slurm.commands, portal.slurm.parse",
            "import portal.slurm.model, portal.settings, portal.roles, portal.tlscontext",
            "hub = ('jupyterhub', 'batchspawner', 'tornado')",
            "print(sorted(m for m in hub if m in sys.modules))",
        )
        == "[]"
    )


def test_the_hubs_templates_are_where_its_configuration_points():
    names = {p.name for p in (REPO / "spawners" / "templates").iterdir()}
    assert {"home.html", "page.html", "form.html.j2"} <= names


@pytest.mark.parametrize("text", ["٣", "²", "１", "3٣", "-1", "1.0", "", " ", "1e3", "0x1"])
def test_only_ascii_digits_are_whole_numbers(text):
    assert whole_number(text) is None


def test_whole_numbers():
    assert [whole_number(v) for v in ("7", " 12 ", 3, True, None, "1234567890")] == [
        7, 12, 3, None, None, None,
    ]  # fmt: skip


@pytest.mark.parametrize("field", ["gpus", "hours"])
def test_a_non_ascii_digit_in_a_spawn_field_is_refused_with_a_message(field):
    values = {"gpus": "1", "hours": "2", field: "٣"}
    with pytest.raises(SliceError, match="must be a whole number, not '٣'") as e:
        make_slice(
            values["gpus"], values["hours"], partition="gpu", max_gpus=4,
            cores_per_gpu=8, mem_per_gpu_gb=48, max_hours=24,
        )  # fmt: skip
    assert e.value.field == field


def test_a_profile_number_must_be_a_number():
    base = {"name": "p", "display_name": "P", "environment": "pytorch", "partition": "gpu"}
    with pytest.raises(ProfileError, match="max_gpus must be a whole number"):
        profile_from_dict({**base, "max_gpus": "٣"})
