import subprocess
import sys


def test_install_puts_the_portal_spawn_handlers_in_place_of_jupyterhubs():
    code = (
        "import batchspawner.api, jupyterhub.apihandlers as a, jupyterhub.handlers as h\n"
        "before = list(h.default_handlers) + list(a.default_handlers)\n"
        "import spawners.spawn_handlers as s\n"
        "assert list(h.default_handlers) + list(a.default_handlers) == before\n"
        "s.install()\n"
        "s.install()\n"
        "routes = {r: c for r, c, *_ in h.default_handlers + a.default_handlers}\n"
        "print(routes['/spawn'].__name__, routes[r'/api/users/([^/]+)/server'].__name__)\n"
        "print(sum(c in s.REPLACEMENTS for c in routes.values()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["PortalSpawnHandler", "PortalUserServerAPIHandler", "0"]
