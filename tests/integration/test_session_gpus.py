"""The slice's own GPU use, served by the session's server to its owner.

alice's session (a Slurm job on a compute node, as alice) answers
``GET /user/alice/portal/api/gpus`` with its job's GPUs; this machine has no
NVIDIA driver, so the list is empty and the reason says so (NVML finds no
library). bob, logged in to the same hub, never gets it.
"""

import re

import requests

from tests.support.hubsettings import CA_CERT


def test_the_gpu_api_answers_the_owner_only(session, login):
    alice = session("alice", profile="pytorch", gpus=2)
    base = alice.user_model("alice")["servers"][""]["url"]
    api = alice.url(base + "portal/api/gpus")
    alice.session.get(alice.url(base + "lab"), timeout=60)  # the server's login, as a browser
    r = alice.session.get(api, timeout=60)
    assert r.status_code == 200, r.text[:300]
    model = r.json()
    assert model["gpus"] == []
    # read on the job's own node (the session card's)
    home = alice.session.get(alice.url("/hub/home"), timeout=30).text
    node = re.search(r'id="session-node">(.*?)</td>', home, re.S).group(1).strip()
    assert model["reason"].startswith(f"No NVIDIA driver on {node} (NVML: "), model
    assert r.headers["Cache-Control"] == "no-store"

    # bob: refused, never alice's data
    bob = login("bob")
    r = bob.session.get(api, timeout=60)
    assert r.status_code == 403, f"bob got {r.status_code}"
    assert "gpus" not in r.text
    # no login at all: sent to the hub's login
    r = requests.get(api, allow_redirects=False, timeout=30, verify=CA_CERT)
    assert r.status_code in (302, 403) and "gpus" not in r.text

    # the hub's relay for the home page's card: alice gets her session's answer, bob not
    relay = "/hub/portal/sessions/alice/gpus"
    r = alice.session.get(alice.url(relay), timeout=60)
    assert r.status_code == 200 and r.json() == {"gpus": [], "reason": model["reason"]}, r.text
    r = bob.session.get(bob.url(relay), timeout=60)
    assert r.status_code == 403 and "NVML" not in r.text
    r = bob.session.get(bob.url("/hub/portal/sessions/bob/gpus"), timeout=60)
    assert r.status_code == 404  # bob has no session
