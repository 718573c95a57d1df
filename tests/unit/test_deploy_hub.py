"""What deploy/hub.sh installs before the hub starts, and the proxy's
command line (deploy/hub_setup.py), without starting anything."""

import json
import subprocess

import pytest

from deploy.base import DeployError
from deploy.hub_setup import Layout, extend_helper, proxy_args, registration, shell_lines, sudoers
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
    assert lines[-3:] == [
        "Defaults:portal env_reset, !setenv, !lecture",
        "portal ALL = (PORTAL_USERS) NOPASSWD: PORTAL_SLURM",
        "portal ALL = (root) NOPASSWD: PORTAL_EXTEND",
    ]
    assert text.endswith("\n")


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
