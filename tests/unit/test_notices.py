"""The notices' events and messages (issue 26), without Slurm or a mail
server: the poll's jobs are made here and the sender collects. The real
poll, LDAP and exim4 are exercised by tests/integration/test_notices.py."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from tornado import web

from portal.core.profiles import ProfileError
from portal.slurm.model import Job
from spawners import form
from spawners.notices import Followed, Notices, message
from tests.unit.test_spawner_lifecycle import runner, spawner, submitted  # noqa: F401 (a fixture)

NOW = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)


def job(state, end=None, nodes=("n1",), job_id="77"):
    return Job(job_id, "alice", state, nodes if state == "RUNNING" else (), "None", None,
               end, "gres:gpu:1", "gpu", 60)  # fmt: skip


def target():
    return Followed(user="alice", address="alice@portal.localhost", session="PyTorch",
                    link="https://alice.portal.localhost:8000/user/alice/",
                    home="https://portal.localhost:8000/hub/home",
                    slice="1 GPU, 8 cores, 48 GB, 1 h", warn_minutes=15)  # fmt: skip


async def collected(notices, *updates):
    sent = []

    async def send(mail):
        sent.append(mail)

    notices.send = send
    for jobs in updates:
        if callable(jobs):
            jobs()
        else:
            notices.update(jobs, NOW)
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    return sent


async def test_a_queued_session_that_starts_is_told_once():
    notices = Notices(sender="portal@portal.localhost")
    notices.follow("77", target())
    end = NOW + timedelta(hours=1)
    sent = await collected(
        notices, {"77": job("PENDING")}, {"77": job("RUNNING", end)}, {"77": job("RUNNING", end)}
    )
    assert [m["Subject"] for m in sent] == ["Your session PyTorch has started (Slurm job 77)"]
    body = sent[0].get_content()
    assert "Node:       n1" in body and "Time limit: 2026-11-27 09:00 UTC" in body
    assert "Open it:    https://alice.portal.localhost:8000/user/alice/" in body
    assert sent[0]["To"] == "alice@portal.localhost"
    assert sent[0]["From"] == "portal@portal.localhost"


async def test_a_session_that_never_queued_is_not_told_it_started():
    notices = Notices(sender="portal@portal.localhost")
    notices.follow("77", target())
    sent = await collected(notices, {"77": job("RUNNING", NOW + timedelta(hours=1))})
    assert sent == []


async def test_warn_minutes_before_the_end_and_at_an_end_not_the_users():
    notices = Notices(sender="portal@portal.localhost")
    notices.follow("77", target())
    sent = await collected(
        notices,
        {"77": job("RUNNING", NOW + timedelta(minutes=30))},
        {"77": job("RUNNING", NOW + timedelta(minutes=14))},
        {"77": job("RUNNING", NOW + timedelta(minutes=13))},
        lambda: notices.ended("77", "it reached its time limit"),
        lambda: notices.ended("77", "again"),
    )
    assert [m["Subject"] for m in sent] == [
        "Your session PyTorch ends in 15 minutes (Slurm job 77)",
        "Your session PyTorch has ended (Slurm job 77)",
    ]
    assert "without your stopping it: it reached its time limit." in sent[1].get_content()
    assert "Portal:     https://portal.localhost:8000/hub/home" in sent[1].get_content()
    assert "77" not in notices.followed


async def test_a_failed_send_is_logged_and_the_poll_goes_on(caplog):
    notices = Notices(sender="portal@portal.localhost")

    async def refuse(mail):
        raise RuntimeError("sendmail failed (75): temporary failure")

    notices.send = refuse
    notices.follow("77", target())
    notices.update({"77": job("PENDING")}, NOW)
    notices.update({"77": job("RUNNING", NOW + timedelta(hours=1))}, NOW)
    await asyncio.sleep(0.01)
    assert "Notice 'started' to alice <alice@portal.localhost> failed" in caplog.text


def test_a_header_cannot_be_injected_through_the_session_name():
    bad = target()
    bad.session = "x\nBcc: eve@example.org"
    with pytest.raises(ValueError):
        message("started", job("RUNNING"), bad, "portal@portal.localhost").as_bytes()


@pytest.mark.parametrize("value", ["yes", 1, ["on"], {"a": 1}])
def test_notify_takes_true_or_false_only(value):
    with pytest.raises(ProfileError, match="notify must be true or false"):
        form.notify_choice({"notify": value})


async def test_a_session_with_notices_needs_an_address(runner):  # noqa: F811
    s = spawner("unit-notices-address")
    s.authenticator = type("A", (), {"lookup_mail": staticmethod(lambda name: "")})()
    s.user_options = {"gpus": "1", "hours": "1", "notify": True}
    with pytest.raises(web.HTTPError) as refused:
        await s.submit_batch_script()
    assert refused.value.status_code == 400
    assert "no e-mail address in the directory" in refused.value.log_message
    assert not submitted(runner)


async def test_the_address_and_what_was_sent_survive_a_hub_restart(runner):  # noqa: F811
    s = spawner("unit-notices-state")
    s.authenticator = type("A", (), {"lookup_mail": staticmethod(lambda name: "me@x.org")})()
    s.user_options = {"gpus": "1", "hours": "1", "notify": True}
    await s.submit_batch_script()
    s.poller.notices.followed["4242"].sent.add("started")
    state = s.get_state()
    assert state["notices"] == {"address": "me@x.org", "sent": ["started"]}
    s.poller.notices.unfollow("4242")
    restored = spawner("unit-notices-state")
    restored.load_state(state)
    assert restored.poller.notices.followed["4242"].sent == {"started"}
    assert restored.poller.notices.followed["4242"].address == "me@x.org"


async def test_the_pages_get_a_users_own_notices_after_the_id_they_saw():
    notices = Notices(sender="portal@portal.localhost")
    notices.follow("77", target())
    other = target()
    other.user, other.address = "bob", ""  # the browser only: no mail
    notices.follow("78", other)
    sent = await collected(
        notices,
        {"77": job("PENDING"), "78": job("PENDING", job_id="78")},
        {"77": job("RUNNING", NOW + timedelta(hours=1)), "78": job("RUNNING", NOW, job_id="78")},
    )
    assert [m["To"] for m in sent] == ["alice@portal.localhost"]  # bob asked for no mail
    assert notices.events_for("alice", -1) == ([], 1)  # a page just opened: the latest id
    events, last = notices.events_for("alice", 0)
    assert [(e["kind"], e["job_id"]) for e in events] == [("started", "77")] and last == 1
    assert events[0]["title"] == "Your session PyTorch has started (Slurm job 77)"
    assert events[0]["url"] == "https://alice.portal.localhost:8000/user/alice/"
    assert notices.events_for("alice", last) == ([], 1)
    bobs, _ = notices.events_for("bob", 0)
    assert {e["kind"] for e in bobs} == {"started", "ending"} and all(
        e["job_id"] == "78" for e in bobs
    )


async def test_an_idle_session_is_told_before_the_culler_and_again_after_a_comeback():
    notices = Notices(sender="portal@portal.localhost")
    followed = target()
    left = [(1500.0, 1800)]  # 25 min left of a 30 min idle limit: no notice yet
    followed.idle_left = lambda: left[0]
    notices.follow("77", followed)
    running = {"77": job("RUNNING", NOW + timedelta(hours=5))}

    def at(seconds):
        return lambda: (left.__setitem__(0, (seconds, 1800)), notices.update(running, NOW))

    sent = await collected(notices, running, at(400), at(300), at(1700), at(100))
    subjects = [m["Subject"] for m in sent]
    assert subjects == ["Your session PyTorch is idle and will be stopped soon (Slurm job 77)"] * 2
    assert "stops it in 7 minutes unless you use it" in sent[0].get_content()
    assert "stops it in 2 minutes" in sent[1].get_content()


async def test_a_session_the_culler_never_stops_is_never_told_it_idles():
    notices = Notices(sender="portal@portal.localhost")
    followed = target()
    followed.idle_left = lambda: (None, 0)
    notices.follow("77", followed)
    sent = await collected(notices, {"77": job("RUNNING", NOW + timedelta(hours=5))})
    assert sent == []


async def test_squeues_own_time_stamps_reach_the_notices_of_every_job():
    """squeue prints its times without a zone (the review found every poll
    failing on them, and one job's failure kept the next jobs' notices):
    the poll's own parse of them, for two users' jobs."""
    from portal.slurm.parse import parse_squeue

    soon = (datetime.now() + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S")
    later = (datetime.now() + timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%S")
    pending = "77|alice|PENDING||Resources|N/A|N/A|gres:gpu:1|gpu|1:00:00\n"
    pending += "78|bob|PENDING||Resources|N/A|N/A|gres:gpu:1|gpu|8:00:00"
    running = f"77|alice|RUNNING|n1|None|N/A|{soon}|gres:gpu:1|gpu|1:00:00\n"
    running += f"78|bob|RUNNING|n2|None|N/A|{later}|gres:gpu:1|gpu|8:00:00"
    notices = Notices(sender="portal@portal.localhost")
    notices.follow("77", target())
    bobs = target()
    bobs.user, bobs.address = "bob", "bob@portal.localhost"
    notices.follow("78", bobs)
    sent = []

    async def send(mail):
        sent.append(mail["Subject"])

    notices.send = send
    notices.update(parse_squeue(pending))
    notices.update(parse_squeue(running))
    await asyncio.sleep(0.01)
    assert sorted(sent) == [
        "Your session PyTorch ends in 15 minutes (Slurm job 77)",
        "Your session PyTorch has started (Slurm job 77)",
        "Your session PyTorch has started (Slurm job 78)",
    ]


async def test_a_session_extended_past_its_warning_is_warned_again_before_its_new_end():
    notices = Notices(sender="portal@portal.localhost")
    notices.follow("77", target())
    sent = await collected(
        notices,
        {"77": job("RUNNING", NOW + timedelta(minutes=10))},
        {"77": job("RUNNING", NOW + timedelta(minutes=9))},
        {"77": job("RUNNING", NOW + timedelta(hours=2))},  # extended
        {"77": job("RUNNING", NOW + timedelta(minutes=12))},
    )
    assert [m["Subject"] for m in sent] == [
        "Your session PyTorch ends in 15 minutes (Slurm job 77)"
    ] * 2
