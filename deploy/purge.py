"""``make purge``: back to a machine where ``make up`` never ran, so that the
next ``make up`` or ``make test`` is a first start (.ci/run starts with it: a
warm machine has hidden first-start bugs before). deploy/purge.sh stops
every job and the portal's processes (the hubs, their services and proxies
as the service accounts, ``make down``); this module then removes what
``make up`` and the tests made: the hubs' state (the portal's own folder,
and [hub] state_dir itself, never its parent), what ``portal setup`` made
(its units, the service accounts portal and portal-proxy, the sudoers
rules, the extension helper and the hubs' registrations with it, the image
check helper), the certificates and the local CA, the container images that deploy/images.py built
([containers] images), and, for the embedded cluster ([cluster] embedded),
the LDAP directory with the demo and test accounts and their homes,
Slurm's state and configuration, the accounting database (MariaDB's data),
the munge key, the nodes (network namespaces, /etc/hosts lines, GPU device
files, Slurm's cgroups) and the demo data sets' copies in the shared data
folder; and the mail server's configuration (/etc/exim4/exim4.conf, when
deploy/mail_setup.py wrote it), queue and logs, and the mailboxes of the
people and service accounts it removes. It keeps the installed
Debian packages and the Python environments under [envs] prefix (rebuilt
only when their lists change). A site's own files (a slurm.conf, a
certificate or data that the portal did not make) are never removed.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from deploy import data_setup, mail_setup, nsswitch, prometheus_setup, slurm_conf
from deploy.base import logger, main_of
from portal import settings as site_settings
from portal.core import usernames
from portal.helper import extend as extendhelper
from portal.helper import imagecheck, notebook
from portal.setup import install, units

log = logger("purge")

CLUSTER_STATE = (
    "/etc/slurm/slurmdbd.password",
    "/var/lib/slurm/slurmctld",
    "/var/spool/slurmd",
    "/var/log/slurm",
    "/run/slurm",
    "/var/lib/mysql",
    "/run/mysqld",
    "/etc/munge/munge.key",
    "/run/portal/netns",
    "/dev/portal-gpu",
)
SYSTEM_CA = Path("/usr/local/share/ca-certificates/data-scientist-portal.crt")


# ---------------------------------------------------------------- pure


def people(slapcat):
    """(name, uid, home) of each posixAccount in slapcat's LDIF that is a
    name the portal takes (``usernames.is_safe``) with a uid of 1000 or more."""
    out = []
    for block in slapcat.split("\n\n"):
        entry = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        name, uid, home = (
            entry.get("uid", ""),
            entry.get("uidNumber", ""),
            entry.get("homeDirectory"),
        )
        if usernames.is_safe(name) and re.fullmatch(r"[0-9]+", uid) and int(uid) >= 1000:
            out.append((name, int(uid), home or ""))
    return out


def under(home, home_root):
    return home.startswith(f"{home_root}/")


def state_removed(state_roots, images):
    """What goes of the hubs' state folders ``state_roots``: each whole, but
    the way to the images folder when that is in one and still there (a
    site's own images, which purge_images kept). Never a parent of one."""
    removed = []
    for root in state_roots:
        if not images.is_dir() or not images.is_relative_to(root) or images == root:
            removed.append(root)
            continue
        kept = root / images.relative_to(root).parts[0]
        removed += [path for path in root.iterdir() if path != kept]
    return removed


def state_roots(settings):
    """The hubs' state folders: the portal's own folder (``PORTAL_ROOT``:
    the demo's hub by default, the tests' and the benchmarks' hubs, the
    demo's directory and accounts) and [hub] state_dir when it is
    elsewhere (a site's ``/var/lib/jupyterhub``), itself, not its parent."""
    own = Path(site_settings.PORTAL_ROOT)
    state = Path(site_settings.state_dir(settings))
    return [own] if state.is_relative_to(own) else [own, state]


# ---------------------------------------------------------------- removals


def remove(*paths):
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)


def rmdir(*paths):
    for path in paths:
        try:
            os.rmdir(path)
        except OSError:
            pass


def remove_mailbox(name, uid):
    """/var/mail/NAME, when it is the user's (a file owned by their uid)."""
    box = mail_setup.MAILBOXES / name
    try:
        st = box.lstat()
    except OSError:
        return
    if box.is_file() and not box.is_symlink() and st.st_uid == uid:
        box.unlink()
        log(f"removed {box}")


def remove_people(settings):
    """The LDAP people's homes under [cluster] home_root that are theirs
    (owned by their uid), with their files in /tmp: read from the directory
    itself (slapcat, whether slapd runs or not) before it goes."""
    conf = Path(settings["cluster"]["ldap_dir"]) / "slapd.conf"
    if not conf.is_file():
        return
    search = ["-b", settings["ldap"]["base_dn"], "-a", "(objectClass=posixAccount)"]
    out = subprocess.run(
        ["slapcat", "-f", str(conf), *search], capture_output=True, text=True
    ).stdout
    for name, uid, home in people(out):
        tmp = ["find", "/tmp", "/var/tmp", "/dev/shm", "-xdev", "-uid", str(uid), "-delete"]
        subprocess.run(tmp, stderr=subprocess.DEVNULL)
        remove_mailbox(name, uid)
        if not under(home, settings["cluster"]["home_root"]):
            continue
        path = Path(home)
        if path.is_dir() and not path.is_symlink() and path.stat().st_uid == uid:
            shutil.rmtree(path, ignore_errors=True)
            log(f"removed {home}")


def purge_cluster(settings):
    remove_people(settings)
    remove(settings["cluster"]["ldap_dir"], settings["cluster"]["accounts_file"])
    # nslcd resolves no one without slapd: NSS goes back to files alone; and
    # *.localhost back to what the resolver makes of it (hub_setup local_names)
    nsswitch.update(lambda text: nsswitch.without(text, ("passwd", "group", "shadow"), "ldap"))
    nsswitch.update(lambda text: nsswitch.without(text, ("hosts",), "myhostname"))
    for file in slurm_conf.FILES:  # each that deploy/slurm.sh wrote: it holds the marker
        path = Path(file)
        if path.is_file() and slurm_conf.ours(path.read_text(errors="replace")):
            path.unlink()
            log(f"removed {file}")
    remove(*CLUSTER_STATE)
    for cg in glob.glob("/sys/fs/cgroup/*/slurm_*"):  # left by the nodes' slurmd
        if os.path.isdir(cg):
            rm = subprocess.run(
                ["find", cg, "-depth", "-type", "d", "-exec", "rmdir", "{}", "+"],
                stderr=subprocess.DEVNULL,
            )
            if rm.returncode:
                log(f"warning: {cg} is still in use")
    # the shared data folder, where it holds only what data.sh made: the
    # demo data sets' copies (or an earlier version's links to them)
    data = settings["data"]["shared_data"]
    if data and os.path.isdir(data):
        for name, source in data_setup.DEMO_DATA.items():
            path = os.path.join(data, name)
            if data_setup.action(path, source) == "replace":
                os.unlink(path)
            elif data_setup.is_copy_of(path, source):
                shutil.rmtree(path)
            remove(os.path.join(data, f".{name}.new"))  # an unfinished copy
        try:
            os.rmdir(data)
            log(f"removed {data}")
        except OSError:
            pass


def purge_tls(settings):
    """The certificates, where the portal made them (its CA's key beside the CA)."""
    tls = settings["tls"]
    ca_dir = Path(tls["ca_cert"]).parent
    if not (ca_dir / "ca.key").is_file():
        log("[tls] files are a site's own: kept")
        return
    key_dir = Path(tls["key"]).parent
    remove(tls["ca_cert"], ca_dir / "ca.key", ca_dir / "ca.srl", tls["cert"], tls["key"])
    remove(key_dir / "proxy.key")
    rmdir(ca_dir, ca_dir.parent)
    if SYSTEM_CA.is_file():
        SYSTEM_CA.unlink()
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        if subprocess.run(["update-ca-certificates", "--fresh"], **quiet).returncode:
            log("warning: update-ca-certificates failed")
    log("removed the local CA and the portal's certificate")


def purge_images(settings):
    """The container images deploy/images.py built (those with an
    /etc/portal-image), its unfinished ones and its Debian base (``.NAME``);
    the folder itself when a site's images are not in it."""
    dest = Path(settings["containers"]["images"])
    if not dest.is_dir() or dest.is_symlink():
        return

    def built_here(entry):
        if entry.name.startswith("."):  # unfinished, or the Debian base
            return True
        info = Path(entry.path, imagecheck.INFO_FILE)
        return entry.is_dir(follow_symlinks=False) and info.is_file()

    ours = [Path(e.path) for e in os.scandir(dest) if built_here(e)]
    remove(*ours)
    rmdir(dest)
    built = sorted(p.name for p in ours if not p.name.startswith("."))
    if built:
        log(f"removed the images {', '.join(built)} from {dest}")
    if dest.is_dir():
        log(f"kept {dest}: a site's own images are in it")


def purge_mail_conf():
    """exim4's configuration, when deploy/mail_setup.py wrote it: exim4 then
    reads Debian's own (/var/lib/exim4/config.autogenerated)."""
    conf = mail_setup.EXIM_CONF
    if conf.is_file() and mail_setup.ours(conf.read_text(errors="replace")):
        conf.unlink()
        log(f"removed {conf}")
        return True
    return False


def purge_mail(settings):
    """The mail server's configuration, its queue (messages, their logs,
    retry hints) and its logs; its folders are Debian's and stay. Beside a
    cluster that is not the embedded one, the queue and the logs only of
    an exim4 that deploy/mail_setup.py configured: a site's own are kept."""
    if not purge_mail_conf() and not settings["cluster"]["embedded"]:
        return
    for folder in (*mail_setup.SPOOL, mail_setup.LOG_DIR):
        if os.path.isdir(folder) and not os.path.islink(folder):
            remove(*(os.path.join(folder, name) for name in os.listdir(folder)))


def purge_units():
    """The units ``portal setup`` wrote (stopped first where systemd runs)."""
    paths = [Path(units.UNIT_DIR) / name for name in (units.HUB_UNIT, units.PROXY_UNIT)]
    if install.systemd_runs() and any(p.exists() for p in paths):
        subprocess.run(["systemctl", "disable", "--now", units.HUB_UNIT, units.PROXY_UNIT],
                       capture_output=True)  # fmt: skip
    remove(*paths)


def purge_portal(settings):
    # the folders setup made above its own (install.note_new_folders)
    made = sorted(install.read_manifest().get("folders", []), key=len, reverse=True)
    purge_units()
    remove(*state_removed(state_roots(settings), Path(settings["containers"]["images"])))
    remove("/run/portal", "/var/log/portal", "/etc/sudoers.d/portal")
    remove(install.MANIFEST, install.PROXY_TOKEN_ENV)
    remove(prometheus_setup.CONF_DIR, prometheus_setup.DATA)  # its series too
    helper = extendhelper
    remove(helper.REGISTRY, helper.INSTALLED_AT, imagecheck.INSTALLED_AT, notebook.INSTALLED_AT)
    rmdir(Path(helper.INSTALLED_AT).parent, Path(helper.REGISTRY).parent)
    rmdir(*made)  # deepest first, each when empty
    for user in (settings["hub"]["user"], settings["hub"]["proxy_user"]):
        uid = subprocess.run(["id", "-u", user], capture_output=True, text=True)
        if uid.returncode:
            continue
        remove_mailbox(user, int(uid.stdout))  # the returned mail the hub sent
        if subprocess.run(["userdel", user], stderr=subprocess.DEVNULL).returncode:
            log(f"warning: userdel {user} failed")
        if subprocess.run(["getent", "group", user], capture_output=True).returncode == 0:
            subprocess.run(["groupdel", user], stderr=subprocess.DEVNULL)
        log(f"removed the system account {user}")


def cmd_files(settings):
    site_settings.state_dir(settings)  # refused before anything is removed
    if settings["cluster"]["embedded"]:
        purge_cluster(settings)
    purge_mail(settings)
    purge_tls(settings)
    purge_images(settings)
    purge_portal(settings)


main = main_of({"files": cmd_files}, log)

if __name__ == "__main__":
    sys.exit(main())
