"""The names the portal's certificate must cover, and whether one does
(deploy/tls_setup.py), without openssl."""

import doctest

import deploy.tls_setup
from deploy.tls_setup import cert_names, missing_names, wanted_names

OPENSSL = (
    "X509v3 Subject Alternative Name: \n"
    "    DNS:*.portal.localhost, DNS:localhost, DNS:portal.localhost, DNS:vm, "
    "IP Address:127.0.0.1\n"
)


def test_the_doctests():
    assert doctest.testmod(deploy.tls_setup).failed == 0


def test_the_host_the_hub_and_each_users_sessions_are_wanted():
    assert wanted_names("vm", "vm.example.org", "portal.localhost", []) == [
        "DNS:*.portal.localhost",
        "DNS:localhost",
        "DNS:portal.localhost",
        "DNS:vm",
        "DNS:vm.example.org",
        "IP:127.0.0.1",
    ]


def test_extra_names_are_dns_names_or_addresses():
    names = wanted_names("vm", "vm", "", ["portal.example.org", "10.1.2.3", "fd00::1"])
    assert "DNS:portal.example.org" in names
    assert "IP:10.1.2.3" in names and "IP:fd00::1" in names
    assert not any("*." in n for n in names)  # no [hub] domain: no wildcard


def test_the_names_a_certificate_covers_as_openssl_prints_them():
    have = cert_names(OPENSSL)
    assert have == [
        "DNS:*.portal.localhost",
        "DNS:localhost",
        "DNS:portal.localhost",
        "DNS:vm",
        "IP:127.0.0.1",
    ]
    assert missing_names(wanted_names("vm", "vm", "portal.localhost", []), have) == []
    assert cert_names("") == []


def test_a_certificate_that_lacks_a_wanted_name_is_made_anew():
    wanted = wanted_names("vm", "vm", "portal.example.org", ["10.0.0.1"])
    assert missing_names(wanted, cert_names(OPENSSL)) == [
        "DNS:*.portal.example.org",
        "DNS:portal.example.org",
        "IP:10.0.0.1",
    ]
