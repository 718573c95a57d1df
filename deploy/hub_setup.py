"""What deploy/hub.sh prepares before it starts the hub and its proxy, and
the proxy's command line. deploy/hub.sh: start | stop | restart (the hub
alone) | status | url | proxy. ``start`` and ``restart`` pass any further
arguments to jupyterhub (the benchmarks' lightweight sessions); ``proxy``
starts the proxy alone (the benchmarks' stock-batchspawner hub, which
bench/hubs.py runs itself). configurable-http-proxy runs on its own so that
restarting the hub keeps every session reachable.

Least privilege: hub.sh runs as root only to prepare. The hub (and the
admin service it starts) runs as [hub] user, the proxy as [hub] proxy_user,
both system accounts, each with an explicit environment (nothing of the
caller's). The hub's elevated actions are the sudoers rules written here:
sbatch and scancel as members of the portal's groups, never root; the
helper portal-image-check (installed here, root's), which checks a user's
own container image as that user, never root (portal/helper/imagecheck.py);
and, as root, the helper portal-extend (installed here, root's), which
lengthens a running session after checking it again
(portal/helper/extend.py). The hub
holds no Slurm admin level (deploy/slurm.sh). The proxy's token is made
anew whenever the proxy starts (so at every ``make up``), in a file only the
hub's account reads; the proxy alone gets it, in its environment.

Inside the cluster ([tls] internal, JupyterHub's internal_ssl) the hub, the
proxy, the admin service and the sessions speak mutual TLS: the hub's
internal CAs and certificates are made in its state folder by the hub's
account (``jupyterhub --generate-certs``, with the hub's own configuration)
before the proxy starts, kept across restarts (the proxy and the sessions
outlive the hub), and the proxy gets copies in a folder of root's, read
through the hub's account (root reads nothing by path in the state folder,
where a link could point anywhere): its keys for its account alone (0400),
the certificates and CAs world-readable. Its API takes a client certificate
of the hub's CA alone (only the hub calls it); as a client it trusts the
CAs of the hub and of the sessions and services.

Pid files and the proxy's log are in folders of root's: root never writes
by path into the state folder, which the hub's account owns (a link planted
there would have root write any file).
"""

import os
import re
import runpy
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from deploy import nsswitch, tls_setup
from deploy.base import (
    REPO_DIR,
    DeployError,
    logger,
    main_of,
    make_dir,
    render,
    replace_file,
    run,
    write_if_changed,
)
from portal import settings as site_settings
from portal.helper import imagecheck, notebook
from portal.settings import portal_groups

log = logger("hub")

SUDOERS = Path("/etc/sudoers.d/portal")
SLURM_BIN = "/usr/bin"
EXTEND_SOURCE = REPO_DIR / "portal" / "helper" / "extend.py"
IMAGE_CHECK_SOURCE = REPO_DIR / "portal" / "helper" / "imagecheck.py"
NOTEBOOK_SOURCE = REPO_DIR / "portal" / "helper" / "notebook.py"
TEMPLATES_SOURCE = REPO_DIR / "notebook_templates"
# What the proxy copies from the hub's internal-ssl store.
PROXY_KEYS = ("proxy-api", "proxy-client")
PROXY_CERTS = (
    "proxy-api/proxy-api.crt",
    "proxy-client/proxy-client.crt",
    "hub-ca/hub-ca.crt",
    "proxy-client-ca_trust.crt",
)


@dataclass(frozen=True)
class Layout:
    """The hub's and the proxy's files, from the settings."""

    state: Path
    envs_prefix: Path
    hub_user: str
    proxy_user: str
    tls_key: Path

    @classmethod
    def of(cls, settings):
        hub = settings["hub"]
        return cls(
            Path(hub["state_dir"]),
            Path(settings["envs"]["prefix"]),
            hub["user"],
            hub["proxy_user"],
            Path(settings["tls"]["key"]),
        )

    hub_env = property(lambda self: self.envs_prefix / "envs" / "hub")
    run_dir = property(lambda self: Path("/run/portal") / self.state.name)
    proxy_log = property(lambda self: Path("/var/log/portal") / f"{self.state.name}-proxy.log")
    proxy_key = property(lambda self: self.tls_key.parent / "proxy.key")  # the proxy's copy
    proxy_tls_dir = property(lambda self: self.run_dir / "proxy-tls")  # its internal certificates


def extend_helper():
    """The facts of the root helper that lengthens a session, from
    portal/helper/extend.py (their one source; read, not imported: it is a
    script of the standard library alone)."""
    return runpy.run_path(str(EXTEND_SOURCE))


# ---------------------------------------------------------------- pure


def is_https(settings):
    return settings["hub"]["bind_url"].startswith("https://")


def sudoers(
    settings,
    helper_path,
    helper_args,
    image_check=imagecheck.INSTALLED_AT,
    notebook_reader=notebook.INSTALLED_AT,
):
    """The sudoers rules of the hub's account, no password, with a reset
    environment: exactly Slurm's sbatch and scancel, the image check
    ``image_check`` and the notebook reader ``notebook_reader`` (any
    arguments: they run with the user's rights alone), as members of the
    portal's groups only (never root), and the check as
    ``imagecheck.SITE_CHECK_USER`` (the service's checks of the site's
    images); and the extend
    helper, as root, with three whole numbers as its arguments (a POSIX
    regular expression, sudo 1.9.10 or later). sudo's match is a first
    filter only: the helper checks its arguments and the job itself again."""
    return render(
        "sudoers",
        runas="".join(f"%{group}, " for group in portal_groups(settings)),
        slurm_bin=SLURM_BIN,
        image_check=image_check,
        notebook_reader=notebook_reader,
        check_user=imagecheck.SITE_CHECK_USER,
        helper=helper_path,
        helper_args=helper_args,
        hub_user=settings["hub"]["user"],
    )


def registration(settings, helper):
    """This hub's registration with the helper (JSON text): its sessions'
    job name and their users' groups and uid range. The helper extends only
    jobs of a registered name; each hub (the demo's, the tests', the
    benchmarks') has its own job name and so its own file."""
    hub = settings["hub"]
    try:
        return helper["registration"](
            settings["slurm"]["job_name"], portal_groups(settings), hub["uid_min"], hub["uid_max"]
        )
    except ValueError as e:
        raise DeployError(f"cannot register this hub with {helper['INSTALLED_AT']}: {e}") from None


def proxy_args(settings, layout):
    """configurable-http-proxy's arguments: the public side from [hub]
    bind_url (HTTPS with [tls] cert), routes by host under [hub] domain (each
    user's sessions on NAME.DOMAIN), and with [tls] internal its API and its
    requests in mutual TLS with the hub's internal certificates."""
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
    hub = f"{scheme}://127.0.0.1:{settings['hub']['api_port']}"
    args += ["--api-ip", "127.0.0.1", "--api-port", str(settings["hub"]["proxy_api_port"])]
    return args + ["--default-target", hub, "--error-target", f"{hub}/hub/error"]


def shell_lines(settings, layout):
    """The facts deploy/hub.sh needs, as shell assignments. The URL and the
    internal certificates' folder are the hub's own answers (portal.settings)."""
    note = (" (HTTPS)" if is_https(settings) else "") + (
        " (internal TLS)" if settings["tls"]["internal"] else ""
    )
    facts = {
        "STATE": layout.state,
        "HUB_ENV": layout.hub_env,
        "RUN_DIR": layout.run_dir,
        "PROXY_PID": layout.run_dir / "proxy.pid",
        "PROXY_INTERNAL": layout.run_dir / "proxy.internal-tls",  # the running proxy's (1 or 0)
        "HUB_PID": layout.run_dir / "jupyterhub.pid",
        "PROXY_LOG": layout.proxy_log,
        "HUB_LOG": layout.state / "jupyterhub.log",  # opened by the hub's account itself
        "HUB_USER": layout.hub_user,
        "PROXY_USER": layout.proxy_user,
        "INTERNAL_CERTS": site_settings.internal_certs_location(settings),
        "URL": site_settings.public_url(settings),
        "PROXY_BIND": ":".join(proxy_args(settings, layout)[1:4:2]),
        "PROXY_NOTE": note,
    }
    return [f"{k}={shlex.quote(str(v))}" for k, v in facts.items()]


# ---------------------------------------------------------------- writers


def as_hub_user(layout, *argv, **kwargs):
    who = [f"--reuid={layout.hub_user}", f"--regid={layout.hub_user}", "--init-groups"]
    return subprocess.run(["setpriv", *who, *argv], **kwargs)


def local_names(settings):
    """Names under .localhost ([hub] domain portal.localhost: the hub and
    every NAME.portal.localhost) are loopback for this host's programs too,
    as they are for browsers: NSS's myhostname module after files."""
    domain = settings["hub"]["domain"]
    if (domain == "localhost" or domain.endswith(".localhost")) and nsswitch.update(
        nsswitch.with_myhostname
    ):
        log("added myhostname to hosts in /etc/nsswitch.conf (*.localhost resolves to loopback)")


def install_templates(settings):
    """The notebook templates, where sessions copy them from (world-readable),
    replaced whole so a session never sees half a copy."""
    dest = Path(settings["envs"]["prefix"]) / "notebook_templates"
    same = ["diff", "-rq", str(TEMPLATES_SOURCE), str(dest)]
    if dest.is_dir() and subprocess.run(same, capture_output=True).returncode == 0:
        return
    new, old = Path(f"{dest}.new"), Path(f"{dest}.old")
    shutil.rmtree(new, ignore_errors=True)
    run(["cp", "-r", str(TEMPLATES_SOURCE), str(new)])
    run(["chmod", "-R", "a+rX", str(new)])
    shutil.rmtree(old, ignore_errors=True)
    if dest.is_dir():
        dest.rename(old)
    new.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    log(f"notebook templates installed in {dest}")


def install_helper(source, installed_at):
    """A copy of ``source`` (portal/helper/extend.py, imagecheck.py), root's
    and 0755, in a folder of root's. What sudo runs must be writable by root
    alone, however writable the repository is; the helpers run under
    ``/usr/bin/python3 -I`` and import the standard library only."""
    path = Path(installed_at)
    make_dir(path.parent, 0o755, "root")
    if path.is_file() and not path.is_symlink():
        st = path.stat()
        if st.st_uid == 0 and st.st_mode & 0o7777 == 0o755:
            if path.read_bytes() == source.read_bytes():
                return
    run(["install", "-m", "0755", "-o", "root", "-g", "root", str(source), f"{path}.tmp"])
    os.replace(f"{path}.tmp", path)
    log(f"installed {path}")


def register_hub(settings, helper):
    """REGISTRY/JOB_NAME.json, root's and 0644 (the job name is a plain name:
    ``registration`` checked it)."""
    content = registration(settings, helper) + "\n"
    registry, job_name = Path(helper["REGISTRY"]), settings["slurm"]["job_name"]
    make_dir(registry, 0o755, "root")
    file = registry / f"{job_name}.json"
    if file.is_symlink():
        file.unlink()
    if write_if_changed(file, content, 0o644):
        log(f"registered the sessions named {job_name} with {helper['INSTALLED_AT']} ({file})")


def install_sudoers(settings, helper):
    """The rules, checked with visudo before they are installed."""
    content = sudoers(settings, helper["INSTALLED_AT"], helper["SUDOERS_ARGS"])
    if SUDOERS.is_file() and SUDOERS.read_text() == content:
        return
    tmp = Path(f"{SUDOERS}.tmp")
    tmp.write_text(content)
    tmp.chmod(0o440)
    if subprocess.run(["visudo", "-c", "-q", "-f", str(tmp)]).returncode:
        tmp.unlink()
        raise DeployError("the sudoers rule is not valid (visudo -c)")
    os.replace(tmp, SUDOERS)
    log(f"wrote {SUDOERS}")


def metrics_token(path):
    """The monitoring service's token (``read:metrics`` alone, spawners.hub_config)
    at ``path`` (the hub's copy), made once; deploy/prometheus_setup.py gives
    the login node's Prometheus its own copy."""
    path = Path(path)
    if read_token(path) is None:
        replace_file(path, secrets.token_hex(32) + "\n", 0o600)
        log(f"made the monitoring token {path}")
    return path


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


def check_readable(layout):
    """The hub's account must read the repository and the settings it is given."""
    paths = [REPO_DIR / "jupyterhub_config.py"]
    paths += [Path(os.environ["PORTAL_CONFIG"])] if os.environ.get("PORTAL_CONFIG") else []
    for path in paths:
        if as_hub_user(layout, "test", "-r", str(path)).returncode:
            raise DeployError(
                f"{path} is not readable by the hub's account {layout.hub_user}: keep the "
                "repository world-readable (not under /root), and the settings readable by "
                f"that account (with a database password: root:{layout.hub_user}, mode 0640)"
            )


def cmd_prepare(settings):
    """Everything the hub and the proxy need before they start (the service
    accounts exist: deploy/common.sh ensure_service_accounts)."""
    layout = Layout.of(settings)
    helper = extend_helper()
    local_names(settings)
    install_templates(settings)
    install_helper(EXTEND_SOURCE, helper["INSTALLED_AT"])
    install_helper(IMAGE_CHECK_SOURCE, imagecheck.INSTALLED_AT)
    install_helper(NOTEBOOK_SOURCE, notebook.INSTALLED_AT)
    register_hub(settings, helper)
    install_sudoers(settings, helper)
    check_readable(layout)
    # The hub's state (database, cookie secret, proxy token, log): its
    # account only. (chown -R and chmod -R follow no link.)
    make_dir(layout.state, 0o700, layout.hub_user)
    metrics_token(site_settings.metrics_token_file(settings))
    run(["chown", "-R", f"{layout.hub_user}:{layout.hub_user}", str(layout.state)])
    run(["chmod", "-R", "go-rwx", str(layout.state)])
    for folder in (Path("/run/portal"), layout.run_dir, Path("/var/log/portal")):
        make_dir(folder, 0o755, "root")
    if not layout.proxy_log.exists():
        user = ["-o", layout.proxy_user, "-g", layout.proxy_user]
        run(["install", "-m", "0600", *user, "/dev/null", str(layout.proxy_log)])
    if is_https(settings):
        tls_setup.cmd_ensure(settings)
        tls_setup.key_copy(settings, layout.proxy_user, layout.proxy_key)


def cmd_proxy_certs(settings, internal_certs):
    """The proxy's copies of its internal keys and certificates and of the
    CAs (the store made by ``jupyterhub --generate-certs``)."""
    layout = Layout.of(settings)
    make_dir(layout.proxy_tls_dir, 0o755, "root")

    def read(name):
        out = as_hub_user(layout, "cat", f"{internal_certs}/{name}", capture_output=True)
        if out.returncode:
            raise DeployError(f"cannot read {internal_certs}/{name} as {layout.hub_user}")
        return out.stdout

    for name in PROXY_KEYS:
        key = read(f"{name}/{name}.key")
        tls_setup.key_copy(settings, layout.proxy_user, layout.proxy_tls_dir / f"{name}.key", key)
    for name in PROXY_CERTS:
        to = layout.proxy_tls_dir / Path(name).name
        Path(f"{to}.tmp").write_bytes(read(name))
        os.chmod(f"{to}.tmp", 0o644)
        os.replace(f"{to}.tmp", to)


def cmd_proxy_args(settings):
    print("\n".join(proxy_args(settings, Layout.of(settings))))


def cmd_shell(settings):
    print("\n".join(shell_lines(settings, Layout.of(settings))))


main = main_of(
    {
        "shell": cmd_shell,
        "prepare": cmd_prepare,
        "proxy-certs": cmd_proxy_certs,
        "proxy-args": cmd_proxy_args,
    },
    log,
)

if __name__ == "__main__":
    sys.exit(main())
