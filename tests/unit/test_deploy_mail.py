"""The login node's mail server's configuration (deploy/mail_setup.py),
without exim4 running: the local domains, the smarthost or none, the
checks of the settings, the facts deploy/mail.sh reads, and make purge's
part."""

import shutil
import subprocess

import pytest

from deploy import purge
from deploy.base import DeployError
from deploy.mail_setup import EXIM_CONF, exim_conf, ours, shell_lines, smarthost_route
from portal.settings import defaults, mail_from, merge

SETTINGS = defaults()


def with_mail(**mail):
    return merge(SETTINGS, {"mail": mail})


def option(text, name):
    """The value of a main option or a router's/transport's line ``name = value``."""
    values = [line.split("=", 1)[1].strip() for line in text.splitlines()
              if line.strip().startswith(f"{name} =")]  # fmt: skip
    assert len(values) == 1, f"{name}: {values}"
    return values[0]


def test_the_mail_domain_is_local_and_mail_lands_in_var_mail():
    text = exim_conf(SETTINGS)
    assert option(text, "domainlist local_domains") == "@ : localhost : portal.localhost"
    assert option(text, "qualify_domain") == "portal.localhost"
    assert option(text, "file") == "/var/mail/$local_part_data"
    assert "check_local_user" in text  # getpwnam: nslcd's LDAP users too
    assert option(text, "local_interfaces") == "<; 127.0.0.1"
    assert ours(text)


def test_without_a_smarthost_nothing_leaves_and_nobody_relays():
    text = exim_conf(SETTINGS)
    assert "manualroute" not in text and "dnslookup" not in text
    assert option(text, "hostlist relay_from_hosts") == "<;"
    assert "relay not permitted: this server delivers to portal.localhost only" in text


def test_a_smarthost_takes_every_other_domain():
    text = exim_conf(with_mail(smarthost="smtp.example.org:587", domain="hpc.example.org"))
    assert option(text, "route_list") == "* smtp.example.org::587 byname"
    assert "  domains = ! +local_domains\n  transport = remote_smtp\n" in text
    assert option(text, "hostlist relay_from_hosts") == "<; 127.0.0.1"
    assert option(text, "domainlist local_domains") == "@ : localhost : hpc.example.org"


@pytest.mark.parametrize(
    "smarthost, route",
    [("relay.example.org", "relay.example.org"), ("10.0.0.25:2525", "10.0.0.25::2525"), ("", "")],
)
def test_smarthost_forms(smarthost, route):
    assert smarthost_route(smarthost) == route


@pytest.mark.parametrize(
    "mail, message",
    [
        ({"smarthost": "relay:smtp"}, "the port must be a number"),
        ({"smarthost": "relay:0"}, "the port must be a number"),
        ({"smarthost": "relay; rm -rf /"}, r"\[mail\] smarthost = 'relay; rm -rf /' is not a DNS"),
        ({"domain": "portal.localhost : example.org"}, r"\[mail\] domain = .* is not a DNS name"),
        ({"domain": ""}, r"\[mail\] domain"),
    ],
)
def test_settings_exim_could_misread_are_refused(mail, message):
    with pytest.raises(DeployError, match=message):
        exim_conf(with_mail(**mail))


def test_the_from_address_is_the_hubs_account_unless_set():
    assert mail_from(SETTINGS) == "portal@portal.localhost"
    assert mail_from(with_mail(domain="hpc.example.org")) == "portal@hpc.example.org"
    assert mail_from(with_mail(**{"from": "hpc-portal@example.org"})) == "hpc-portal@example.org"


def test_the_scripts_facts_survive_the_shell():
    out = subprocess.run(
        ["bash", "-c", 'eval "$1"; printf "%s|" "$EXIM_PID" "$MAIL_DOMAIN" "${DAEMON[*]}"', "sh",
         "\n".join(shell_lines(with_mail(smarthost="relay.example.org")))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout == (
        "/run/exim4/exim.pid|portal.localhost|exim4 -bd -q30m -oP /run/exim4/exim.pid|"
    )


def test_purge_removes_only_a_configuration_written_here(tmp_path, monkeypatch):
    conf = tmp_path / "exim4.conf"
    monkeypatch.setattr(purge.mail_setup, "EXIM_CONF", conf)
    conf.write_text(exim_conf(SETTINGS))
    purge.purge_mail_conf()
    assert not conf.exists()
    conf.write_text("# a site's own exim4.conf\n")
    purge.purge_mail_conf()
    assert conf.exists()
    assert EXIM_CONF.name == conf.name


@pytest.mark.skipif(not shutil.which("exim4"), reason="exim4 is not installed")
@pytest.mark.parametrize("smarthost", ["", "smtp.example.org:587"])
def test_exim4_accepts_the_configuration(tmp_path, smarthost):
    conf = tmp_path / "exim4.conf"
    conf.write_text(exim_conf(with_mail(smarthost=smarthost)))
    check = subprocess.run(["exim4", "-C", str(conf), "-bV"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
