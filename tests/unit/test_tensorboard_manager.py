"""TensorBoardManager's settings and the life of its processes.

The processes here are a stand-in for TensorBoard (a Python one-liner that
listens on the Unix socket), so no TensorBoard is needed: what is tested is
when they start, are reused, found gone, culled and stopped.
"""

import asyncio
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest
import pytest_asyncio
from traitlets.config import Config

from portal.session.tensorboard.manager import TensorBoardManager, TensorBoardStartError

# Listens on the socket named by argv[1] after argv[2] seconds; argv[3]: exit code instead.
FAKE = """
import socket, sys, time
time.sleep(float(sys.argv[2]))
if sys.argv[3] != "-":
    print("fake TensorBoard: cannot read the log folder", flush=True)
    sys.exit(int(sys.argv[3]))
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen()
time.sleep(600)
"""


class FakeManager(TensorBoardManager):
    delay = 0.0
    exit_code = "-"

    def command(self, tb):
        return [sys.executable, "-c", FAKE, tb.socket_path, str(self.delay), self.exit_code]


@pytest.fixture
def home(tmp_path):
    for name in ("logs", "other"):
        (tmp_path / "home" / name).mkdir(parents=True)
    return tmp_path / "home"


@pytest_asyncio.fixture(loop_scope="function")
async def manager(home, tmp_path):
    (tmp_path / "run").mkdir(mode=0o700)
    manager = FakeManager(
        root_dir=str(home), base_url="/user/alice/", runtime_dir=str(tmp_path / "run")
    )
    yield manager
    await manager.stop_all()


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- settings --------------------------------------------------------------


def test_defaults():
    manager = TensorBoardManager()
    assert manager.idle_timeout == 3600
    assert manager.cull_interval == 60
    assert manager.start_timeout == 60


def test_idle_timeout_from_config_sets_the_cull_interval():
    config = Config()
    config.TensorBoardManager.idle_timeout = 20
    manager = TensorBoardManager(config=config)
    assert manager.idle_timeout == 20
    assert manager.cull_interval == 5


def test_negative_idle_timeout_is_refused():
    config = Config()
    config.TensorBoardManager.idle_timeout = -1
    with pytest.raises(Exception, match="idle_timeout must be 0"):
        TensorBoardManager(config=config)


def test_runtime_dir_is_xdg_only_when_private(monkeypatch):
    private = Path(tempfile.mkdtemp(dir="/tmp"))  # short, as sockets need
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(private))
    assert TensorBoardManager().runtime_dir == str(private)
    private.chmod(0o755)
    assert TensorBoardManager().runtime_dir != str(private)
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert TensorBoardManager().runtime_dir == tempfile.gettempdir()
    private.rmdir()


def test_url_is_under_the_servers_base_url():
    manager = TensorBoardManager(base_url="/user/alice/")
    assert manager.url_of("0123456789ab") == "/user/alice/portal/tensorboard/0123456789ab/"


# -- processes -------------------------------------------------------------


async def test_one_process_per_folder_in_a_private_folder(manager, home):
    tb, created = await manager.start(str(home / "logs"))
    assert created
    assert tb.logdir == "logs"
    assert tb.url == f"/user/alice/portal/tensorboard/{tb.id}/"
    socket_dir = os.path.dirname(tb.socket_path)
    st = os.stat(socket_dir)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert stat.S_ISSOCK(os.stat(tb.socket_path).st_mode)

    again, created = await manager.start(str(home / "logs"))
    assert again is tb and not created
    other, created = await manager.start(str(home / "other"))
    assert created and other.id != tb.id
    assert [t.id for t in manager.list()] == [tb.id, other.id]
    assert set(tb.model()) == {"id", "logdir", "url", "started", "last_activity"}


async def test_concurrent_starts_share_one_process(manager, home):
    manager.delay = 0.5
    results = await asyncio.gather(*(manager.start(str(home / "logs")) for _ in range(3)))
    assert len({id(tb) for tb, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, True]


async def test_stop_ends_the_process_and_removes_its_socket(manager, home):
    tb, _ = await manager.start(str(home / "logs"))
    pid = tb.process.pid
    assert await manager.stop(tb.id)
    assert not alive(pid)
    assert not os.path.exists(tb.socket_path)
    assert manager.list() == []
    assert not await manager.stop(tb.id)


async def test_stop_all_removes_the_socket_folder(manager, home):
    tb, _ = await manager.start(str(home / "logs"))
    socket_dir = os.path.dirname(tb.socket_path)
    await manager.stop_all()
    assert not os.path.exists(socket_dir)
    assert not alive(tb.process.pid)


async def test_a_process_that_exits_fails_the_start_with_its_output(manager, home):
    manager.exit_code = "3"
    with pytest.raises(TensorBoardStartError, match="cannot read the log folder") as e:
        await manager.start(str(home / "logs"))
    assert e.value.status == 502
    assert manager.list() == []


async def test_a_silent_process_times_out_and_is_stopped(manager, home):
    manager.delay = 30
    manager.start_timeout = 0.5
    with pytest.raises(TensorBoardStartError, match="did not answer within 0.5 s") as e:
        await manager.start(str(home / "logs"))
    assert e.value.status == 504
    assert manager.tensorboards == {}


async def test_idle_tensorboards_are_stopped(manager, home):
    manager.idle_timeout = 1
    manager.cull_interval = 0.2
    idle, _ = await manager.start(str(home / "logs"))
    busy, _ = await manager.start(str(home / "other"))
    for _ in range(8):
        busy.touch()
        await asyncio.sleep(0.25)
    assert [tb.id for tb in manager.list()] == [busy.id]
    assert not alive(idle.process.pid)


async def test_an_exited_tensorboard_is_started_again(manager, home):
    tb, _ = await manager.start(str(home / "logs"))
    tb.process.kill()
    await tb.process.wait()
    assert manager.list() == []
    again, created = await manager.start(str(home / "logs"))
    assert created and again is not tb and again.id == tb.id


async def test_a_missing_runtime_dir_fails_the_start_with_the_setting_to_check(home):
    manager = FakeManager(root_dir=str(home), runtime_dir="/nonexistent-portal-run")
    with pytest.raises(TensorBoardStartError, match="TensorBoardManager.runtime_dir"):
        await manager.start(str(home / "logs"))
    assert manager.tensorboards == {}
