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

Hardening, in both (``systemd-analyze security`` reads them):
``PrivateTmp``, ``PrivateDevices``, ``ProtectSystem=full`` (/usr, /boot,
/etc read-only), ``ProtectKernelTunables``, ``ProtectKernelModules``,
``ProtectKernelLogs``, ``ProtectControlGroups``, ``ProtectClock``,
``ProtectHostname``, ``RestrictRealtime``, ``LockPersonality``,
``SystemCallArchitectures=native``, ``ProtectProc=invisible`` (other
users' processes unseen), ``RemoveIPC``, ``RestrictAddressFamilies`` (IP and
Unix sockets; the hub also netlink, for its addresses), ``UMask=0077``,
and for the proxy ``NoNewPrivileges``, ``RestrictSUIDSGID``,
``RestrictNamespaces``, ``ProcSubset=pid``, ``PrivateUsers`` and an empty
capability set (``CAP_NET_BIND_SERVICE`` alone, without ``PrivateUsers``,
when it listens on a port under 1024 itself).

The hub goes without ``NoNewPrivileges``, ``RestrictSUIDSGID`` and an empty
``CapabilityBoundingSet``: its Slurm commands as the user, its image check
and the extension helper run through sudo (setuid root), which those would
stop; and without ``RestrictNamespaces``: the image check runs a user's
image with Charliecloud, in user namespaces. ``ProtectHome`` is
``read-only`` in the hub, not ``yes``: a notebook job's notebook is read
from its user's home by the notebook reader, as that user.
``MemoryDenyWriteExecute`` is left out of both: node's V8 (the proxy) and
Python's ctypes callbacks need writable executable memory.
"""

UNIT_DIR = "/etc/systemd/system"
HUB_UNIT = "portal-hub.service"
PROXY_UNIT = "portal-proxy.service"

COMMON = """\
PrivateTmp=yes
PrivateDevices=yes
ProtectSystem=full
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native
ProtectProc=invisible
RemoveIPC=yes
UMask=0077
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
{COMMON}ProtectHome=yes
NoNewPrivileges=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
ProcSubset=pid
{users}CapabilityBoundingSet={caps}
AmbientCapabilities={caps}
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX

[Install]
WantedBy=multi-user.target
"""


def hub_unit(settings, portal_bin, state_dir, writable, config_file=""):
    """``portal-hub.service``: ``portal hub`` as [hub] user in ``state_dir``;
    ``writable`` the folders it writes besides its state (ProtectSystem
    leaves /var writable)."""
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
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK

[Install]
WantedBy=multi-user.target
"""
