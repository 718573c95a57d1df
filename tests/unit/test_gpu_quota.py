"""The QOS's GPUs per user on the spawn page and at submission (issue 26),
without Slurm: its runner replaced as in test_spawner_lifecycle. The real
QOS is exercised by tests/integration/test_slurm_limits.py."""

import html
import json
import re

import pytest
from tornado import web

from portal.slurm import commands
from tests.unit.test_spawner_lifecycle import runner, spawner, submitted  # noqa: F401 (a fixture)


def quota_of(page):
    data = re.search(r'id="portal-profiles">(.*?)</script>', page, re.S).group(1)
    profile = json.loads(html.unescape(data))[0]
    line = re.search(r'id="gpu-quota" role="status">([^<]*)</p>', page).group(1)
    return profile["quota_room"], html.unescape(line)


async def test_the_spawn_page_says_what_the_user_holds_and_may_still_ask_for(runner):  # noqa: F811
    runner.gpus_held = 3
    s = spawner("unit-quota-page")
    room, line = quota_of(await s.fresh_options_form())
    assert room == 1
    assert line == (
        "You hold 3 of the 4 GPUs that QOS portal lets you use at once: you may ask for 1 more."
    )


async def test_a_request_past_the_qos_is_refused_before_anything_is_submitted(runner):  # noqa: F811
    runner.gpus_held = 3
    s = spawner("unit-quota-refused")
    s.user_options = {"gpus": "2", "hours": "1"}
    with pytest.raises(web.HTTPError) as refused:
        await s.start()
    assert refused.value.status_code == 400
    assert refused.value.log_message.startswith("2 GPUs is more than you may ask for now")
    assert "Ask for at most 1" in refused.value.log_message
    assert not submitted(runner)
    # read anew at submission: the usage just before sbatch, not the page's
    assert [commands.command("scontrol"), "show", "assoc_mgr", "flags=qos"] in runner.calls


async def test_a_request_within_the_qos_is_submitted(runner):  # noqa: F811
    runner.gpus_held = 3
    s = spawner("unit-quota-fits")
    s.user_options = {"gpus": "1", "hours": "1"}
    await s.submit_batch_script()
    assert s.job_id == "4242"


async def test_an_unreadable_qos_checks_nothing_and_leaves_it_to_slurm(runner, monkeypatch):  # noqa: F811
    async def failing(*args, **kwargs):
        raise commands.SlurmError("sacctmgr failed: slurmdbd is down")

    monkeypatch.setattr(commands, "default_qos", failing)
    runner.gpus_held = 4
    s = spawner("unit-quota-unknown")
    room, line = quota_of(await s.fresh_options_form())
    assert room is None and line == ""
    s.user_options = {"gpus": "1", "hours": "1"}
    await s.submit_batch_script()
    assert s.job_id == "4242"


async def test_the_gpus_of_sessions_still_starting_count_too(runner):  # noqa: F811
    """A review got 6 GPUs past a limit of 4 with parallel requests (each
    checked before the others' jobs ran): a session of the user's whose job
    is not running yet takes its GPUs in the check too."""
    from types import SimpleNamespace

    from portal.core.slice import make_slice

    two = make_slice(2, 1, partition="gpu", max_gpus=4, cores_per_gpu=8, mem_per_gpu_gb=48,
                     max_hours=24)  # fmt: skip
    runner.gpus_held = 1
    s = spawner("unit-quota-starting")
    starting = SimpleNamespace(active=True, job_slice=two, job_id="", name="one")
    s.user.spawners = {"one": starting, "": s}
    s.user_options = {"gpus": "2", "hours": "1"}
    with pytest.raises(web.HTTPError) as refused:
        await s.submit_batch_script()
    assert (
        "you hold 1 of the 4 GPUs that QOS portal lets you use at once, and 2 more in "
        "sessions starting. Ask for at most 1" in refused.value.log_message
    )
    assert not submitted(runner)
    s.user_options = {"gpus": "1", "hours": "1"}
    s.job_slice = None
    await s.submit_batch_script()  # 1 + 2 + 1: within the 4
    assert s.job_id == "4242"


async def test_a_users_qos_is_read_once_at_a_time_and_an_old_one_answers_while_read_anew(
    monkeypatch,
):
    import asyncio
    from types import SimpleNamespace

    from spawners import quota

    asked, answer = [], {"qos": "normal"}

    async def default_qos(username, partition, timeout):
        asked.append((username, partition))
        await asyncio.sleep(0.01)
        return answer["qos"]

    monkeypatch.setattr(commands, "default_qos", default_qos)
    quotas = quota.Quotas(SimpleNamespace(timeout=5))
    quotas.warm("ann", ["gpu", "cpu"])  # at login: read ahead, not awaited
    # a page meanwhile shares the read under way
    assert await quotas.user_qos("ann", "gpu") == "normal"
    await asyncio.sleep(0.05)
    assert sorted(asked) == [("ann", "cpu"), ("ann", "gpu")]
    assert (
        await asyncio.gather(*(quotas.user_qos("ann", "gpu") for _ in range(5))) == ["normal"] * 5
    )
    assert len(asked) == 2  # kept: no read
    # past KEEP_SECONDS: the old answer at once, the new one for the next page
    answer["qos"] = "long"
    qos, when = quotas._user_qos[("ann", "gpu")]
    quotas._user_qos[("ann", "gpu")] = (qos, when - quota.KEEP_SECONDS - 1)
    assert await quotas.user_qos("ann", "gpu") == "normal"
    await asyncio.sleep(0.05)
    assert await quotas.user_qos("ann", "gpu") == "long" and len(asked) == 3
