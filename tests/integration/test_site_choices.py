"""The site's choices (issue 38) through the hub's REST API, against the
real hub, slurmctld and slurmdbd in the demo's shape: partitions gpu
(default), sxm2 (typed GRES gpu:v100-sxm2 on n1 and n3), pcie
(gpu:v100-pcie on n2, DenyQos=cpu,nlp) and cpu (n1, n2, partition QOS cpu);
accounts portal (everyone's default), lab-vision (alice, carol) and
lab-nlp (bob, carol); the reservation vision-course on n3 for alice.

A choice the site's Slurm would refuse is an HTTP 400 naming the field,
and submits nothing (squeue unchanged). A session on each GPU model gets
that model's GRES on its partition, and sacct records it; a CPU session
runs with no GPU under the QOS the portal names for it; alice's session
runs in her reservation, on its node; carol's under the account she chose.
Each session is stopped as soon as it is checked, one at a time.
"""

import subprocess
import time

import pytest

from tests.support.jobs import sacct_record, squeue, stop_session
from tests.support.testhub import JOB_NAME

PROFILE = "pytorch-site"  # deploy/portal.toml's, made on the test hub as carol


@pytest.fixture
def site_profile(portal):
    """The test hub's profile like deploy/portal.toml's "pytorch-site"
    (tests/support/hubsettings.py SITE_PROFILE): the default partition, with
    sxm2, pcie and cpu, and every choice offered."""
    profile = portal("carol").profile(PROFILE)
    assert profile["partitions"] == ["sxm2", "pcie", "cpu"], profile
    assert profile["choose"] == ["account", "qos", "reservation", "feature"], profile
    assert (profile["max_cores"], profile["max_mem_gb"], profile["enabled"]) == (16, 64, True)
    return PROFILE


def all_jobs(user):
    """Every job of ``user`` in squeue (the test hub's or not)."""
    return squeue("-u", user, "-o", "%i %j %T")


def job_of(user, timeout=60):
    """The id of ``user``'s one test-hub job, once it runs."""
    deadline = time.monotonic() + timeout
    rows = []
    while time.monotonic() < deadline:
        rows = squeue("-n", JOB_NAME, "-u", user, "-o", "%i %T")
        if len(rows) == 1 and rows[0][1] == "RUNNING":
            return rows[0][0]
        time.sleep(0.5)
    raise AssertionError(f"no running job of {user} within {timeout} s: {rows}")


def scontrol_detail(job_id):
    """``scontrol show job -d``'s fields of ``job_id``, as a dict."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-d", "-o", str(job_id)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def start(client, name, **options):
    """POST the user's server with ``options``; the id of its job, once the
    session is ready."""
    r = client.api("POST", f"/users/{name}/server", json={"profile": PROFILE, **options})
    assert r.status_code in (201, 202), r.text
    job = job_of(name)
    client.wait_ready(name, timeout=180)
    return job


REFUSALS = [
    # (who, options, the field named)
    ("alice", {"partition": "pcie", "gpu_type": "v100-sxm2", "gpus": 1}, "gpu_type"),
    ("bob", {"account": "lab-vision", "gpus": 1}, "account"),
    ("bob", {"partition": "sxm2", "reservation": "vision-course", "gpus": 1}, "reservation"),
    ("bob", {"account": "lab-nlp", "qos": "nlp", "partition": "pcie", "gpus": 1}, "qos"),
    ("alice", {"partition": "cpu", "gpus": 1}, "gpus"),
]


def test_the_rest_api_refuses_what_slurm_would_naming_the_field(site_profile, login):
    clients = {name: login(name) for name in ("alice", "bob")}
    for name, options, field in REFUSALS:
        client = clients[name]
        before = all_jobs(name)
        r = client.api("POST", f"/users/{name}/server", json={"profile": site_profile, **options})
        message = r.json().get("message", "") if r.status_code == 400 else r.text
        print(f"REFUSAL {field}: {message}")
        try:
            assert r.status_code == 400, (name, options, r.status_code, r.text)
            assert message.endswith(f"(field: {field})"), (name, options, message)
            time.sleep(1)  # a job submitted would be in squeue by now
            assert all_jobs(name) == before, (name, options)
            assert not client.user_model(name).get("servers"), (name, options)
        finally:
            if r.status_code != 400:
                stop_session(client, name)


@pytest.mark.parametrize(("partition", "model"), [("sxm2", "v100-sxm2"), ("pcie", "v100-pcie")])
def test_a_session_on_each_model_gets_its_gres_and_sacct_records_it(
    site_profile, login, partition, model
):
    alice = login("alice")
    try:
        job = start(alice, "alice", partition=partition, gpu_type=model, gpus=1, hours=1)
        shown = scontrol_detail(job)
        assert shown["Partition"] == partition, shown
        assert f"gres/gpu:{model}=1" in shown["TRES"].split(","), shown["TRES"]
        assert f"gpu:{model}:1" in shown.get("JOB_GRES", shown.get("TresPerNode", "")), shown
    finally:
        stop_session(alice, "alice")
    tres, _account, _qos = sacct_record(job)
    assert f"gres/gpu:{model}=1" in tres.split(","), tres


def test_a_cpu_session_runs_with_no_gpu_under_the_qos_the_portal_names(site_profile, login):
    alice = login("alice")
    try:
        job = start(alice, "alice", partition="cpu", gpus=0, cores=4, mem_gb=8, hours=1)
        shown = scontrol_detail(job)
        assert shown["Partition"] == "cpu" and shown["QOS"] == "cpu", shown
        assert "gres/gpu" not in shown["TRES"], shown["TRES"]
        assert "cpu=4" in shown["TRES"].split(","), shown["TRES"]
        options = alice.user_model("alice")["servers"][""]["user_options"]
        assert options["gpus"] == 0 and options["partition"] == "cpu", options
        assert not options.get("qos"), options  # the user named none: the portal did
    finally:
        stop_session(alice, "alice")
    tres, _account, qos = sacct_record(job)
    assert "gres/gpu" not in tres and qos == "cpu", (tres, qos)


def test_alices_session_runs_in_her_reservation_on_its_node(site_profile, login):
    alice = login("alice")
    try:
        job = start(alice, "alice", partition="sxm2", reservation="vision-course", gpus=1, hours=1)
        shown = scontrol_detail(job)
        assert shown["Reservation"] == "vision-course" and shown["NodeList"] == "n3", shown
        assert shown["Partition"] == "sxm2", shown
    finally:
        stop_session(alice, "alice")


def test_carols_session_runs_under_the_account_she_chose(site_profile, login):
    carol = login("carol")
    try:
        job = start(carol, "carol", partition="sxm2", account="lab-nlp", gpus=1, hours=1)
        shown = scontrol_detail(job)
        assert shown["Account"] == "lab-nlp", shown
    finally:
        stop_session(carol, "carol")
    _tres, account, _qos = sacct_record(job)
    assert account == "lab-nlp", account
