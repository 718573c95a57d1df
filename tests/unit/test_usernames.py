"""User names the portal takes, and the host of each user's own origin."""

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jupyterhub.utils import subdomain_hook_idna

from portal import settings
from portal.core import usernames

DEFAULT = settings.defaults()["hub"]["username_pattern"]
RULE = usernames.check_pattern(DEFAULT)

# names the portal can hold: usernames.SAFE
safe_names = st.from_regex(usernames.SAFE_RE, fullmatch=True)
LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


@pytest.mark.parametrize("name", ["alice", "J.Smith", "j.smith", "j_smith-2", "_svc", "A" * 32])
def test_the_default_takes_unix_and_freeipa_logins(name):
    assert RULE.match(name)


@pytest.mark.parametrize("name", [".x", "..", "-x", "x/y", "x,y", "x y", "x:y", "x@y", "1x"])
def test_the_default_refuses_what_a_shell_a_path_or_ldap_would_misread(name):
    assert not RULE.match(name)


@given(st.text(max_size=70))
def test_no_pattern_takes_a_name_the_portal_cannot_hold(name):
    """Whatever a site allows, the rule stays within SAFE."""
    rule = re.compile(usernames.anchored("^.*$"))
    assert bool(rule.match(name)) == usernames.is_safe(name)


@pytest.mark.parametrize(
    "name, host",
    [
        ("alice", "alice.portal.example.org"),
        ("bob-2", "bob-2.portal.example.org"),
        ("J.Smith", "u-jsmith--1530429.portal.example.org"),
        ("j.smith", "u-jsmith--b33a535.portal.example.org"),
        ("JSmith", "u-jsmith--b1cbeea.portal.example.org"),
    ],
)
def test_each_user_has_a_host_of_their_own(name, host):
    assert usernames.user_host(name, "portal.example.org") == host


@given(safe_names)
def test_a_users_host_is_a_lower_case_dns_label_unique_to_the_exact_name(name):
    label = usernames.host_label(name)
    assert LABEL.match(label), label
    # the proxy matches hosts as browsers send them: in lower case
    assert label == label.lower()
    if name != name.lower():
        assert label != usernames.host_label(name.lower())


@given(safe_names.filter(lambda n: n == n.lower()))
def test_names_without_upper_case_get_jupyterhubs_own_host(name):
    """JupyterHub's "idna" hook, which the hub used before: a user's host is
    unchanged unless their name has upper case."""
    expected = subdomain_hook_idna(name, "portal.example.org", "user")
    assert usernames.user_host(name, "portal.example.org") == expected


def test_jupyterhubs_own_hook_keeps_upper_case_that_the_proxy_would_not_route():
    """Why the portal hashes upper case: JSmith.DOMAIN reaches the proxy as
    jsmith.DOMAIN, which its exact host routes never match."""
    assert subdomain_hook_idna("JSmith", "d.org", "user") == "JSmith.d.org"
    assert usernames.user_host("JSmith", "d.org") != "jsmith.d.org"


def test_the_dangerous_names_are_refused_by_safe():
    assert not any(usernames.is_safe(name) for name, _ in usernames.DANGEROUS)
    assert set(string.punctuation) - set("_.-@") <= {
        c for c in string.punctuation if not usernames.is_safe(f"a{c}b")
    }
