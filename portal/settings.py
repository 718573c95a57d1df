"""Site settings: one place, read by the hub and by the deploy scripts.

The defaults live in ``deploy/portal.toml`` beside this package; a site's own
file (``/etc/portal/portal.toml``, or the path in ``$PORTAL_CONFIG``) holds only
the keys it changes, merged over the defaults section by section.

This module uses the standard library only, so the deploy scripts can run it
with Debian's ``/usr/bin/python3`` before any environment exists::

    python3 portal/settings.py --shell   # PORTAL_<SECTION>_<KEY>=value lines
    python3 portal/settings.py --get envs.prefix   # one value
    python3 portal/settings.py --derived public_url   # one of DERIVED
"""

import functools
import ipaddress
import json
import os
import re
import shlex
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlparse

DEFAULTS = Path(__file__).resolve().parent.parent / "deploy" / "portal.toml"
if not DEFAULTS.is_file():  # the package's copy in an environment (setup.cfg's data_files)
    DEFAULTS = Path(sys.prefix) / "share" / "portal" / "portal.toml"
SITE_FILE = "/etc/portal/portal.toml"


class SettingsError(ValueError):
    """A site settings file that cannot be used; the message names the fix."""


def _read(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: not valid TOML: {e}") from e


def merge(defaults, overrides, source="site settings"):
    """Merge ``overrides`` over ``defaults`` one section deep.

    Arrays of tables (``[[profiles]]``) are replaced whole.

    Unknown sections or keys are refused rather than ignored, so a typo in a
    site file is noticed at start and not silently lost.
    """
    merged = {
        section: dict(values) if isinstance(values, dict) else list(values)
        for section, values in defaults.items()
    }
    for section, values in overrides.items():
        if section not in defaults:
            raise SettingsError(
                f"{source}: unknown section [{section}]; known: {', '.join(sorted(defaults))}"
            )
        if isinstance(defaults[section], list):
            # An array of tables ([[profiles]]): the site's list replaces ours.
            if not isinstance(values, list):
                raise SettingsError(f"{source}: {section} must be an array of tables")
            merged[section] = values
            continue
        if not isinstance(values, dict):
            raise SettingsError(f"{source}: [{section}] must be a table")
        for key, value in values.items():
            if key not in defaults[section]:
                raise SettingsError(
                    f"{source}: unknown key {key!r} in [{section}]; "
                    f"known: {', '.join(sorted(defaults[section]))}"
                )
            expected = type(defaults[section][key])
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)  # idle_minutes = 60 means 60.0
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise SettingsError(
                    f"{source}: [{section}] {key} must be {expected.__name__}, got {value!r}"
                )
            merged[section][key] = value
    return merged


@functools.cache
def defaults():
    """``deploy/portal.toml`` alone: the one declaration of every default. The
    spawner's traits, the Profile fields and the poll take theirs from here."""
    return _read(DEFAULTS)


def load(path=None):
    """The merged settings as ``{section: {key: value}}``.

    ``path`` (or ``$PORTAL_CONFIG``) names the site file; without either,
    ``/etc/portal/portal.toml`` is used when it exists.
    """
    settings = _read(DEFAULTS)
    path = path or os.environ.get("PORTAL_CONFIG")
    if path:
        if not os.path.exists(path):
            raise SettingsError(f"PORTAL_CONFIG={path}: no such file")
    elif os.path.exists(SITE_FILE):
        path = SITE_FILE
    if path:
        settings = merge(settings, _read(path), source=str(path))
    return settings


def shell_lines(settings):
    """``PORTAL_SECTION_KEY=value`` lines for ``eval`` in a shell script."""
    lines = []
    for section, values in settings.items():
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(value, bool):
                value = "1" if value else "0"
            elif isinstance(value, list):
                value = " ".join(str(v) for v in value)
            name = f"PORTAL_{section}_{key}".upper()
            lines.append(f"{name}={shlex.quote(str(value))}")
    return lines


# -- values derived from the settings, for the hub, the service and deploy/ --


def hub_api_ip(settings):
    """Where the hub's API listens: [hub] api_ip, or, when unset, the embedded
    cluster's login address (where its compute nodes reach this host) if it
    has compute nodes, else loopback."""
    if settings["hub"]["api_ip"]:
        return settings["hub"]["api_ip"]
    cluster = settings["cluster"]
    if cluster["embedded"] and cluster["nodes"] > 0:
        return f"{cluster['network']}.1"
    return "127.0.0.1"


# Folders that are never the portal's alone: a state folder there, or one
# of them, would make ``make purge`` and ``portal uninstall`` remove what
# other software keeps.
SYSTEM_FOLDERS = frozenset(
    "/ /bin /boot /dev /etc /home /lib /lib64 /media /mnt /opt /proc /root /run /sbin /srv "
    "/sys /tmp /usr /usr/lib /usr/local /usr/share /var /var/cache /var/lib /var/log "
    "/var/spool /var/tmp /var/www".split()
)
PORTAL_ROOT = "/var/lib/portal"
"""The portal's own folder: its hubs' state by default, and the state of the
tests' and benchmarks' hubs beside it, whatever [hub] state_dir a site sets."""


def state_dir(settings):
    """[hub] state_dir, checked to be a folder of the portal's own: a plain
    absolute path, not a system folder (``SYSTEM_FOLDERS``) nor a home.
    SettingsError naming the fix otherwise.

    >>> state_dir({"hub": {"state_dir": "/var/lib/jupyterhub/"}})
    '/var/lib/jupyterhub'
    >>> try:
    ...     state_dir({"hub": {"state_dir": "/var/lib"}})
    ... except SettingsError as e:
    ...     print(str(e)[:60])
    [hub] state_dir = '/var/lib' is a system folder, not the por
    """
    value = settings["hub"]["state_dir"]
    path = os.path.normpath(value) if value.startswith("/") else ""
    if not path or path.startswith("//") or path != (value.rstrip("/") or "/"):
        raise SettingsError(
            f"[hub] state_dir = {value!r} must be a plain absolute path (no '.', '..' "
            "or '//'), such as /var/lib/portal/hub"
        )
    if path in SYSTEM_FOLDERS or path.startswith("/home/"):
        raise SettingsError(
            f"[hub] state_dir = {value!r} is a system folder, not the portal's own: "
            "name a folder of its own, such as /var/lib/portal/hub"
        )
    return path


def cluster_snapshot(settings):
    """The file of the hub's shared Slurm poll, which the service reads."""
    path = settings["portal"]["cluster_snapshot"]
    return path or str(Path(settings["hub"]["state_dir"]) / "cluster.json")


def origin(settings):
    """``scheme://HOST[:PORT]`` of the hub as browsers reach it: [hub]
    public_url's, else from [hub] domain and bind_url's scheme and port."""
    if settings["hub"]["public_url"]:
        url = urlparse(public_url(settings))
        return f"{url.scheme}://{url.netloc}"
    url = urlparse(settings["hub"]["bind_url"])
    return f"{url.scheme}://{settings['hub']['domain']}:{url.port or 443}"


def public_url(settings):
    """The URL a person opens: [hub] public_url (a site's web server in front
    of the proxy), else ``https://DOMAIN:PORT/`` ([hub] domain), else the bind
    URL with 0.0.0.0 made local. Always with its trailing slash."""
    hub = settings["hub"]
    url = urlparse(hub["bind_url"])
    if hub["public_url"]:
        return hub["public_url"].rstrip("/") + "/"
    if hub["domain"]:
        return origin(settings) + (url.path or "/")
    host = "127.0.0.1" if url.hostname in ("0.0.0.0", "", None) else url.hostname
    return f"{url.scheme}://{host}:{url.port or 80}{url.path or '/'}"


def is_https(settings):
    """Whether browsers reach the portal over HTTPS (its cookies are then
    Secure): public_url's scheme."""
    return urlparse(public_url(settings)).scheme == "https"


def sends_hsts(settings):
    """Whether the hub and the admin service send HSTS: when the proxy itself
    serves browsers over HTTPS. Behind a site's web server ([hub]
    public_url), that web server sends it, for all of its hosts."""
    return not settings["hub"]["public_url"] and bind_scheme(settings) == "https"


def bind_scheme(settings):
    return urlparse(settings["hub"]["bind_url"]).scheme


LOOPBACK_NAMES = {"localhost": ["127.0.0.1", "::1"]}


def front_proxy_ips(settings):
    """The addresses the site's web server in front of the proxy ([hub]
    public_url) connects from, whose X-Forwarded-For the hub takes as the
    client's (JupyterHub's trusted_downstream_ips): the proxy's loopback
    bind address. [] without public_url.

    >>> hub = {"bind_url": "http://127.0.0.1:8000", "public_url": "https://p.org/"}
    >>> front_proxy_ips({"hub": hub})
    ['127.0.0.1']
    >>> front_proxy_ips({"hub": {**hub, "bind_url": "http://localhost:8000"}})
    ['127.0.0.1', '::1']
    >>> front_proxy_ips({"hub": {**hub, "public_url": ""}})
    []
    """
    if not settings["hub"]["public_url"]:
        return []
    host = urlparse(settings["hub"]["bind_url"]).hostname or ""
    return LOOPBACK_NAMES.get(host, [host])


def _is_loopback(host):
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_public_url(settings):
    """Refuse, with SettingsError naming the fix, a [hub] public_url that does
    not fit bind_url and domain: the proxy behind a site's web server must
    listen on loopback only (else browsers reach it around that server), the
    public host must be [hub] domain (users' sessions are on its
    subdomains), its path bind_url's (the hub's base URL)."""
    hub = settings["hub"]
    bind = urlparse(hub["bind_url"])
    if bind.scheme not in ("http", "https"):
        raise SettingsError(
            f"[hub] bind_url {hub['bind_url']!r} must be http(s)://ADDRESS:PORT/, for "
            'example "https://0.0.0.0:8000" or, behind a web server, "http://127.0.0.1:8000"'
        )
    if not hub["public_url"]:
        return
    url = urlparse(hub["public_url"])
    example = '"https://portal.example.org/"'
    try:
        url.port  # noqa: B018 (a bad port raises)
    except ValueError:
        raise SettingsError(f"[hub] public_url {hub['public_url']!r} has a bad port") from None
    if (
        url.scheme not in ("http", "https") or not url.hostname or url.username or url.password
        or url.query or url.fragment or url.params
    ):  # fmt: skip
        raise SettingsError(
            f"[hub] public_url {hub['public_url']!r} must be the URL people open, "
            f"scheme, host and path only: for example {example}"
        )
    if not _is_loopback(bind.hostname):
        raise SettingsError(
            f"[hub] public_url is set, so a web server on this host faces browsers: "
            f"bind_url {hub['bind_url']!r} must listen on loopback, where only it "
            f'connects: for example bind_url = "http://127.0.0.1:{bind.port or 8000}"'
        )
    if url.scheme == "http" and bind.scheme == "https":
        raise SettingsError(
            f"[hub] public_url {hub['public_url']!r} is plain HTTP in front of an HTTPS "
            f'bind_url: serve browsers HTTPS (public_url = "https://...") or set '
            f'bind_url = "http://{bind.netloc}"'
        )
    if (url.path.rstrip("/") or "/") != (bind.path.rstrip("/") or "/"):
        raise SettingsError(
            f"[hub] public_url's path {url.path or '/'!r} must be bind_url's "
            f"({bind.path or '/'!r}, the hub's base URL): the front web server forwards "
            "paths as they are"
        )
    if hub["domain"] and hub["domain"].lower() != url.hostname.lower():
        raise SettingsError(
            f"[hub] domain {hub['domain']!r} is not public_url's host {url.hostname!r}: "
            f'set domain = "{url.hostname}" (users\' sessions on its subdomains, which '
            'the front web server and its certificate must cover too), or domain = "" '
            "(sessions on the hub's own origin)"
        )
    if hub["domain"] and _is_ip(url.hostname):
        raise SettingsError(
            f"[hub] public_url's host {url.hostname!r} is an address: users' sessions "
            'need a name with subdomains; set domain = "" or a public_url with a name'
        )


def _is_ip(host):
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def internal_certs_location(settings):
    """The hub's internal CAs and the certificates of the hub, the proxy and
    the services (certipy's store): ``internal-ssl`` in [hub] state_dir, the
    hub's account's only."""
    return str(Path(settings["hub"]["state_dir"]) / "internal-ssl")


def ldap_ca_cert(settings):
    """The CA file the directory's certificate is checked against: [ldap]
    ca_cert, or the web certificate's [tls] ca_cert when that is unset."""
    return settings["ldap"]["ca_cert"] or settings["tls"]["ca_cert"]


def metrics_token_file(settings):
    """The monitoring service's token (``read:metrics`` alone), the hub's
    copy: ``metrics-token`` in [hub] state_dir, made by deploy/hub.sh."""
    return Path(settings["hub"]["state_dir"]) / "metrics-token"


def mail_from(settings):
    """The From: address of the portal's mail: [mail] from, else the hub's
    account at [mail] domain.

    >>> mail_from({"mail": {"from": "", "domain": "portal.localhost"}, "hub": {"user": "portal"}})
    'portal@portal.localhost'
    """
    mail = settings["mail"]
    return mail["from"] or f"{settings['hub']['user']}@{mail['domain']}"


def group_name(dn):
    r"""The Unix name of an LDAP group: the value of its DN's first RDN when
    that is a ``cn`` (RFC 4514 escapes undone), else the DN itself.

    >>> group_name("cn=portal-admins,ou=groups,dc=portal,dc=example")
    'portal-admins'
    >>> group_name(r"CN=a\,b \c3\a9,ou=g"), group_name("ou=x,dc=y"), group_name("junk")
    ('a,b é', 'ou=x,dc=y', 'junk')
    """
    match = re.match(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*=((?:\\.|[^,+\\])*)(?:[,+]|$)", dn)
    if not match or match[1].lower() != "cn":
        return dn
    raw = match[2].strip()
    try:
        value = re.sub(
            rb"\\([0-9A-Fa-f]{2}|.)",
            lambda m: bytes([int(m[1], 16)]) if len(m[1]) == 2 else m[1],
            raw.encode(),
        ).decode()
    except UnicodeDecodeError:
        return dn
    return value or dn


def portal_groups(settings):
    """The Unix names of the LDAP groups that may log in ([ldap] allowed_groups)."""
    return sorted({group_name(dn) for dn in settings["ldap"]["allowed_groups"]})


def extend_registration(settings):
    """This hub's registration with the root helper ``portal-extend``
    (``portal.helper.extend``), as deploy/hub.sh writes it: the job name of
    its sessions, the groups and uid range of their users, the folder of
    Slurm's commands (JSON text). ValueError, naming the setting, when one
    is not plain enough for it."""
    from portal.helper.extend import registration

    hub, slurm = settings["hub"], settings["slurm"]
    return registration(
        slurm["job_name"], portal_groups(settings), hub["uid_min"], hub["uid_max"],
        slurm["bin_dir"],
    )  # fmt: skip


MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def gpu_memory(settings):
    """``{model: GB}`` of [slurm] gpu_memory_gb: each a GRES type's name and
    a whole number of GB; SettingsError naming the fix otherwise.

    >>> gpu_memory({"slurm": {"gpu_memory_gb": {"v100-sxm2": 32}}})
    {'v100-sxm2': 32}
    >>> try:
    ...     gpu_memory({"slurm": {"gpu_memory_gb": {"v100": "32 GB"}}})
    ... except SettingsError as e:
    ...     print(e)
    [slurm] gpu_memory_gb: v100 = '32 GB' must be a whole number of GB, such as 32
    """
    memory = {}
    for model, gb in settings["slurm"]["gpu_memory_gb"].items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", model):
            raise SettingsError(f"[slurm] gpu_memory_gb: {model!r} is not a GPU model's name")
        if isinstance(gb, bool) or not isinstance(gb, int) or not 0 < gb < 100000:
            raise SettingsError(
                f"[slurm] gpu_memory_gb: {model} = {gb!r} must be a whole number of GB, such as 32"
            )
        memory[model] = gb
    return memory


def prewarm_imports(settings):
    """``{environment: [module, ...]}`` of the sessions' pre-warmed kernels
    ([session] prewarm_imports; ``{}`` when prewarm_kernel is false), each a
    dotted module name: they reach the kernel's command line. SettingsError
    naming the fix otherwise.

    >>> prewarm_imports({"session": {"prewarm_kernel": True,
    ...                              "prewarm_imports": {"pytorch": ["torch", "torch.nn"]}}})
    {'pytorch': ['torch', 'torch.nn']}
    >>> prewarm_imports({"session": {"prewarm_kernel": False, "prewarm_imports": {"x": ["y"]}}})
    {}
    >>> try:
    ...     prewarm_imports({"session": {"prewarm_kernel": True,
    ...                                  "prewarm_imports": {"pytorch": "torch"}}})
    ... except SettingsError as e:
    ...     print(str(e)[:69])
    [session] prewarm_imports: pytorch = 'torch' must be a list of module
    """
    session = settings["session"]
    if not session["prewarm_kernel"]:
        return {}
    imports = {}
    for environment, modules in session["prewarm_imports"].items():
        if not isinstance(modules, list) or not all(
            isinstance(m, str) and MODULE_NAME.fullmatch(m) for m in modules
        ):
            raise SettingsError(
                f"[session] prewarm_imports: {environment} = {modules!r} must be a list of "
                'module names, such as ["torch", "matplotlib.pyplot"]'
            )
        imports[environment] = list(modules)
    return imports


DERIVED = {
    f.__name__: f
    for f in (hub_api_ip, cluster_snapshot, public_url, internal_certs_location,
              mail_from, portal_groups, extend_registration)
}  # fmt: skip
"""What ``--derived NAME`` prints (lists one item per line)."""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        settings = load()
    except SettingsError as e:
        print(f"portal settings: {e}", file=sys.stderr)
        return 2
    if argv[:1] == ["--shell"]:
        print("\n".join(shell_lines(settings)))
    elif argv[:1] == ["--get"] and len(argv) == 2:
        section, _, key = argv[1].partition(".")
        try:
            print(settings[section][key])
        except (KeyError, TypeError):
            print(f"portal settings: no setting {argv[1]!r}", file=sys.stderr)
            return 2
    elif argv[:1] == ["--derived"] and len(argv) == 2 and argv[1] in DERIVED:
        if str(Path(__file__).resolve().parent.parent) not in sys.path:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        value = DERIVED[argv[1]](settings)
        print("\n".join(value) if isinstance(value, list) else value)
    else:
        print(json.dumps(settings, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
