"""The spawner's lifecycle without Slurm: submit, start (waiting on the port
report and the shared poll), poll, stop, and the state a hub restart keeps.
Slurm's command runner (``portal.slurm.commands.run``) is replaced, in this
unit test only, by a stand-in that answers like the real commands; the real
Slurm is exercised by tests/integration/test_spawner.py."""

import asyncio
import os
import pwd
from types import SimpleNamespace

import pytest
from tornado import web
from traitlets.config import Config

from portal.settings import defaults
from portal.slurm import commands
from spawners import card
from spawners.handlers import reported_port
from spawners.notices import Followed
from spawners.spawner import PortalSpawner

ME = pwd.getpwuid(os.getuid()).pw_name


class Runner:
    """Answers Slurm's command lines as slurmctld would, for one job."""

    def __init__(self):
        self.calls = []
        self.state = None  # None: not submitted; then PENDING, RUNNING, or gone
        self.script = None
        self.nodes = "n1"  # squeue's %N once it runs
        self.gpus_held = 0  # this user's GPUs in QOS portal (scontrol show assoc_mgr)
        self.sacct = []  # sacct's answers before its last one (slurmdbd not told yet)
        self.ctld = ""  # scontrol show job -o's answer, when set

    async def __call__(self, argv, *, input=None, env=None, timeout=20, with_stderr=False):
        self.calls.append(argv)
        command = os.path.basename(argv[argv.index("--") + 1] if argv[0] == "sudo" else argv[0])
        if command == "sbatch" and "--test-only" in argv:
            return "sbatch: Job 1 to start at 2026-11-23T18:00:00 using 8 processors"
        if command == "sbatch":
            self.script, self.state = input, "PENDING"
            return "4242"
        if command == "squeue":
            if self.state in ("PENDING", "RUNNING"):
                node = self.nodes if self.state == "RUNNING" else ""
                return f"4242|{ME}|{self.state}|{node}|None|N/A|N/A|gres:gpu:1|gpu|2:00:00"
            return ""
        if command == "scancel":
            self.state = "gone"
            return ""
        if command == "scontrol" and "assoc_mgr" in argv:
            held = f"MaxTRESPU=gres/gpu=4({self.gpus_held})"
            return f"QOS=portal(2)\n User Limits\n  {os.getuid()}\n   {held}"
        if command == "sacctmgr" and "qos" in argv:
            return "normal|\nportal|gres/gpu=4"
        if command == "sacctmgr":
            return "portal|portal||portal|portal"
        if command == "scontrol" and "-o" in argv and self.ctld:
            return self.ctld
        if command == "scontrol":
            detail = f"Nodes={self.nodes} CPU_IDs=0-7 Mem=49152 GRES=gpu:1(IDX:2)"
            return f"JobId=4242 NodeList={self.nodes}\n     {detail}"
        if command == "sinfo":
            return "n1 gpu* gpu:4 gpu:1(IDX:2) 8/24/0/32 mix 196608 49152 1-00:00:00"
        if command == "sacct":
            return self.sacct.pop(0) if self.sacct else "CANCELLED by 0|0:0|None"
        raise AssertionError(f"unexpected command {argv}")


def submitted(runner):
    """The sbatch calls of ``runner`` that submit a job (not the poller's
    ``--test-only`` estimates of expected starts, which may run meanwhile)."""
    sbatch = commands.command("sbatch")
    return [argv for argv in runner.calls if sbatch in argv and "--test-only" not in argv]


@pytest.fixture
def runner(monkeypatch):
    runner = Runner()
    monkeypatch.setattr(commands, "run", runner)
    return runner


def spawner(job_name):
    c = Config()
    c.PortalSpawner.uid_min = 0  # this test runs as whoever runs it
    c.PortalSpawner.job_name = job_name
    c.PortalSpawner.poll_interval_active = 0.05
    c.PortalSpawner.poll_interval_slurm = 0.05
    c.PortalSpawner.answer_interval = 0.01
    s = PortalSpawner(config=c, user=SimpleNamespace(name=ME, url=f"/user/{ME}/"))
    s.get_env = lambda: {"HOME": pwd.getpwnam(ME).pw_dir, "JUPYTERHUB_API_TOKEN": "t0k"}
    return s


async def no_answer_wait():
    return None


async def test_submit_start_poll_stop_and_state(runner):
    s = spawner("unit-lifecycle")
    s.user_options = {"gpus": "1", "hours": "2"}
    s._wait_answering = no_answer_wait  # Jupyter's first answer: the integration tests'

    start = asyncio.ensure_future(s.start())
    while runner.state is None:
        await asyncio.sleep(0.01)
    # submitted as the user, through sudo, the slice's options, the script on stdin
    sbatch = next(argv for argv in runner.calls if "--parsable" in argv)
    assert sbatch[:5] == ["sudo", "-n", "-u", ME, "--"]
    assert "--gres=gpu:1" in sbatch and "--time=2:00:00" in sbatch and "--nodes=1" in sbatch
    assert sbatch.count("--no-requeue") == 1
    assert "export JUPYTERHUB_API_TOKEN=t0k" in runner.script
    # the job runs, but start waits for the port report
    runner.state = "RUNNING"
    await asyncio.sleep(0.3)
    assert not start.done()
    s.report_port(54321)
    assert await asyncio.wait_for(start, 5) == ("n1", 54321)
    assert s.gpu_indices == {"n1": "2"}

    # listed: running; the state survives a hub restart
    assert await s.poll() is None
    restored = spawner("unit-lifecycle")
    restored.load_state(s.get_state())
    assert (restored.job_id, restored.gpu_indices) == ("4242", {"n1": "2"})
    assert restored.job_slice == s.job_slice and restored.profile == s.profile
    assert restored.last_options == {"profile": "default", "gpus": 1, "hours": 2, "nodes": 1}

    # stop: scancel as the user, then the shared poll no longer lists the job
    await asyncio.wait_for(s.stop(), 10)
    scancel = next(argv for argv in runner.calls if commands.command("scancel") in argv)
    assert scancel == [
        "sudo", "-n", "-u", ME, "--", commands.command("scancel"), f"--name={s.job_name}", "4242"
    ]  # fmt: skip
    assert await s.poll() == 1
    assert s.job_id == ""


async def test_a_job_that_ends_before_jupyter_ends_the_start_with_sacct_reason(runner):
    s = spawner("unit-ended")
    s.user_options = {"gpus": 1}
    start = asyncio.ensure_future(s.start())
    while runner.state is None:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # a query after the submission has listed it
    runner.state = "gone"
    with pytest.raises(RuntimeError, match=r"ended before Jupyter started \(CANCELLED"):
        await asyncio.wait_for(start, 5)


async def running(runner, job_name):
    """A spawner of ``job_name`` whose 1-GPU session runs (port reported)."""
    s = spawner(job_name)
    s.user_options = {"gpus": 1}
    s._wait_answering = no_answer_wait
    start = asyncio.ensure_future(s.start())
    while runner.state is None:
        await asyncio.sleep(0.01)
    runner.state = "RUNNING"
    s.report_port(54321)
    await asyncio.wait_for(start, 5)
    return s


async def test_an_end_slurmdbd_has_not_recorded_yet_is_settled_in_the_background(
    runner, monkeypatch
):
    """squeue no longer lists the job, but sacct has no final state yet: the
    hub shows the server stopped at once; the home page says Slurm has not
    recorded how it ended, then how, and the notice follows, once."""
    monkeypatch.setattr(card, "SETTLE_WAITS", (0.05,) * 4)
    s = await running(runner, "unit-settle")
    target = Followed(user=ME, address="", session="Jupyter", link="/user/x/", home="/hub/home",
                      slice="1 GPU", warn_minutes=0)  # fmt: skip
    s.poller.notices.follow("4242", target)
    runner.sacct = ["", "RUNNING|0:0|None"]
    runner.state = "gone"
    for _ in range(100):  # the shared squeue's next round
        if await s.poll() == 1:
            break
        await asyncio.sleep(0.05)
    assert s.job_id == ""
    assert "not recorded yet" in s.ended_info()["why"]
    ended = lambda: [e for e in s.poller.notices.events.get(ME, ()) if e["kind"] == "ended"]  # noqa: E731
    assert not ended()
    await asyncio.wait_for(s._settling, 5)
    assert s.ended_info()["why"] == "it was cancelled" and s.last_end["job_id"] == "4242"
    [event] = ended()
    assert event["job_id"] == "4242" and "cancelled" in event["body"]
    assert sum(commands.command("sacct") in argv for argv in runner.calls) == 3


@pytest.mark.parametrize(
    "ctld, why",
    [
        ("", "Slurm has no record of how it ended"),
        ("JobId=4242 JobName=unit-settle-deadline JobState=CANCELLED ExitCode=0:15",
         "it was cancelled"),
        ("JobId=4242 JobName=someone-else JobState=CANCELLED ExitCode=0:15",
         "Slurm has no record of how it ended"),
    ],
)  # fmt: skip
async def test_settling_an_end_stops_at_its_deadline_then_asks_slurmctld(
    runner, monkeypatch, ctld, why
):
    """slurmdbd never records the end: the home page stops saying "not
    recorded yet" once ``SETTLE_DEADLINE_S`` is over, whatever the waits, and
    says what slurmctld still holds of the job, if it is this session's."""
    runner.ctld = ctld
    monkeypatch.setattr(card, "SETTLE_WAITS", (0.2,) * 50)
    monkeypatch.setattr(card, "SETTLE_DEADLINE_S", 0.5)
    s = await running(runner, "unit-settle-deadline")
    runner.sacct = ["RUNNING|0:0|None"] * 100
    runner.state = "gone"
    for _ in range(100):
        if await s.poll() == 1:
            break
        await asyncio.sleep(0.05)
    assert "not recorded yet" in s.ended_info()["why"]
    await asyncio.wait_for(s._settling, 2)
    assert s.ended_info()["why"] == why
    assert sum(commands.command("sacct") in argv for argv in runner.calls) <= 4


@pytest.mark.parametrize(
    "body, message",
    [
        (b"", "must be JSON"),
        (b"[1]", "Only"),
        (b'{"port": 8888, "cmd": "x"}', "Only"),
        (b'{"port": true}', "whole number"),
        (b'{"port": 80}', "from 1024"),
        (b'{"port": "8888"}', "whole number"),
    ],
)
def test_a_port_report_is_a_port_and_nothing_else(body, message):
    with pytest.raises(web.HTTPError) as e:
        reported_port(body)
    assert e.value.status_code == 400 and message in e.value.log_message


def test_a_port_report():
    assert reported_port(b'{"port": 8888}') == 8888


NOBODY = f"{defaults()['cluster']['network']}.250"  # on the nodes' bridge, no node there


@pytest.mark.skipif(
    not os.path.exists(f"/sys/class/net/{defaults()['cluster']['bridge']}"),
    reason="the embedded cluster's bridge is not up (make up)",
)
async def test_a_node_the_hub_cannot_reach_ends_the_start_with_its_name(runner):
    """A real connection attempt to an address of the nodes' network that no
    node has (no answer to ARP: a timeout, then "No route to host"), not a
    refused connection: the spawn ends after unreachable_timeout, naming the
    node, its address and the port, rather than waiting http_timeout."""
    s = spawner("unit-unreachable")
    s.unreachable_timeout = 1.0
    s.http_timeout = 60
    s.job_id, s.ip, s.port = "4242", NOBODY, 8888
    runner.state = "RUNNING"
    s.poller.poke()
    started = asyncio.get_running_loop().time()
    with pytest.raises(RuntimeError) as error:
        await s._wait_answering()
    # failed early, not at http_timeout
    assert asyncio.get_running_loop().time() - started < s.http_timeout / 2
    message = str(error.value)
    assert f"cannot reach your session on node {NOBODY} ({NOBODY}, port 8888)" in message


async def test_a_session_over_two_nodes_runs_jupyter_on_the_first_and_lists_both(runner):
    s = spawner("unit-two-nodes")
    s.default_profile = {"max_nodes": 2}
    s.user_options = {"gpus": 1, "nodes": "2"}
    s._wait_answering = no_answer_wait
    runner.nodes = "n[1-2]"
    start = asyncio.ensure_future(s.start())
    while runner.state is None:
        await asyncio.sleep(0.01)
    sbatch = next(argv for argv in runner.calls if "--parsable" in argv)
    assert "--nodes=2" in sbatch and "--ntasks-per-node=1" in sbatch and "--gres=gpu:1" in sbatch
    runner.state = "RUNNING"
    s.report_port(54321)
    assert await asyncio.wait_for(start, 5) == ("n1", 54321)
    info = s.session_info()
    assert info["nodes"] == [{"name": "n1", "gpus": "2"}, {"name": "n2", "gpus": "2"}]
    assert info["slice"].total_gpus == 2 and s.last_options["nodes"] == 2
    await asyncio.wait_for(s.stop(), 10)


async def test_a_state_of_an_older_hub_loads(runner):
    """Before multi-node sessions: no nodes in the slice, GPU indices as one string."""
    s = spawner("unit-old-state")
    s.load_state(
        {
            "job_id": "4242",
            "slice": {"gpus": 2, "cores": 16, "mem_gb": 96, "hours": 8, "partition": "gpu"},
            "gpu_indices": "0-1",
            "last_options": {"profile": "default", "gpus": 2, "hours": 8},
        }
    )
    assert s.job_slice.nodes == 1 and s.job_slice.total_cores == 16
    assert s.gpu_indices == {"": "0-1"}
    s.ip = "vm"  # the job is not listed (yet): the card shows what the state has
    assert s.session_info()["nodes"] == [{"name": "vm", "gpus": "0-1"}]
    # Slurm's defaults: no model asked, the user's default account
    info = s.session_info()
    assert (info["partition"], info["gpu_model"], info["account"], info["reservation"]) == (
        "gpu", "", "", "",
    )  # fmt: skip


async def test_the_card_names_the_gpu_model_account_and_reservation(runner):
    """Issue 38: the site's choices of the session, as its state keeps them."""
    s = spawner("unit-site-card")
    s.load_state(
        {
            "job_id": "4343",
            "slice": {"gpus": 1, "cores": 8, "mem_gb": 48, "hours": 2, "partition": "sxm2",
                      "gpu_type": "v100-sxm2", "account": "lab-vision", "qos": "vision",
                      "reservation": "course", "feature": "nvlink"},
            "gpu_indices": {"n1": "0"},
        }
    )  # fmt: skip
    s.ip = "n1"
    info = s.session_info()
    assert {k: info[k] for k in ("partition", "gpu_model", "account", "qos", "reservation",
                                 "feature")} == {
        "partition": "sxm2", "gpu_model": "v100-sxm2", "account": "lab-vision", "qos": "vision",
        "reservation": "course", "feature": "nvlink",
    }  # fmt: skip


async def test_no_squeue_runs_while_the_hub_checks_a_server_it_saw_running(runner):
    """Once the poll has seen the job running on its node, the port report
    and the wait for Jupyter's answer start no query of their own: one would
    run beside the hub's check of the new server. Before the poll has seen
    it, the report asks for one at once (the node is needed)."""
    s = spawner("unit-no-extra-squeue")
    s.poll_interval_active = s.poll_interval_slurm = 30  # no query of the loop's own
    s.job_id, s.submitted_at = "4242", 0.0
    runner.state = "RUNNING"

    def squeues():
        return sum(1 for argv in runner.calls if "squeue" in " ".join(argv))

    s.poller.watch(s)
    await s.poller.wait_changed(5)  # the watch's first query
    seen = squeues()
    assert s.poller.job("4242").running
    s.report_port(8888)
    s.poller.watch(s)  # as the wait for the answer does
    await asyncio.sleep(0.2)
    assert squeues() == seen
    # a report before the poll saw the job running: a query now
    s.poller.snapshot.jobs.clear()
    s.report_port(8889)
    await s.poller.wait_changed(5)
    assert squeues() == seen + 1
    s.poller.unwatch(s)
