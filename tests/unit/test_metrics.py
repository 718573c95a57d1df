"""The portal's Prometheus series (spawners/metrics.py) and the login node's
Prometheus configuration (deploy/prometheus_setup.py), without a hub: the
spawners, the poll and the store are made here. The real hub and Prometheus
are exercised by tests/integration/test_metrics.py."""

import asyncio
import time
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from deploy import prometheus_setup
from portal.core.slice import make_slice
from portal.slurm import commands as slurm
from spawners import metrics

SETTINGS = {
    "hub": {"bind_url": "https://0.0.0.0:8000", "domain": "portal.localhost"},
    "tls": {"ca_cert": "/etc/portal/tls/ca.crt"},
    "metrics": {"scrape_seconds": 15.0, "retention": "30d", "prometheus_listen": "127.0.0.1:9090"},
}


def spawner(job_id, profile, gpus, **choices):
    job_slice = make_slice(gpus, 1, partition="gpu", max_gpus=4, cores_per_gpu=8,
                           mem_per_gpu_gb=48, max_hours=24, choices=choices)  # fmt: skip
    return SimpleNamespace(
        job_id=job_id, profile=SimpleNamespace(name=profile), job_slice=job_slice
    )


def sample(metric, name, **labels):
    """The value of ``metric``'s sample ``name`` with ``labels`` (0 when none)."""
    for family in metric.collect():
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0


def scrape(collector):
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_the_collector_counts_sessions_gpus_jobs_and_the_polls_age():
    jobs = {"1": SimpleNamespace(running=True), "2": SimpleNamespace(running=False)}
    poller = SimpleNamespace(
        job=jobs.get, snapshot=SimpleNamespace(ok=True, started=time.monotonic() - 4)
    )
    notices = SimpleNamespace(seen={"counts": {("RUNNING", "pytorch"): 2}, "gpus": 3})
    store = SimpleNamespace(extension_count=lambda: 7)
    spawners = [spawner("1", "pytorch", 2), spawner("2", "pytorch", 1), spawner("", "mxnet", 1)]
    text = scrape(metrics.PortalCollector(lambda: spawners, poller, notices, store))
    default = 'account="",gpu_model=""'  # Slurm's defaults: no model, the user's account
    assert f'portal_sessions{{{default},profile="pytorch",state="running"}} 1.0' in text
    assert f'portal_sessions{{{default},profile="pytorch",state="pending"}} 1.0' in text
    assert f'portal_sessions{{{default},profile="mxnet",state="pending"}} 1.0' in text
    assert f'portal_gpus_held{{{default},kind="session"}} 2.0' in text  # the running one's
    assert f'portal_gpus_held{{{default},kind="notebook_job"}} 3.0' in text
    assert 'portal_notebook_jobs{profile="pytorch",state="running"} 2.0' in text
    assert "portal_extensions_total 7.0" in text
    age = float(text.split("\nportal_poll_age_seconds ")[1].split()[0])
    assert 4 <= age < 60


def test_sessions_and_gpus_held_are_labelled_by_gpu_model_and_account():
    """Issue 38: the model and account a session or job asked for, once Slurm
    took it; a name of no Slurm shape never becomes a label."""
    jobs = {"1": SimpleNamespace(running=True), "2": SimpleNamespace(running=True)}
    poller = SimpleNamespace(job=jobs.get, snapshot=SimpleNamespace(ok=False, started=0))
    typed = [spawner("1", "pytorch", 2, gpu_type="v100-sxm2", account="lab-vision"),
             spawner("2", "pytorch", 1, gpu_type="v100-sxm2", account="lab-vision"),
             spawner("", "pytorch", 1, gpu_type="v100-pcie", account="lab-nlp")]  # fmt: skip
    notices = SimpleNamespace(seen={
        "counts": {("RUNNING", "pytorch"): 2}, "gpus": 3,
        "gpus_by": {("v100-pcie", "lab-nlp"): 2, ("", "lab nlp; x"): 1},
    })  # fmt: skip
    store = SimpleNamespace(extension_count=lambda: 0)
    text = scrape(metrics.PortalCollector(lambda: typed, poller, notices, store))
    sxm2 = 'account="lab-vision",gpu_model="v100-sxm2"'
    assert f'portal_sessions{{{sxm2},profile="pytorch",state="running"}} 2.0' in text
    assert f'portal_gpus_held{{{sxm2},kind="session"}} 3.0' in text
    # not submitted yet: Slurm has taken no name of it
    assert 'portal_sessions{account="",gpu_model="",profile="pytorch",state="pending"} 1.0' in text
    assert 'v100-pcie",kind="session"' not in text
    pcie = 'account="lab-nlp",gpu_model="v100-pcie"'
    assert f'portal_gpus_held{{{pcie},kind="notebook_job"}} 2.0' in text
    assert 'portal_gpus_held{account="",gpu_model="",kind="notebook_job"} 1.0' in text
    assert "lab nlp" not in text


def test_a_poll_that_never_answered_has_no_age_rather_than_zero():
    poller = SimpleNamespace(job=lambda _: None, snapshot=SimpleNamespace(ok=False, started=0))
    store = SimpleNamespace(extension_count=lambda: 0)
    text = scrape(metrics.PortalCollector(list, poller, None, store))
    assert "\nportal_poll_age_seconds " not in text


def test_every_slurm_command_is_timed_and_its_failures_counted(monkeypatch):
    monkeypatch.setattr(slurm, "OBSERVERS", [metrics.observe_command])
    errors = "portal_slurm_command_errors_total"
    before = sample(metrics.SLURM_ERRORS, errors, command="false")
    asyncio.run(slurm.run(["true"]))
    try:
        asyncio.run(slurm.run(["false"]))
    except slurm.SlurmError:
        pass
    assert sample(metrics.SLURM_ERRORS, errors, command="false") == before + 1
    assert sample(metrics.SLURM_SECONDS, "portal_slurm_command_seconds_count", command="true") >= 1


def test_a_spawn_is_observed_with_its_queue_wait():
    timeline = {"submitted": 0.2, "running seen": 1.7, "answered": 3.1}
    made = SimpleNamespace(profile=SimpleNamespace(name="vision"), timeline=timeline)
    metrics.observe_spawn(made)
    assert (
        sample(metrics.SPAWN_DURATION, "portal_spawn_duration_seconds_sum", profile="vision") >= 3.1
    )
    assert sample(metrics.QUEUE_WAIT, "portal_queue_wait_seconds_sum", profile="vision") >= 1.5


def test_prometheus_scrapes_the_hub_through_the_proxy_with_the_monitoring_token():
    text = prometheus_setup.prometheus_yml(SETTINGS, token_file="/etc/portal/prometheus/token")
    assert text.startswith(prometheus_setup.MARKER)
    assert 'targets: ["127.0.0.1:8000"]' in text and "server_name: portal.localhost" in text
    assert "metrics_path: /hub/metrics" in text and "scrape_interval: 15s" in text
    assert "credentials_file: /etc/portal/prometheus/token" in text
    assert "ca_file: /etc/portal/tls/ca.crt" in text
    argv = prometheus_setup.daemon_argv(SETTINGS)
    assert "--web.listen-address=127.0.0.1:9090" in argv
    assert "--storage.tsdb.retention.time=30d" in argv


def test_the_scrape_target_follows_the_bind_url():
    def target(bind_url, domain=""):
        return prometheus_setup.hub_target({"hub": {"bind_url": bind_url, "domain": domain}})

    assert target("https://[::]:8000") == ("[::1]:8000", "::1")
    assert target("http://portal.example.org") == ("portal.example.org:80", "portal.example.org")
    settings = {**SETTINGS, "hub": {"bind_url": "https://0.0.0.0:443/jupyter/", "domain": "p.org"}}
    assert "metrics_path: /jupyter/hub/metrics" in prometheus_setup.prometheus_yml(settings)


def test_the_monitoring_token_is_read_from_a_regular_file_of_hex_only(tmp_path):
    from deploy.hub_setup import read_token

    good, link, other = tmp_path / "t", tmp_path / "l", tmp_path / "secret"
    good.write_text("ab" * 32 + "\n")
    other.write_text("cd" * 32 + "\n")
    link.symlink_to(other)
    assert read_token(good) == "ab" * 32
    assert read_token(link) is None  # a link is never followed
    good.write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert read_token(good) is None and read_token(tmp_path / "none") is None


def test_refusals_are_counted_in_the_store_by_every_process_and_served_by_the_hub(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from portal.store import ProfileStore, default_url

    hub_store = ProfileStore(default_url(tmp_path))
    hub_store.upgrade()
    service_store = ProfileStore(default_url(tmp_path))  # the admin service's own engine
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: (hub_store, service_store)[i % 2].count_refusal("notebook_job"),
                      range(40)))  # fmt: skip
    hub_store.count_refusal("options")
    assert hub_store.refusal_counts() == {"notebook_job": 40, "options": 1}

    poller = SimpleNamespace(job=lambda _: None, snapshot=SimpleNamespace(ok=False, started=0))
    collector = metrics.PortalCollector(list, poller, None, hub_store)
    text = scrape(collector)
    assert 'portal_refused_requests_total{reason="notebook_job"} 40.0' in text
    assert 'portal_refused_requests_total{reason="options"} 1.0' in text


def test_a_refusal_goes_to_the_installed_collectors_store(monkeypatch):
    counted = []
    store = SimpleNamespace(refused=counted.append)
    monkeypatch.setattr(metrics, "_collector", SimpleNamespace(store=store))
    metrics.refused("qos")
    assert counted == ["qos"]
    monkeypatch.setattr(metrics, "_collector", SimpleNamespace(store=SimpleNamespace()))
    metrics.refused("qos")  # a store that cannot count: logged, the refusal stands


def test_a_burst_of_refusals_is_one_write_a_reason_off_the_event_loop(tmp_path, monkeypatch):
    from portal import store as store_module
    from portal.store import ProfileStore, default_url

    monkeypatch.setattr(store_module, "REFUSALS_SECONDS", 0.05)
    store = ProfileStore(default_url(tmp_path))
    store.upgrade()
    writes = []
    count = store.count_refusal
    store.count_refusal = lambda reason, n=1: (writes.append((reason, n)), count(reason, n))

    async def burst():
        for _ in range(100):
            store.refused("notebook_job")
        store.refused("qos")
        assert store.refusal_counts() == {"notebook_job": 100, "qos": 1}  # before any write
        assert writes == []
        await asyncio.sleep(0.3)

    asyncio.run(burst())
    assert sorted(writes) == [("notebook_job", 100), ("qos", 1)]
    assert ProfileStore(default_url(tmp_path)).refusal_counts() == {"notebook_job": 100, "qos": 1}
