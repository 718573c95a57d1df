"""What a site owns on its login node, recorded so that installing the portal
can be shown to leave it as it was (issue 35: "before and after `portal
setup`: dpkg -l is identical; the Slurm, sssd, nsswitch and CA files are
identical; its other services are still running")::

    before = snapshot(node)
    node.run(["portal", "setup"])
    assert differences(before, snapshot(node)) == []

A snapshot holds:
- ``packages``: what ``dpkg -l`` lists, one ``{package: "STATUS VERSION ARCH"}``
  per package (``dpkg-query`` with dpkg -l's columns, whole: dpkg -l cuts
  long names and versions to the terminal's width);
- ``files``: each file, link and folder under SITE_FILES, with its type,
  mode, owner, and its content's sha256 or the link's target;
- ``running``: the running services (``systemctl list-units --type=service
  --state=running``).

It is taken inside the machine by the machine's own python3 (SCRIPT), so
owners are the machine's users.
"""

import json

# The files a site made or its packages own, which installing the portal
# must not change: Slurm, munge, sssd and its PAM and NSS wiring, the host
# names, and the system's CA store.
SITE_FILES = (
    "/etc/slurm",
    "/etc/munge",
    "/etc/sssd",
    "/etc/nsswitch.conf",
    "/etc/pam.d",
    "/etc/hosts",
    "/etc/ssl/certs",
    "/usr/local/share/ca-certificates",
)

SCRIPT = r"""
import hashlib, json, os, stat, subprocess, sys

def entry(path):
    st = os.lstat(path)
    kind = ("link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode)
            else "file" if stat.S_ISREG(st.st_mode) else "other")
    what = f"{kind} {stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}"
    if kind == "link":
        what += " -> " + os.readlink(path)
    elif kind == "file":
        with open(path, "rb") as f:
            what += " sha256:" + hashlib.sha256(f.read()).hexdigest()
    return what

files = {}
for top in json.loads(sys.argv[1]):
    if not os.path.lexists(top):
        files[top] = "missing"
        continue
    files[top] = entry(top)
    if os.path.isdir(top) and not os.path.islink(top):
        for folder, dirs, names in os.walk(top):
            for name in dirs + names:
                path = os.path.join(folder, name)
                files[path] = entry(path)

query = subprocess.run(
    ["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version} ${Architecture}\n"],
    capture_output=True, text=True, check=True).stdout
packages = {}
for line in query.splitlines():
    status, package, version, arch = line.split()
    packages[package] = f"{status} {version} {arch}"

units = subprocess.run(
    ["systemctl", "list-units", "--type=service", "--state=running", "--plain", "--no-legend"],
    capture_output=True, text=True, check=True).stdout
running = sorted(line.split()[0] for line in units.splitlines() if line.strip())
print(json.dumps({"packages": packages, "files": files, "running": running}))
"""


def snapshot(machine, paths=SITE_FILES):
    """The snapshot of ``machine`` (tests/site/machine.py's Machine)."""
    result = machine.run(["python3", "-c", SCRIPT, json.dumps(list(paths))], timeout=120)
    return json.loads(result.stdout)


def differences(before, after):
    """What changed from snapshot ``before`` to ``after``, one line each; []
    when nothing did. New running services are no difference (the portal's
    own); one that stopped is.

    >>> a = {"packages": {"sudo": "ii 1.9.13 amd64"},
    ...      "files": {"/etc/hosts": "file 0644 0:0 sha256:1"},
    ...      "running": ["cron.service", "sssd.service"]}
    >>> differences(a, a)
    []
    >>> b = {"packages": {"sudo": "ii 1.9.14 amd64", "nodejs": "ii 18 amd64"},
    ...      "files": {"/etc/hosts": "file 0600 0:0 sha256:1",
    ...                "/etc/sssd/x": "file 0600 0:0 sha256:2"},
    ...      "running": ["portal-hub.service", "sssd.service"]}
    >>> for line in differences(a, b): print(line)
    package installed: nodejs (ii 18 amd64)
    package changed: sudo (ii 1.9.13 amd64 -> ii 1.9.14 amd64)
    file added: /etc/sssd/x (file 0600 0:0 sha256:2)
    file changed: /etc/hosts (file 0644 0:0 sha256:1 -> file 0600 0:0 sha256:1)
    service no longer running: cron.service
    """
    lines = []
    for kind, label, added in (("packages", "package", "installed"), ("files", "file", "added")):
        old, new = before[kind], after[kind]
        lines += [f"{label} {added}: {k} ({new[k]})" for k in sorted(new.keys() - old.keys())]
        lines += [f"{label} removed: {k} ({old[k]})" for k in sorted(old.keys() - new.keys())]
        lines += [f"{label} changed: {k} ({old[k]} -> {new[k]})"
                  for k in sorted(old.keys() & new.keys()) if old[k] != new[k]]  # fmt: skip
    stopped = sorted(set(before["running"]) - set(after["running"]))
    lines += [f"service no longer running: {unit}" for unit in stopped]
    return lines
