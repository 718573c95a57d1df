"""The notices of notebook jobs (``spawners.job_notices``), without Slurm or a
mail server: the jobs' states are made here (as ``NotebookJobs.with_states``
gives them) and the sender collects. The real Slurm, LDAP and exim4 are
exercised by tests/integration/test_notebook_jobs.py."""

import asyncio
from datetime import UTC, datetime

from spawners.job_notices import JobNotices, as_job, ended_phrase
from spawners.notices import Notices

SUBMITTED = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def job(state, job_id="900", notify=True, tasks=None):
    ended = state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
    task = {"state": state, "elapsed": "00:01:12" if ended else "", "exit_code": "0:0",
            "nodes": "n1" if state != "PENDING" else "", "reason": "",
            "start": "2026-11-27T09:00:00+00:00" if state != "PENDING" else None,
            "end": "2026-11-27T10:00:00+00:00"}  # fmt: skip
    return {
        "id": job_id, "user": "alice", "notebook": "templates/pytorch/mnist-pytorch.ipynb",
        "profile": "pytorch", "gpus": 1, "nodes": 1, "hours": 1, "notify": notify,
        "submitted_at": SUBMITTED, "state": state, "ended": ended, "error": "",
        "task_states": tasks or [task],
    }  # fmt: skip


class Jobs:
    """Stands in for NotebookJobs: its store's records and Slurm's states,
    changed by the test between checks."""

    def __init__(self):
        self.states = []
        self.store = self

    def notebook_jobs(self, limit=500):
        return [{k: j[k] for k in ("id", "submitted_at")} for j in self.states]

    async def with_states(self, records, max_age=None):
        ids = {r["id"] for r in records}
        return [j for j in self.states if j["id"] in ids]


def run(*states, lookup=lambda user: "alice@portal.localhost", first=None):
    """The mails and page events of checks over ``states`` (each a list of jobs)."""
    sent = []

    async def send(mail):
        sent.append(mail)

    async def checks():
        jobs = Jobs()
        notices = Notices(sender="portal@portal.localhost", send=send)
        watcher = JobNotices(jobs, notices, "https://portal.localhost:8000/hub/", lookup)
        if first is not None:
            jobs.states = first
            await watcher.check(force=True)
        for state in states:
            jobs.states = state
            await watcher.check(force=True)
        await asyncio.sleep(0)  # the mails are sent in the background
        return notices.events.get("alice", [])

    events = asyncio.run(checks())
    return sent, list(events)


def test_a_queued_job_tells_its_start_and_its_end_once_each():
    sent, events = run(
        [job("PENDING")], [job("PENDING")], [job("RUNNING")], [job("RUNNING")],
        [job("COMPLETED")], [job("COMPLETED")],
    )  # fmt: skip
    assert [e["kind"] for e in events] == ["started", "ended"]
    assert [str(m["Subject"]) for m in sent] == [
        "Your notebook job templates/pytorch/mnist-pytorch.ipynb has started (Slurm job 900)",
        "Your notebook job templates/pytorch/mnist-pytorch.ipynb has ended (Slurm job 900)",
    ]
    body = sent[1].get_content()
    assert "your notebook job has ended: COMPLETED after 00:01:12." in body
    assert "Notebook:   templates/pytorch/mnist-pytorch.ipynb" in body
    assert "Its page:   https://portal.localhost:8000/services/portal/jobs/900" in body
    assert "when you submitted the job." in body
    assert events[1]["url"] == "https://portal.localhost:8000/services/portal/jobs/900"


def test_a_job_that_never_queued_tells_only_its_end_and_without_mail_unless_asked():
    sent, events = run([job("RUNNING", notify=False)], [job("FAILED", notify=False)])
    assert [e["kind"] for e in events] == ["ended"] and sent == []


def test_no_address_in_the_directory_leaves_the_browsers_notices():
    sent, events = run([job("PENDING")], [job("CANCELLED")], lookup=lambda user: "")
    assert [e["kind"] for e in events] == ["ended"] and sent == []


def test_jobs_that_ended_before_the_hub_started_are_not_told_again():
    sent, events = run([job("COMPLETED")], first=[job("COMPLETED")])
    assert events == [] and sent == []


def test_a_sweep_says_how_its_tasks_ended():
    states = ("COMPLETED", "FAILED", "COMPLETED")
    tasks = [{"state": s, "elapsed": "00:00:09", "exit_code": "0:0", "nodes": "n1",
              "start": None, "end": None} for s in states]  # fmt: skip
    assert ended_phrase(job("FAILED", tasks=tasks)) == (
        "2 of 3 tasks COMPLETED, 1 of 3 tasks FAILED"
    )


def test_as_job_reads_the_first_tasks_node_and_times():
    made = as_job(job("RUNNING"))
    assert made.nodes == ("n1",) and made.end == datetime(2026, 11, 27, 10, 0, tzinfo=UTC)
    assert as_job(job("PENDING")).nodes == ()
