"""The systemd units of the portal (pure: settings in, text out), which
``portal setup`` installs in ``UNIT_DIR`` on a host that runs systemd.

- ``portal-proxy.service``: configurable-http-proxy, as [hub] proxy_user,
  with its whole command line in ExecStart (setup computes it from the
  settings, which the proxy's account need not read: they may hold a
  database password). Its token is in a file of root's that systemd reads
  as root (``EnvironmentFile``): the token reaches the proxy in its
  environment alone, never in an argv. The proxy is a unit of its own so
  that restarting the hub keeps every session reachable.
- ``portal-hub.service``: ``portal hub`` (JupyterHub with the portal's
  configuration, and the services it starts: the admin service, the idle
  culler), as [hub] user, in its state folder.

Both restart on failure. Sessions are Slurm jobs, not the hub's children:
a hub that stops or crashes leaves them running, and finds them again.

Hardening (``systemd-analyze security`` reads it), in both (``COMMON``):
``PrivateTmp``, ``PrivateIPC``, ``ProtectSystem=strict`` (all read-only
but the hub's ``ReadWritePaths``: its state, run and log folders),
``ProtectControlGroups``, ``ProtectProc=invisible`` (other users' processes
unseen), ``ProcSubset=pid``, ``DevicePolicy=closed`` (the pseudo devices
alone), ``KeyringMode=private``, ``RemoveIPC``, ``UMask=0077``. In the
proxy besides (``FILTERED`` and its own): ``PrivateDevices``,
``ProtectKernelTunables``, ``ProtectKernelModules``, ``ProtectKernelLogs``, ``ProtectClock``,
``ProtectHostname``, ``RestrictRealtime``, ``LockPersonality``,
``SystemCallArchitectures=native``, ``RestrictAddressFamilies`` (IP and
Unix sockets), ``NoNewPrivileges``, ``RestrictSUIDSGID``,
``RestrictNamespaces``, ``PrivateUsers`` and an empty
capability set (``CAP_NET_BIND_SERVICE`` alone, without ``PrivateUsers``,
when it listens on a port under 1024 itself).

The hub goes without ``NoNewPrivileges`` and ``RestrictSUIDSGID``, and
its ``CapabilityBoundingSet`` keeps what sudo needs (``CAP_SETUID``,
``CAP_SETGID``, ``CAP_AUDIT_WRITE``): its Slurm commands as the user, its
image check and the extension helper run through sudo (setuid root), which
those would stop. (The helper, run as root, needs no other capability: it
asks slurmctld through munge. A user namespace, as Charliecloud makes for
the image check, starts with every capability again.) It goes without
every directive of ``FILTERED`` too: each is a seccomp filter or drops a
capability, and systemd then sets ``NoNewPrivileges`` itself for a unit
that runs as an unprivileged user (systemd.exec(5)); under systemd 252
(Debian 12) each of them alone makes sudo refuse ("The 'no new
privileges' flag is set"), so the hub could neither submit nor extend a
session (tests/site/test_site_install.py, where a login node first ran
the units under systemd). It goes without
``RestrictNamespaces``: the image check runs a user's image with
Charliecloud, in user namespaces. ``ProtectHome`` is ``read-only`` in the
hub, not ``yes``: a notebook job's notebook is read from its user's home by
the notebook reader, as that user. ``MemoryDenyWriteExecute`` is left out
of both: node's V8 (the proxy) and Python's ctypes callbacks need writable
executable memory.
"""

UNIT_DIR = "/etc/systemd/system"
HUB_UNIT = "portal-hub.service"
PROXY_UNIT = "portal-proxy.service"

COMMON = """\
PrivateTmp=yes
PrivateIPC=yes
ProtectSystem=strict
ProtectControlGroups=yes
ProtectProc=invisible
ProcSubset=pid
DevicePolicy=closed
KeyringMode=private
RemoveIPC=yes
UMask=0077
"""
# Seccomp filters and dropped capabilities: for a unit of an unprivileged
# user, systemd sets NoNewPrivileges with each, which the hub's sudo cannot have.
FILTERED = """\
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectClock=yes
ProtectHostname=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native
"""


def _environment(config_file):
    return f"Environment=PORTAL_CONFIG={config_file}\n" if config_file else ""


def systemd_quote(argv):
    """``argv`` as an ExecStart= line: each word double-quoted where needed.

    >>> print(systemd_quote(["/usr/bin/chp", "--ip", "0.0.0.0", "a b", "$x"]))
    /usr/bin/chp --ip 0.0.0.0 "a b" "$$x"
    """

    def word(w):
        if w and not any(ch in w for ch in " \t\"'\\$%;"):
            return w
        return '"' + w.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$").replace(
            "%", "%%") + '"'  # fmt: skip

    return " ".join(word(w) for w in argv)


def proxy_unit(settings, argv, proxy_env_file):
    """``portal-proxy.service``: ``argv`` (configurable-http-proxy and its
    arguments) as [hub] proxy_user."""
    user = settings["hub"]["proxy_user"]
    port = int(settings["hub"]["bind_url"].rsplit(":", 1)[-1].split("/")[0] or 443)
    # a port under 1024 (443, with no web server in front): that one capability
    caps = "CAP_NET_BIND_SERVICE" if port < 1024 else ""
    users = "" if caps else "PrivateUsers=yes\n"
    return f"""\
# Written by `portal setup` (the Data Scientist Portal); edit the settings
# and run it again, or override with `systemctl edit {PROXY_UNIT}`.
[Unit]
Description=Data Scientist Portal: configurable-http-proxy
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User={user}
Group={user}
EnvironmentFile={proxy_env_file}
ExecStart={systemd_quote(argv)}
Restart=on-failure
RestartSec=2
{COMMON}{FILTERED}ProtectHome=yes
NoNewPrivileges=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
{users}CapabilityBoundingSet={caps}
AmbientCapabilities={caps}
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX

[Install]
WantedBy=multi-user.target
"""


def hub_unit(settings, portal_bin, state_dir, writable, config_file=""):
    """``portal-hub.service``: ``portal hub`` as [hub] user in ``state_dir``;
    ``writable`` the folders it writes besides its state (ProtectSystem=strict:
    every other is read-only)."""
    user = settings["hub"]["user"]
    paths = " ".join(str(p) for p in writable)
    return f"""\
# Written by `portal setup` (the Data Scientist Portal); edit the settings
# and run it again, or override with `systemctl edit {HUB_UNIT}`.
[Unit]
Description=Data Scientist Portal: JupyterHub and its services
After=network-online.target {PROXY_UNIT}
Wants=network-online.target {PROXY_UNIT}

[Service]
Type=simple
User={user}
Group={user}
{_environment(config_file)}WorkingDirectory={state_dir}
Environment=HOME={state_dir}
ExecStart={portal_bin} hub
Restart=on-failure
RestartSec=2
# The hub's services stop with it; its sessions (Slurm jobs) never do.
KillMode=mixed
TimeoutStopSec=20
{COMMON}ProtectHome=read-only
ReadWritePaths={paths}
# sudo's own, and no other: to change to the user, and its audit record
CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_AUDIT_WRITE

[Install]
WantedBy=multi-user.target
"""
