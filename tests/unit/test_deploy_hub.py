"""What deploy/hub.sh installs before the hub starts (the sudoers rules, the
helpers), and the proxy's command line (deploy/hub_setup.py), without
starting anything."""

import json
import os
import shutil
import stat
import subprocess

import pytest

from deploy.base import DeployError
from deploy.hub_setup import (
    IMAGE_CHECK_SOURCE,
    Layout,
    extend_helper,
    install_helper,
    proxy_args,
    registration,
    shell_lines,
    sudoers,
)
from portal.helper.imagecheck import INSTALLED_AT as IMAGE_CHECK_INSTALLED_AT
from portal.settings import defaults, merge

SETTINGS = defaults()
HELPER = extend_helper()


def test_sudoers_lets_the_hub_run_slurm_as_portal_users_and_the_helper_as_root():
    text = sudoers(SETTINGS, "/usr/local/libexec/portal/portal-extend", "^[0-9]{1,10}$")
    lines = text.splitlines()
    assert "Runas_Alias PORTAL_USERS = %portal-admins, %portal-users, !root" in lines
    assert "Cmnd_Alias PORTAL_SLURM = /usr/bin/sbatch, /usr/bin/scancel" in lines
    assert (
        "Cmnd_Alias PORTAL_EXTEND = /usr/local/libexec/portal/portal-extend ^[0-9]{1,10}$" in lines
    )
    assert "Cmnd_Alias PORTAL_IMAGE_CHECK = /usr/local/libexec/portal/portal-image-check" in lines
    assert "Cmnd_Alias PORTAL_NOTEBOOK = /usr/local/libexec/portal/portal-notebook" in lines
    assert lines[-4:] == [
        "Defaults:portal env_reset, !setenv, !lecture",
        "portal ALL = (PORTAL_USERS) NOPASSWD: PORTAL_SLURM, PORTAL_IMAGE_CHECK, PORTAL_NOTEBOOK",
        "portal ALL = (nobody) NOPASSWD: PORTAL_IMAGE_CHECK",
        "portal ALL = (root) NOPASSWD: PORTAL_EXTEND",
    ]
    assert text.endswith("\n")


def test_the_image_check_runs_as_the_portals_users_and_nobody_never_as_root():
    lines = sudoers(SETTINGS, HELPER["INSTALLED_AT"], HELPER["SUDOERS_ARGS"]).splitlines()
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
    rules.write_text(sudoers(site, HELPER["INSTALLED_AT"], HELPER["SUDOERS_ARGS"]))
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
    text = sudoers(site, HELPER["INSTALLED_AT"], HELPER["SUDOERS_ARGS"])
    assert "Runas_Alias PORTAL_USERS = %ml, !root\n" in text
    assert "jhub ALL = (root) NOPASSWD: PORTAL_EXTEND\n" in text


def test_the_registration_names_the_sessions_groups_and_uids():
    assert json.loads(registration(SETTINGS, HELPER)) == {
        "job_name": "portal-jupyter",
        "groups": ["portal-admins", "portal-users"],
        "uid_min": 10000,
        "uid_max": 60000,
    }


def test_a_job_name_that_is_no_file_name_is_refused_naming_the_setting():
    site = merge(SETTINGS, {"slurm": {"job_name": "../etc"}})
    with pytest.raises(DeployError, match=r"\[slurm\] job_name"):
        registration(site, HELPER)


def test_the_proxy_serves_https_routes_by_host_and_speaks_mutual_tls_inside():
    args = proxy_args(SETTINGS, Layout.of(SETTINGS))
    assert args[:4] == ["--ip", "0.0.0.0", "--port", "8000"]
    assert args[args.index("--ssl-key") + 1] == "/etc/portal/tls/proxy.key"
    assert "--host-routing" in args
    assert args[args.index("--api-ssl-ca") + 1] == "/run/portal/hub/proxy-tls/hub-ca.crt"
    assert "--client-ssl-reject-unauthorized" in args
    assert args[-4:] == [
        "--default-target",
        "https://127.0.0.1:8081",
        "--error-target",
        "https://127.0.0.1:8081/hub/error",
    ]


def test_a_plain_proxy_has_no_tls_and_no_host_routing():
    site = merge(
        SETTINGS,
        {"hub": {"bind_url": "http://127.0.0.1:9000/", "domain": ""}, "tls": {"internal": False}},
    )
    args = proxy_args(site, Layout.of(site))
    assert args[:4] == ["--ip", "127.0.0.1", "--port", "9000"]
    assert not [a for a in args if "ssl" in a or a == "--host-routing"]
    assert "http://127.0.0.1:8081" in args


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
