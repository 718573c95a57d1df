"""What ``portal setup`` installs (portal/setup/: the sudoers rules, the
helpers, the units), the proxy's command line, the facts deploy/hub.sh
takes, and what the wheel holds, without starting anything."""

import json
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from deploy.hub_setup import shell_lines
from portal.helper import imagecheck
from portal.helper.imagecheck import INSTALLED_AT as IMAGE_CHECK_INSTALLED_AT
from portal.settings import defaults, merge
from portal.setup import install, units
from portal.setup.files import SetupError
from portal.setup.install import (
    Layout,
    install_helper,
    proxy_args,
    registration,
    sudoers,
)

SETTINGS = defaults()
IMAGE_CHECK_SOURCE = Path(imagecheck.__file__)


def test_sudoers_lets_the_hub_run_slurm_as_portal_users_and_the_helper_as_root():
    text = sudoers(SETTINGS)
    lines = text.splitlines()
    assert "Runas_Alias PORTAL_USERS = %portal-admins, %portal-users, !root" in lines
    # scancel of one job, named as this hub's sessions or notebook jobs
    assert (
        "Cmnd_Alias PORTAL_SLURM = /usr/bin/sbatch, /usr/bin/scancel "
        "^--name\\=(portal-jupyter|portal-jupyter-notebook) [0-9]{1,10}$" in lines
    )
    assert (
        "Cmnd_Alias PORTAL_EXTEND = /usr/local/libexec/portal/portal-extend "
        "^[0-9]{1,10} [0-9]{1,6} [0-9]{1,6}$" in lines
    )
    assert (
        "Cmnd_Alias PORTAL_SLURM_READ = /usr/local/libexec/portal/portal-slurm-read "
        "^(squeue|scontrol|sacct|sshare) .+$" in lines
    )
    assert "Cmnd_Alias PORTAL_IMAGE_CHECK = /usr/local/libexec/portal/portal-image-check" in lines
    assert "Cmnd_Alias PORTAL_NOTEBOOK = /usr/local/libexec/portal/portal-notebook" in lines
    assert lines[-4:] == [
        "Defaults:portal env_reset, !setenv, !lecture",
        "portal ALL = (PORTAL_USERS) NOPASSWD: PORTAL_SLURM, PORTAL_IMAGE_CHECK, PORTAL_NOTEBOOK",
        "portal ALL = (nobody) NOPASSWD: PORTAL_IMAGE_CHECK",
        "portal ALL = (root) NOPASSWD: PORTAL_EXTEND, PORTAL_SLURM_READ",
    ]
    assert text.endswith("\n")


def test_the_image_check_runs_as_the_portals_users_and_nobody_never_as_root():
    lines = sudoers(SETTINGS).splitlines()
    rules = [line for line in lines if not line.startswith(("#", "Defaults", "Runas_Alias"))]
    naming = [line for line in rules if "PORTAL_IMAGE_CHECK" in line or "image-check" in line]
    assert naming == [
        "Cmnd_Alias PORTAL_IMAGE_CHECK = /usr/local/libexec/portal/portal-image-check",
        "portal ALL = (PORTAL_USERS) NOPASSWD: PORTAL_SLURM, PORTAL_IMAGE_CHECK, PORTAL_NOTEBOOK",
        "portal ALL = (nobody) NOPASSWD: PORTAL_IMAGE_CHECK",
    ]
    assert "!root" in lines[[line.startswith("Runas_Alias") for line in lines].index(True)]
    assert IMAGE_CHECK_INSTALLED_AT == "/usr/local/libexec/portal/portal-image-check"


@pytest.mark.skipif(not shutil.which("visudo"), reason="no visudo here")
def test_visudo_accepts_the_rules(tmp_path):
    site = merge(SETTINGS, {"ldap": {"allowed_groups": ["cn=ml,ou=groups,dc=x", "data-team"]}})
    rules = tmp_path / "portal"
    rules.write_text(sudoers(site))
    rules.chmod(0o440)
    check = subprocess.run(["visudo", "-c", "-q", "-f", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="installs a root-owned file")
def test_a_helper_is_installed_as_roots_0755_copy_replacing_anything_else(tmp_path):
    path = tmp_path / "libexec" / "portal-image-check"
    path.parent.mkdir()
    path.symlink_to(tmp_path / "elsewhere")
    install_helper(IMAGE_CHECK_SOURCE, path)
    assert not path.is_symlink() and not (tmp_path / "elsewhere").exists()
    assert path.read_bytes() == IMAGE_CHECK_SOURCE.read_bytes()
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o755)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    path.chmod(0o777)
    install_helper(IMAGE_CHECK_SOURCE, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


def test_sudoers_follows_the_hub_account_and_groups():
    site = merge(
        SETTINGS,
        {"hub": {"user": "jhub"}, "ldap": {"allowed_groups": ["cn=ml,ou=groups,dc=x"]}},
    )
    text = sudoers(site)
    assert "Runas_Alias PORTAL_USERS = %ml, !root\n" in text
    assert "jhub ALL = (root) NOPASSWD: PORTAL_EXTEND, PORTAL_SLURM_READ\n" in text


def test_scancel_s_rule_names_every_registered_hub_s_jobs(tmp_path, monkeypatch):
    """Hubs on one host (the demo's, the tests') share the sudoers file: its
    scancel names each registered hub's sessions and notebook jobs, and a
    name's dot is no wildcard."""
    registry = tmp_path / "extend.d"
    registry.mkdir()
    for name in ("portal-jupyter", "lab.x"):
        site = merge(SETTINGS, {"slurm": {"job_name": name}})
        (registry / f"{name}.json").write_text(registration(site))
    # the registrations' folder is root's alone on a host (here in /tmp)
    monkeypatch.setattr(install.extendhelper, "check_root_folder", lambda folder, what: None)
    if os.geteuid() != 0:
        pytest.skip("registrations are read when root's alone")
    names = install.registered_job_names(registry)
    assert names == ["lab.x", "lab.x-notebook", "portal-jupyter", "portal-jupyter-notebook"]
    line = [line for line in sudoers(SETTINGS, names).splitlines() if "scancel" in line][0]
    assert line.endswith(
        "/usr/bin/scancel ^--name\\=(lab[.]x|lab[.]x-notebook|portal-jupyter|"
        "portal-jupyter-notebook) [0-9]{1,10}$"
    )
    with pytest.raises(SetupError, match=r"\[slurm\] job_name"):
        install.cancel_args(["-x"])


def test_the_registration_names_the_sessions_groups_and_uids():
    assert json.loads(registration(SETTINGS)) == {
        "job_name": "portal-jupyter",
        "groups": ["portal-admins", "portal-users"],
        "uid_min": 10000,
        "uid_max": 60000,
        "bin_dir": "/usr/bin",
    }
    site = merge(SETTINGS, {"slurm": {"bin_dir": "/opt/slurm/bin"}})
    assert json.loads(registration(site))["bin_dir"] == "/opt/slurm/bin"


def test_sudoers_names_slurm_s_commands_in_the_configured_folder():
    lines = sudoers(merge(SETTINGS, {"slurm": {"bin_dir": "/opt/slurm/bin"}})).splitlines()
    assert "Cmnd_Alias PORTAL_SLURM = /opt/slurm/bin/sbatch, /opt/slurm/bin/scancel ^" in "\n".join(
        lines
    )
    assert not [line for line in lines if "/usr/bin/" in line]


def test_a_job_name_that_is_no_file_name_is_refused_naming_the_setting():
    site = merge(SETTINGS, {"slurm": {"job_name": "../etc"}})
    with pytest.raises(SetupError, match=r"\[slurm\] job_name"):
        registration(site)


def test_the_proxy_serves_https_routes_by_host_and_speaks_mutual_tls_inside():
    args = proxy_args(SETTINGS, Layout.of(SETTINGS))
    assert args[:4] == ["--ip", "0.0.0.0", "--port", "8000"]
    assert args[args.index("--ssl-key") + 1] == "/etc/portal/tls/proxy.key"
    assert "--host-routing" in args
    assert args[args.index("--api-ssl-ca") + 1] == "/run/portal/hub/proxy-tls/hub-ca.crt"
    assert "--client-ssl-reject-unauthorized" in args
    assert args[-4:] == [
        "--default-target",
        "https://10.200.0.1:8081",  # where the embedded cluster's hub listens
        "--error-target",
        "https://10.200.0.1:8081/hub/error",
    ]


def test_a_plain_proxy_has_no_tls_and_no_host_routing():
    site = merge(
        SETTINGS,
        {"hub": {"bind_url": "http://127.0.0.1:9000/", "domain": ""}, "tls": {"internal": False}},
    )
    args = proxy_args(site, Layout.of(site))
    assert args[:4] == ["--ip", "127.0.0.1", "--port", "9000"]
    assert not [a for a in args if "ssl" in a or a == "--host-routing"]
    assert "http://10.200.0.1:8081" in args


def test_the_scripts_facts_survive_the_shell():
    site = merge(SETTINGS, {"hub": {"state_dir": "/var/lib/portal/test hub"}})
    out = subprocess.run(
        ["bash", "-c", 'eval "$1"; printf "%s|" "$RUN_DIR" "$URL" "$PROXY_NOTE"', "sh",
         "\n".join(shell_lines(site, Layout.of(site)))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout == (
        "/run/portal/test hub|https://portal.localhost:8000/| (HTTPS) (internal TLS)|"
    )


def test_the_units_run_portal_as_its_accounts_and_restart_on_failure():
    layout = Layout.of(SETTINGS, "/opt/portal/venv")
    argv = ["/usr/local/bin/configurable-http-proxy", *proxy_args(SETTINGS, layout)]
    proxy = units.proxy_unit(SETTINGS, argv, install.PROXY_TOKEN_ENV)
    hub = units.hub_unit(SETTINGS, layout.portal_bin, layout.state, [layout.state, "/run/x"])
    for text, user, command in ((proxy, "portal-proxy", " ".join(argv)),
                                (hub, "portal", "/opt/portal/venv/bin/portal hub")):  # fmt: skip
        lines = text.splitlines()
        assert f"User={user}" in lines and f"Group={user}" in lines
        assert f"ExecStart={command}" in lines
        assert "Restart=on-failure" in lines and "PrivateTmp=yes" in lines
        assert "PORTAL_CONFIG" not in text  # the site's file is the default one
    # the proxy reads no settings (they may hold a database password)
    assert "--ssl-key /etc/portal/tls/proxy.key" in proxy
    # the token reaches the proxy through a file of root's, never an argv
    assert "EnvironmentFile=/etc/portal/proxy-token.env" in proxy.splitlines()
    assert "NoNewPrivileges=yes" in proxy.splitlines()
    # the hub's sudo needs new privileges, and its image check user namespaces
    assert "NoNewPrivileges" not in hub and "RestrictNamespaces" not in hub
    assert "ReadWritePaths=/var/lib/portal/hub /run/x" in hub.splitlines()
    assert "WorkingDirectory=/var/lib/portal/hub" in hub.splitlines()
    site = units.hub_unit(SETTINGS, layout.portal_bin, layout.state, [], "/etc/site.toml")
    assert "Environment=PORTAL_CONFIG=/etc/site.toml" in site.splitlines()
    assert "CapabilityBoundingSet=" in proxy.splitlines()  # none at all on :8000
    on_443 = merge(SETTINGS, {"hub": {"bind_url": "https://0.0.0.0:443"}})
    lines = units.proxy_unit(on_443, ["/x/chp"], install.PROXY_TOKEN_ENV).splitlines()
    assert "CapabilityBoundingSet=CAP_NET_BIND_SERVICE" in lines
    assert "AmbientCapabilities=CAP_NET_BIND_SERVICE" in lines and "PrivateUsers=yes" not in lines


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
def test_systemd_analyze_verify_accepts_the_units(tmp_path):
    layout = Layout.of(SETTINGS, "/usr")  # /usr/bin/portal: a path that verify can resolve
    texts = {
        units.PROXY_UNIT: units.proxy_unit(SETTINGS, ["/bin/true"], install.PROXY_TOKEN_ENV),
        units.HUB_UNIT: units.hub_unit(SETTINGS, "/bin/true", layout.state, [layout.state]),
    }
    for name, text in texts.items():
        (tmp_path / name).write_text(text.replace(" proxy\n", "\n").replace(" hub\n", "\n"))
    done = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / n) for n in texts)],
        capture_output=True, text=True,
    )  # fmt: skip
    problems = [line for line in done.stderr.splitlines() if "portal-" in line]
    assert not problems, done.stderr
    # systemd's own exposure score (0 safest, 10 most exposed): the proxy
    # well sandboxed; the hub less, for its sudo (docs/admins/site.md: "Service units")
    for name, most in ((units.PROXY_UNIT, 3.5), (units.HUB_UNIT, 6.5)):
        score = subprocess.run(
            ["systemd-analyze", "security", "--offline=yes", f"--threshold={most * 10:.0f}",
             str(tmp_path / name)], capture_output=True, text=True,
        )  # fmt: skip
        assert score.returncode == 0, score.stdout[-300:]


def test_the_prerequisites_name_the_slurm_folder_and_the_fix(tmp_path):
    site = {**SETTINGS, "slurm": {**SETTINGS["slurm"], "bin_dir": str(tmp_path)}}
    with pytest.raises(SetupError) as e:
        install.check_prerequisites(site)
    assert (
        "sbatch, scancel, squeue, sinfo, scontrol, sacct, sacctmgr, sshare "
        f"not found in {tmp_path}: "
        "set [slurm] bin_dir to the folder of Slurm's commands"
    ) in str(e.value)


def test_setup_writes_only_the_portals_own_paths():
    layout = Layout.of(SETTINGS)
    paths = [str(p) for p in install.own_paths(SETTINGS, layout)]
    system = {"/", "/etc", "/etc/portal", "/var/lib", "/usr/local/libexec", "/etc/systemd/system",
              "/etc/sudoers.d", "/run", "/var/log", "/opt/portal"}  # fmt: skip
    assert not system & set(paths), paths
    assert all("portal" in p for p in paths), paths


def test_the_portal_command_parses_its_verbs():
    from portal import cli

    for argv in (["setup"], ["setup", "--no-units"], ["setup", "--no-check"], ["check"],
                 ["uninstall", "--purge"], ["health"], ["units"], ["proxy-args"], ["migrate"],
                 ["hub", "--debug"]):  # fmt: skip
        args = cli.parse(argv)
        assert args.command == argv[0]
    assert cli.parse(["setup"]).no_check is False
    assert cli.parse(["setup", "--no-check"]).no_check is True
    assert cli.parse(["hub", "--debug", "--port=1"]).jupyterhub_args == ["--debug", "--port=1"]
    for wrong in (["setup", "--units", "--no-units"], ["health", "--debug"], ["nothing"],
                  ["check", "--no-check"]):  # fmt: skip
        with pytest.raises(SystemExit):
            cli.parse(wrong)


@pytest.mark.skipif(os.geteuid() != 0, reason="asks for root's commands as another user")
def test_setup_and_uninstall_refuse_a_user_who_is_not_root():
    done = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
         str(Path(os.sys.prefix) / "bin" / "portal"), "setup"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 2 and "run as root" in done.stderr, done.stderr


@pytest.mark.slow
def test_the_wheel_holds_what_the_hub_service_sessions_and_setup_read(tmp_path):
    """``pip wheel`` of the checkout: templates, migrations, the hub's
    configuration, the sudoers template, the notebook templates, the
    settings' defaults and the JupyterLab extension, and the ``portal`` command."""
    root = Path(__file__).resolve().parents[2]
    build = subprocess.run(
        [os.sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(root)],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-2000:]
    [wheel] = tmp_path.glob("dsportal-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = "dsportal-0.1.0.data/data/"
    for name in ("spawners/jupyterhub_config.py", "spawners/templates/form.html.j2",
                 "portal/core/templates/batch.sh.j2", "portal/service/templates/health.html",
                 "portal/migrations/env.py", "portal/migrations/versions/0001_profiles.py",
                 "portal/setup/templates/sudoers", "portal/helper/extend.py",
                 f"{data}share/portal/portal.toml",
                 f"{data}share/portal/notebook_templates/pytorch/mnist-pytorch.ipynb",
                 f"{data}share/portal/notebook_templates/distributed/train_ddp.py",
                 f"{data}share/jupyter/labextensions/@dsportal/tensorboard/package.json",
                 ):  # fmt: skip
        assert name in names, name
    entry = zipfile.ZipFile(wheel).read("dsportal-0.1.0.dist-info/entry_points.txt").decode()
    assert "portal = portal.cli:main" in entry
    assert not [n for n in names if n.startswith(("deploy/", "tests/", "bench/"))]


def test_setup_notes_the_folders_it_makes_above_its_own_and_no_other(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "MANIFEST", tmp_path / "etc" / "setup.json")
    (tmp_path / "var").mkdir()
    install.note_new_folders(tmp_path / "var" / "lib" / "portal" / "hub")
    install.note_new_folders(tmp_path / "var" / "hub")  # its parent is there already
    folders = install.read_manifest()["folders"]
    assert folders == [str(tmp_path / "var" / "lib"), str(tmp_path / "var" / "lib" / "portal")]


def test_root_commands_are_found_without_sbin_on_path(monkeypatch):
    # deploy/hub.sh runs portal setup with PATH=/usr/local/bin:/usr/bin:/bin
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    visudo = install.root_command("visudo")
    assert os.path.isabs(visudo) and os.access(visudo, os.X_OK)
    assert install.root_command("no-such-command-here") == "no-such-command-here"
