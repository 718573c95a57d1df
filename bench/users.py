"""The simulated users: LDAP accounts bench001..benchNNN, logged in through the hub."""

from concurrent.futures import ThreadPoolExecutor

from tests.support import loadusers
from tests.support.hubclient import HubClient

# Their uids are the prefix's own range (tests/support/loadusers.py UID_BASES).
PREFIX = "bench"


def ensure_users(count):
    """``{name: password}`` of bench001..benchNNN (created if missing, new passwords)."""
    return loadusers.ensure_users(count, prefix=PREFIX)


def remove_users():
    """Remove every benchNNN account, its group memberships and its home."""
    return loadusers.remove_users(PREFIX)


def login(hub, name, password):
    client = HubClient(hub.url)
    r = client.login(name, password)
    if r.status_code != 302:
        raise RuntimeError(f"login of {name} on the {hub.name} hub answered {r.status_code}")
    return client


def login_all(hub, accounts, workers=4):
    """``{name: HubClient}``, logged in through LDAP, a few at a time."""
    names = sorted(accounts)
    with ThreadPoolExecutor(workers) as pool:
        clients = pool.map(lambda n: login(hub, n, accounts[n]), names)
        return dict(zip(names, clients, strict=True))
