"""The steps of ``portal setup`` and ``portal uninstall``, as root.

``setup`` is idempotent: each step compares what is there with what the
settings want, changes only what differs, and says each change it makes
("[portal] wrote /etc/sudoers.d/portal"); a second run prints nothing. It
touches only the portal's own paths (``own_paths``): its accounts, its
sudoers file, its root helpers and their registry, its units, its state,
run and log folders, the proxy's copies of keys, its notebook templates. It
installs no OS package and changes no other file: what is missing is
reported with the fix (``SetupError``).

``uninstall`` removes what setup made and nothing else; the hub's state
(its database, the profile store) is kept unless asked (``--purge``), and
accounts are removed only when setup made them (``MANIFEST``).

The hub (with its admin service) runs as [hub] user, the proxy as [hub]
proxy_user. The hub's elevated actions are the sudoers rules written here:
Slurm's sbatch, and scancel of a job named as the portal's jobs (from
[slurm] bin_dir), as members of the portal's groups, never root; the helpers
portal-image-check and portal-notebook, which run as a user; and, as root,
portal-extend, which lengthens a running session after checking it again,
and portal-slurm-read, which reads the portal's jobs where Slurm's
PrivateData hides them from the hub's account.
"""

import importlib.util
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from portal import settings as site_settings
from portal.helper import extend as extendhelper
from portal.helper import imagecheck, notebook, slurmread
from portal.settings import portal_groups
from portal.slurm import commands as slurm_commands

from . import units
from .files import SetupError, make_dir, private_copy, render, replace_file, say, write_if_changed

SUDOERS = Path("/etc/sudoers.d/portal")
MANIFEST = Path("/etc/portal/setup.json")
"""What setup made that was not there before it (the accounts, the notebook
templates), so that uninstall removes those and nothing a site made itself."""
PROXY_TOKEN_ENV = Path("/etc/portal/proxy-token.env")
"""The proxy's token for its unit (root's, 0600: systemd reads it as root
and hands it to the proxy in its environment alone)."""
RUN_ROOT, LOG_ROOT = Path("/run/portal"), Path("/var/log/portal")
HELPERS = {
    extendhelper.INSTALLED_AT: extendhelper,
    imagecheck.INSTALLED_AT: imagecheck,
    notebook.INSTALLED_AT: notebook,
    slurmread.INSTALLED_AT: slurmread,
}
# What the proxy copies from the hub's internal-ssl store.
PROXY_KEYS = ("proxy-api", "proxy-client")
PROXY_CERTS = (
    "proxy-api/proxy-api.crt",
    "proxy-client/proxy-client.crt",
    "hub-ca/hub-ca.crt",
    "proxy-client-ca_trust.crt",
)
# Where root's commands are looked for, whatever PATH portal setup was given
# (deploy/hub.sh's clean environment has no sbin).
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def root_command(name):
    """The absolute path of root's command ``name`` on ROOT_PATH (the name
    itself when it is on none, so that running it says what is missing)."""
    return shutil.which(name, path=ROOT_PATH) or name


PREREQUISITES = {
    "configurable-http-proxy": "npm install -g configurable-http-proxy (Node.js 18 or later)",
    "sudo": "install sudo 1.9.10 or later",
    "setpriv": "install util-linux",
    "visudo": "install sudo 1.9.10 or later",
}


def shipped(name):
    """A file or folder the package ships beside its code: in a checkout,
    at its top (``notebook_templates``); in an installed wheel, under
    ``PREFIX/share/portal`` (setup.cfg's data_files)."""
    checkout = Path(__file__).resolve().parents[2] / name
    if checkout.exists():
        return checkout
    return Path(sys.prefix) / "share" / "portal" / name


def hub_config_file():
    """JupyterHub's configuration of the portal, in the package
    (``spawners/jupyterhub_config.py``), found without importing the hub's code."""
    spec = importlib.util.find_spec("spawners")
    if spec is None or not spec.submodule_search_locations:
        raise SetupError("the package's spawners are not installed: pip install dsportal")
    return Path(next(iter(spec.submodule_search_locations))) / "jupyterhub_config.py"


@dataclass(frozen=True)
class Layout:
    """The hub's and the proxy's files, from the settings."""

    state: Path
    prefix: Path  # the environment the portal is installed in (its bin/portal)
    hub_user: str
    proxy_user: str
    tls_key: Path

    @classmethod
    def of(cls, settings, prefix=None):
        hub = settings["hub"]
        return cls(
            Path(site_settings.state_dir(settings)),
            Path(prefix or sys.prefix),
            hub["user"],
            hub["proxy_user"],
            Path(settings["tls"]["key"]),
        )

    portal_bin = property(lambda self: self.prefix / "bin" / "portal")
    run_dir = property(lambda self: RUN_ROOT / self.state.name)
    proxy_log = property(lambda self: LOG_ROOT / f"{self.state.name}-proxy.log")
    proxy_key = property(lambda self: self.tls_key.parent / "proxy.key")  # the proxy's copy
    proxy_tls_dir = property(lambda self: self.run_dir / "proxy-tls")  # its internal certificates
    proxy_token = property(lambda self: self.state / "proxy_token")  # the hub's copy


# ---------------------------------------------------------------- pure


def is_https(settings):
    """Whether the proxy itself serves TLS ([hub] bind_url https): it then
    needs the web certificate's key. Whether browsers use HTTPS (behind a
    site's web server too) is ``portal.settings.is_https``."""
    return settings["hub"]["bind_url"].startswith("https://")


def slurm_bin(settings):
    """The folder of Slurm's commands ([slurm] bin_dir)."""
    return settings["slurm"]["bin_dir"]


def sudoers(settings, job_names=None):
    """The sudoers rules of the hub's account, no password, with a reset
    environment: exactly Slurm's sbatch, scancel of one job named one of
    ``job_names`` (``cancel_args``; by default this hub's), the image check
    and the notebook reader (any arguments: they run with the user's rights
    alone), as members of the portal's groups only (never root), and the
    check as ``imagecheck.SITE_CHECK_USER`` (the service's checks of the
    site's images); and as root the extend helper, with three whole numbers
    as its arguments, and the read helper, with a command line of squeue,
    scontrol or sacct (POSIX regular expressions, sudo 1.9.10 or later).
    sudo's match is a first filter only: each helper checks its arguments
    again (the read helper each word), and the extend helper the job."""
    return render(
        "sudoers",
        runas="".join(f"%{group}, " for group in portal_groups(settings)),
        slurm_bin=slurm_bin(settings),
        cancel_args=cancel_args(job_names or job_names_of(settings["slurm"]["job_name"])),
        read_helper=slurmread.INSTALLED_AT,
        read_helper_args=slurmread.SUDOERS_ARGS,
        image_check=imagecheck.INSTALLED_AT,
        notebook_reader=notebook.INSTALLED_AT,
        check_user=imagecheck.SITE_CHECK_USER,
        helper=extendhelper.INSTALLED_AT,
        helper_args=extendhelper.SUDOERS_ARGS,
        hub_user=settings["hub"]["user"],
    )


def job_names_of(job_name):
    """The names of a hub's jobs: its sessions' ([slurm] job_name) and its
    notebook jobs' (``portal.notebookjobs.job_name``)."""
    return [job_name, job_name + slurmread.NOTEBOOK_SUFFIX]


def cancel_args(job_names):
    """scancel's arguments the sudoers rule allows, as a regular expression:
    ``--name=NAME JOB``, NAME one of ``job_names``. scancel's own filter
    then leaves job JOB alone unless it has that name, and sudo runs it as
    the job's user, whom Slurm lets cancel their own jobs only: the hub's
    account cancels no job but a portal user's named as the portal's. A
    name's ``.`` is a bracket (``[.]``: no backslash, which sudoers would
    take), and sudoers' ``=`` is escaped.

    >>> print(cancel_args(["portal-jupyter", "portal-jupyter-notebook", "lab.x"]))
    ^--name\\=(lab[.]x|portal-jupyter|portal-jupyter-notebook) [0-9]{1,10}$
    """
    names = sorted(set(job_names))
    if not names or not all(extendhelper.NAME_RE.fullmatch(name) for name in names):
        raise SetupError(f"not job names the portal takes: {names!r}: see [slurm] job_name")
    alternatives = "|".join(name.replace(".", "[.]") for name in names)
    return f"^--name\\=({alternatives}) [0-9]{{1,10}}$"


def registered_job_names(registry=extendhelper.REGISTRY):
    """The names of the jobs of every hub registered on this host (each
    registration's job name, and its notebook jobs'): several hubs (the
    demo's, the tests') share one sudoers file."""
    names = []
    for hub in extendhelper.System(str(registry)).hubs():
        names += job_names_of(hub.job_name)
    return names


def registration(settings):
    """This hub's registration with the helper (JSON text): its sessions'
    job name and their users' groups and uid range. The helper extends only
    jobs of a registered name; each hub (the demo's, the tests', the
    benchmarks') has its own job name and so its own file."""
    try:
        return site_settings.extend_registration(settings)
    except ValueError as e:
        helper = extendhelper.INSTALLED_AT
        raise SetupError(f"cannot register this hub with {helper}: {e}") from None


def proxy_args(settings, layout):
    """configurable-http-proxy's arguments: the public side from [hub]
    bind_url (HTTPS with [tls] cert), routes by host under [hub] domain (each
    user's sessions on NAME.DOMAIN), and with [tls] internal its API and its
    requests in mutual TLS with the hub's internal certificates. A [hub]
    public_url that does not fit bind_url is refused before the proxy
    listens anywhere (SettingsError, naming the fix)."""
    site_settings.check_public_url(settings)
    bind = settings["hub"]["bind_url"].split("://", 1)[-1].split("/", 1)[0]
    host, port = bind.rsplit(":", 1)[0], bind.rsplit(":", 1)[-1]
    args = ["--ip", host, "--port", port]
    if is_https(settings):
        args += ["--ssl-key", str(layout.proxy_key), "--ssl-cert", settings["tls"]["cert"]]
    if settings["hub"]["domain"]:
        args += ["--host-routing"]
    scheme = "http"
    if settings["tls"]["internal"]:
        scheme, tls = "https", layout.proxy_tls_dir
        args += ["--api-ssl-key", f"{tls}/proxy-api.key", "--api-ssl-cert", f"{tls}/proxy-api.crt"]
        args += ["--api-ssl-ca", f"{tls}/hub-ca.crt"]
        args += ["--api-ssl-request-cert", "--api-ssl-reject-unauthorized"]
        args += ["--client-ssl-key", f"{tls}/proxy-client.key"]
        args += ["--client-ssl-cert", f"{tls}/proxy-client.crt"]
        args += ["--client-ssl-ca", f"{tls}/proxy-client-ca_trust.crt"]
        args += ["--client-ssl-request-cert", "--client-ssl-reject-unauthorized"]
    # where the hub's API listens ([hub] api_ip): its own route, and its error pages
    ip = site_settings.hub_api_ip(settings)
    ip = "127.0.0.1" if ip in ("0.0.0.0", "::") else ip
    hub = f"{scheme}://{ip}:{settings['hub']['api_port']}"
    args += ["--api-ip", "127.0.0.1", "--api-port", str(settings["hub"]["proxy_api_port"])]
    return args + ["--default-target", hub, "--error-target", f"{hub}/hub/error"]


def proxy_command(settings, layout):
    """configurable-http-proxy's whole command line, as its unit runs it."""
    proxy = shutil.which("configurable-http-proxy", path="/usr/local/bin:/usr/bin:/bin")
    return [proxy or "/usr/local/bin/configurable-http-proxy", *proxy_args(settings, layout)]


def proxy_check(settings):
    """``(url, connect)``: where to ask whether the portal answers, and
    curl's ``--connect-to`` for it. The public URL, except behind a site's
    web server ([hub] public_url), which may not run yet: then the proxy
    itself on its loopback bind, asked for the public host (its routes are
    by host).

    >>> hub = {"bind_url": "http://127.0.0.1:8000", "domain": "portal.example.org",
    ...        "public_url": "https://portal.example.org/"}
    >>> proxy_check({"hub": hub})
    ('http://portal.example.org:8000/', 'portal.example.org:8000:127.0.0.1:8000')
    >>> proxy_check({"hub": {**hub, "public_url": "", "bind_url": "https://0.0.0.0:8000"}})
    ('https://portal.example.org:8000/', '')
    """
    from urllib.parse import urlparse

    if not settings["hub"]["public_url"]:
        return site_settings.public_url(settings), ""
    bind = urlparse(settings["hub"]["bind_url"])
    host = urlparse(settings["hub"]["public_url"]).hostname
    port = bind.port or (443 if bind.scheme == "https" else 80)
    address = f"[{bind.hostname}]" if ":" in bind.hostname else bind.hostname
    url = f"{bind.scheme}://{host}:{port}{bind.path or '/'}"
    return url, f"{host}:{port}:{address}:{port}"


def own_paths(settings, layout):
    """Every path setup may write, and uninstall remove: the portal's own."""
    paths = [SUDOERS, MANIFEST, PROXY_TOKEN_ENV, Path(extendhelper.REGISTRY), *map(Path, HELPERS)]
    paths += [layout.state, layout.run_dir, layout.proxy_log, layout.proxy_key]
    paths += [Path(units.UNIT_DIR) / units.HUB_UNIT, Path(units.UNIT_DIR) / units.PROXY_UNIT]
    paths += [Path(settings["envs"]["prefix"]) / "notebook_templates"]
    return paths


# ---------------------------------------------------------------- as others


def hub_env(layout):
    """The whole environment of what runs as the hub's account: nothing of
    the caller's but where the site settings are, and where its code is
    when the caller was given it (deploy/hub.sh: a checkout's, which the
    hub then runs too)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(layout.state)}
    for name in ("PORTAL_CONFIG", "PYTHONPATH"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def as_account(user, *argv, **kwargs):
    """``argv`` run as ``user`` (its groups too), with no capability left;
    what it writes (a database, a certificate) is its account's alone."""
    who = [f"--reuid={user}", f"--regid={user}", "--init-groups", "--inh-caps=-all"]
    return subprocess.run(["setpriv", *who, "--", *argv], umask=0o077, **kwargs)


# ---------------------------------------------------------------- steps


def missing_prerequisites(settings):
    """What the portal needs and does not install, each missing one named
    with its fix ([] when none is). Slurm's commands are looked for in
    [slurm] bin_dir."""
    missing = [
        f"{name} not found on PATH: {fix}"
        for name, fix in PREREQUISITES.items()
        if not shutil.which(name, path=ROOT_PATH)
    ]
    slurm = slurm_commands.missing_commands(slurm_bin(settings))  # the hub's start check's
    return missing + ([slurm] if slurm else [])


def check_prerequisites(settings):
    """SetupError naming each missing prerequisite with its fix."""
    missing = missing_prerequisites(settings)
    if missing:
        raise SetupError("missing prerequisites:\n  " + "\n  ".join(missing))


def ensure_accounts(settings):
    """The hub's and the proxy's system accounts (no login, no home),
    made when missing and noted in MANIFEST for uninstall."""
    made = []
    for user in (settings["hub"]["user"], settings["hub"]["proxy_user"]):
        try:
            pwd.getpwnam(user)
            continue
        except KeyError:
            pass
        argv = [root_command("useradd"), "--system", "--user-group", "--no-create-home",
                "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", user]  # fmt: skip
        if subprocess.run(argv).returncode:
            raise SetupError(f"could not create the system account {user} (useradd)")
        say(f"created the system account {user}")
        made.append(user)
    if made:
        note_in_manifest("accounts", made)


def read_manifest():
    try:
        return json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return {}


def install_templates(settings):
    """The notebook templates, where sessions copy them from (world-readable),
    replaced whole so a session never sees half a copy. [envs] prefix may be
    a share this login node sees read-only (the environments are written
    where the share is): templates already the package's are left as they
    are; others there are a SetupError with the fix. Setup notes in
    MANIFEST that it wrote them, so that uninstall removes only those."""
    source = shipped("notebook_templates")
    dest = Path(settings["envs"]["prefix"]) / "notebook_templates"
    # __pycache__: pip compiles the wheel's copy as it installs it
    same = ["diff", "-rq", "-x", "__pycache__", "-x", ".*", str(source), str(dest)]
    if dest.is_dir() and subprocess.run(same, capture_output=True).returncode == 0:
        return
    if not os.access(dest.parent, os.W_OK):
        raise SetupError(
            f"the notebook templates in {dest} are not this package's, and {dest.parent} "
            f"is read-only here: copy {source} there where [envs] prefix is writable"
        )
    new, old = Path(f"{dest}.new"), Path(f"{dest}.old")
    shutil.rmtree(new, ignore_errors=True)
    shutil.copytree(source, new, ignore=shutil.ignore_patterns("__pycache__", ".*"))
    subprocess.run(["chmod", "-R", "a+rX", str(new)], check=True)
    shutil.rmtree(old, ignore_errors=True)
    if dest.is_dir():
        dest.rename(old)
    new.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    note_in_manifest("templates", [str(dest)])
    say(f"notebook templates installed in {dest}")


def note_new_folders(path):
    """The folders above ``path`` that do not exist yet (``/var/lib/portal``
    above a state folder, ``/usr/local/libexec`` above the helpers' folder),
    noted in MANIFEST before setup makes them: uninstall removes them again
    when they are empty, and no folder a site made."""
    new = []
    for parent in Path(path).parents:
        if parent.exists():
            break
        new.append(str(parent))
    if new:
        note_in_manifest("folders", new)


def note_in_manifest(key, items):
    """``items`` added to the list ``key`` of MANIFEST (what setup made)."""
    manifest = read_manifest()
    manifest[key] = sorted(set(manifest.get(key, [])) | set(items))
    make_dir(MANIFEST.parent)
    write_if_changed(MANIFEST, json.dumps(manifest, indent=1) + "\n", 0o644)


def install_helper(source, installed_at):
    """A copy of ``source`` (portal/helper/extend.py, imagecheck.py), root's
    and 0755, in a folder of root's. What sudo runs must be writable by root
    alone, however writable the package is; the helpers run under
    ``/usr/bin/python3 -I`` and import the standard library only."""
    path = Path(installed_at)
    note_new_folders(path.parent)
    make_dir(path.parent, 0o755, "root")
    data = Path(source).read_bytes()
    if path.is_file() and not path.is_symlink():
        st = path.stat()
        if st.st_uid == 0 and st.st_mode & 0o7777 == 0o755 and path.read_bytes() == data:
            return
    replace_file(path, data, 0o755)
    say(f"installed {path}")


def register_hub(settings):
    """REGISTRY/JOB_NAME.json, root's and 0644 (the job name is a plain name:
    ``registration`` checked it)."""
    content = registration(settings) + "\n"
    registry, job_name = Path(extendhelper.REGISTRY), settings["slurm"]["job_name"]
    make_dir(registry, 0o755, "root")
    file = registry / f"{job_name}.json"
    if file.is_symlink():
        file.unlink()
    if write_if_changed(file, content, 0o644):
        say(f"registered the sessions named {job_name} with {extendhelper.INSTALLED_AT} ({file})")


def install_sudoers(settings):
    """The rules, checked with visudo before they are installed; scancel's
    for the jobs of every hub registered here (this one's included:
    ``register_hub`` ran before)."""
    content = sudoers(settings, registered_job_names())
    if SUDOERS.is_file() and not SUDOERS.is_symlink() and SUDOERS.read_text() == content:
        return
    tmp = Path(f"{SUDOERS}.tmp")
    replace_file(tmp, content, 0o440)
    if subprocess.run([root_command("visudo"), "-c", "-q", "-f", str(tmp)]).returncode:
        tmp.unlink()
        raise SetupError("the sudoers rule is not valid (visudo -c)")
    os.replace(tmp, SUDOERS)
    say(f"wrote {SUDOERS}")


def read_token(path):
    """The token in ``path``, a regular file (no link followed) holding 64
    hex digits; None otherwise. The hub's account owns the folder: root
    reads nothing else there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = f.read(200).strip()
    return text if re.fullmatch(r"[0-9a-f]{64}", text) else None


def metrics_token(path):
    """The monitoring service's token (``read:metrics`` alone, spawners.hub_config)
    at ``path`` (the hub's copy), made once; deploy/prometheus_setup.py gives
    the login node's Prometheus its own copy."""
    path = Path(path)
    if read_token(path) is None:
        replace_file(path, secrets.token_hex(32) + "\n", 0o600)
        say(f"made the monitoring token {path}")
    return path


def check_readable(layout):
    """The hub's account must read its configuration and the settings."""
    paths = [hub_config_file()]
    paths += [Path(os.environ["PORTAL_CONFIG"])] if os.environ.get("PORTAL_CONFIG") else []
    paths += [Path(site_settings.SITE_FILE)] if Path(site_settings.SITE_FILE).exists() else []
    for path in paths:
        if as_account(layout.hub_user, "test", "-r", str(path)).returncode:
            raise SetupError(
                f"{path} is not readable by the hub's account {layout.hub_user}: keep the "
                "package world-readable (not under /root), and the settings readable by "
                f"that account (with a database password: root:{layout.hub_user}, mode 0640)"
            )


def state_folders(settings, layout):
    """The hub's state (database, cookie secret, proxy token, log): its
    account's only; the run and log folders, root's."""
    note_new_folders(layout.state)
    if make_dir(layout.state, 0o700, layout.hub_user):
        say(f"made the hub's state folder {layout.state}")
    metrics_token(site_settings.metrics_token_file(settings))
    # chown -R and chmod -R follow no link
    subprocess.run(["chown", "-R", f"{layout.hub_user}:{layout.hub_user}", str(layout.state)],
                   check=True)  # fmt: skip
    subprocess.run(["chmod", "-R", "go-rwx", str(layout.state)], check=True)
    for folder in (RUN_ROOT, layout.run_dir, LOG_ROOT):
        make_dir(folder, 0o755, "root")
    if not layout.proxy_log.exists():
        uid = pwd.getpwnam(layout.proxy_user)
        replace_file(layout.proxy_log, "", 0o600, uid.pw_uid, uid.pw_gid)


def proxy_key(settings, layout):
    """The proxy's copy of the web certificate's key ([tls] key, root's):
    readable by the proxy's account alone."""
    if not is_https(settings):
        return
    source = Path(settings["tls"]["key"])
    if not source.is_file() or not source.stat().st_size:
        raise SetupError(f"no key at [tls] key = {source}: name the web certificate's key")
    if not Path(settings["tls"]["cert"]).is_file():
        raise SetupError(f"no certificate at [tls] cert = {settings['tls']['cert']}")
    if private_copy(source.read_bytes(), layout.proxy_key, layout.proxy_user):
        say(f"copied the key for {layout.proxy_user}: {layout.proxy_key}")


def internal_certs(settings, layout):
    """With [tls] internal: the hub's internal CAs and certificates, made
    when missing by the hub's account with the hub's configuration
    (``jupyterhub --generate-certs``); then the proxy's copies of its keys
    (its account's alone) and of the certificates and CAs, in a folder of
    root's, read through the hub's account (root reads nothing by path in
    the state folder, where a link could point anywhere)."""
    if not settings["tls"]["internal"]:
        return
    store = site_settings.internal_certs_location(settings)
    key = f"{store}/proxy-client/proxy-client.key"
    if as_account(layout.hub_user, "test", "-s", key).returncode:
        argv = [str(layout.prefix / "bin" / "jupyterhub"), "--generate-certs",
                "-f", str(hub_config_file())]  # fmt: skip
        made = as_account(layout.hub_user, *argv, env=hub_env(layout), cwd=layout.state,
                          capture_output=True, text=True)  # fmt: skip
        if made.returncode:
            raise SetupError(f"jupyterhub --generate-certs failed:\n{made.stdout}{made.stderr}")
        say(f"made the hub's internal CAs and certificates in {store}")

    def read(name):
        out = as_account(layout.hub_user, "cat", f"{store}/{name}", capture_output=True)
        if out.returncode:
            raise SetupError(f"cannot read {store}/{name} as {layout.hub_user}")
        return out.stdout

    make_dir(layout.proxy_tls_dir, 0o755, "root")
    for name in PROXY_KEYS:
        private_copy(read(f"{name}/{name}.key"), layout.proxy_tls_dir / f"{name}.key",
                     layout.proxy_user)  # fmt: skip
    for name in PROXY_CERTS:
        to = layout.proxy_tls_dir / Path(name).name
        data = read(name)
        if not to.is_file() or to.is_symlink() or to.read_bytes() != data:
            replace_file(to, data, 0o644)


def migrate(settings, layout):
    """The hub's database and the portal's store at their newest schema,
    migrated by the hub's account (``portal migrate``)."""
    done = as_account(layout.hub_user, str(layout.portal_bin), "migrate", env=hub_env(layout),
                      cwd=layout.state, capture_output=True, text=True)  # fmt: skip
    if done.returncode:
        raise SetupError(f"the database's migrations failed:\n{done.stdout}{done.stderr}")
    for line in done.stdout.splitlines():
        say(line)


def systemd_runs():
    return Path("/run/systemd/system").is_dir()


def proxy_token_env(layout):
    """The proxy's token for its unit (root's) and the hub's copy (written
    by the hub's account, through stdin), made once."""
    current = PROXY_TOKEN_ENV.read_text().strip() if PROXY_TOKEN_ENV.is_file() else ""
    match = re.fullmatch(r"CONFIGPROXY_AUTH_TOKEN=([0-9a-f]{64})", current)
    token = match[1] if match else secrets.token_hex(32)
    if not match:
        make_dir(PROXY_TOKEN_ENV.parent)
        replace_file(PROXY_TOKEN_ENV, f"CONFIGPROXY_AUTH_TOKEN={token}\n", 0o600)
        say(f"made the proxy's token {PROXY_TOKEN_ENV}")
    write = 'umask 077 && cat >"$1.tmp" && mv -f "$1.tmp" "$1"'
    same = as_account(layout.hub_user, "sh", "-c", 'test "$(cat "$1")" = "$2"', "sh",
                      str(layout.proxy_token), token, capture_output=True)  # fmt: skip
    if same.returncode:
        as_account(layout.hub_user, "sh", "-c", write, "sh", str(layout.proxy_token),
                   input=token.encode(), check=True)  # fmt: skip


def install_units(settings, layout):
    """The hub's and the proxy's units, on a host that runs systemd; True
    when one changed (systemd is then told)."""
    config = os.environ.get("PORTAL_CONFIG", "")
    writable = [layout.state, layout.run_dir, LOG_ROOT]
    texts = {
        units.PROXY_UNIT: units.proxy_unit(
            settings, proxy_command(settings, layout), PROXY_TOKEN_ENV
        ),  # fmt: skip
        units.HUB_UNIT: units.hub_unit(settings, layout.portal_bin, layout.state, writable, config),
    }
    proxy_token_env(layout)
    changed = False
    for name, text in texts.items():
        if write_if_changed(Path(units.UNIT_DIR) / name, text, 0o644):
            say(f"wrote {units.UNIT_DIR}/{name}")
            changed = True
    if changed:
        subprocess.run(["systemctl", "daemon-reload"], check=True)
        say(f"enable and start them: systemctl enable --now {units.PROXY_UNIT} {units.HUB_UNIT}")
    return changed


def setup(settings, with_units=None, prefix=None):
    """Every step, in order; ``with_units`` None: when systemd runs."""
    layout = Layout.of(settings, prefix)
    check_prerequisites(settings)
    ensure_accounts(settings)
    install_templates(settings)
    for installed_at, module in HELPERS.items():
        install_helper(module.__file__, installed_at)
    register_hub(settings)
    install_sudoers(settings)
    check_readable(layout)
    state_folders(settings, layout)
    proxy_key(settings, layout)
    internal_certs(settings, layout)
    migrate(settings, layout)
    if with_units or (with_units is None and systemd_runs()):
        install_units(settings, layout)
    return layout


def uninstall(settings, purge=False, prefix=None):
    """What setup made, and nothing else: the units (stopped first), the
    sudoers rules, the helpers and this hub's registration, the run folder,
    the proxy's copies, the notebook templates; with ``purge`` the hub's
    state too; the accounts setup made, once nothing else is registered."""
    layout = Layout.of(settings, prefix)
    if systemd_runs():
        for name in (units.HUB_UNIT, units.PROXY_UNIT):
            if (Path(units.UNIT_DIR) / name).exists():
                subprocess.run(["systemctl", "disable", "--now", name], capture_output=True)
    gone = []
    for path in (Path(units.UNIT_DIR) / units.HUB_UNIT, Path(units.UNIT_DIR) / units.PROXY_UNIT):
        gone += _remove(path)
    if gone and systemd_runs():
        subprocess.run(["systemctl", "daemon-reload"], check=False)
    registry = Path(extendhelper.REGISTRY)
    gone += _remove(registry / f"{settings['slurm']['job_name']}.json")
    others = [p for p in registry.glob("*.json")] if registry.is_dir() else []
    if not others:  # the last hub on this host: its helpers and rules go too
        gone += _remove(SUDOERS, registry, *map(Path, HELPERS), PROXY_TOKEN_ENV)
        _rmdir(Path(extendhelper.INSTALLED_AT).parent)
    gone += _remove(layout.run_dir, layout.proxy_key, layout.proxy_log)
    # the templates where setup wrote them (not a share another node filled)
    templates = str(Path(settings["envs"]["prefix"]) / "notebook_templates")
    if templates in read_manifest().get("templates", []):
        gone += _remove(templates)
    if purge:
        gone += _remove(layout.state)
    _rmdir(RUN_ROOT, LOG_ROOT)
    if not others:
        for user in read_manifest().get("accounts", []):
            if subprocess.run([root_command("userdel"), user], capture_output=True).returncode == 0:
                gone.append(f"the system account {user}")
        # the folders setup made above its own, deepest first, when empty
        for folder in sorted(read_manifest().get("folders", []), key=len, reverse=True):
            if _rmdir(folder):
                gone.append(folder)
        gone += _remove(MANIFEST)
        _rmdir(MANIFEST.parent)
    for what in gone:
        say(f"removed {what}")
    if not purge and layout.state.exists():
        say(f"kept the hub's state {layout.state} (portal uninstall --purge removes it)")
    return gone


def _remove(*paths):
    gone = []
    for path in map(Path, paths):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
        else:
            continue
        gone.append(str(path))
    return gone


def _rmdir(*paths):
    """Each of ``paths`` removed when it is an empty folder; True when all were."""
    removed = True
    for path in paths:
        try:
            os.rmdir(path)
        except OSError:
            removed = False
    return removed
