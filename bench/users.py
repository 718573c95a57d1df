"""The simulated users: LDAP accounts bench001..benchNNN, logged in through the hub."""

from concurrent.futures import ThreadPoolExecutor

from tests import loadusers
from tests.hubclient import HubClient

# uids of their own: load001.. (the tests' load users) have 21001..
UID_BASE = 23000


def ensure_users(count):
    """``{name: password}`` of bench001..benchNNN (created if missing, new passwords)."""
    saved = loadusers.UID_BASE
    loadusers.UID_BASE = UID_BASE
    try:
        return loadusers.ensure_users(count, prefix="bench")
    finally:
        loadusers.UID_BASE = saved


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
