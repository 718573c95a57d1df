"""``bench.timeline``: one spawn's events from the hub's log and the job's,
as seconds since the spawner's start began, JupyterHub's own steps after
it (its check that the server is up, the proxy's route) included."""

from datetime import datetime

from bench import timeline

BEGAN = datetime(2026, 11, 28, 15, 9, 20, 594000).timestamp()


def stamp(seconds):
    return datetime.fromtimestamp(BEGAN + seconds).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def test_the_hub_s_and_the_job_s_marks_on_one_clock(tmp_path):
    hub_log = tmp_path / "jupyterhub.log"
    hub_log.write_text(
        f"[I {stamp(2.1)} JupyterHub spawner:388] Spawn timeline of alice, job 661, began at "
        f"{BEGAN:.3f}: submitted 0.041 s, port reported 1.967 s, answered 2.033 s\n"
        f"[I {stamp(2.2)} JupyterHub base:1192] User bob took 1.000 seconds to start\n"
        f"[I {stamp(2.3)} JupyterHub base:1192] User alice took 2.164 seconds to start\n"
        f"[I {stamp(2.4)} JupyterHub proxy:335] Adding user alice to proxy /user/alice/ => x\n"
        f"[I {stamp(2.5)} JupyterHub log:192] 201 POST /hub/api/users/bob/server "
        f"(bob@127.0.0.1) 900.00ms\n"
        f"[I {stamp(2.5)} JupyterHub log:192] 201 POST /hub/api/users/alice/server "
        f"(alice@127.0.0.1) 2580.00ms\n"
    )
    logs = tmp_path / "home" / ".portal" / "logs"
    logs.mkdir(parents=True)
    (logs / "jupyter-661.log").write_text(
        f"portal: timeline exec {BEGAN + 0.5:.6f}\n"
        f"[I {stamp(1.9)} ServerApp] Jupyter Server 2.21.1 is running at:\n"
    )
    marks = timeline.spawn_timeline(hub_log, tmp_path / "home", name="alice")
    assert {k: round(v, 2) for k, v in marks.items()} == {
        "submitted": 0.04, "port reported": 1.97, "answered": 2.03, "exec": 0.5,
        "jupyter listening": 1.9, "hub saw it up": 2.3, "route asked": 2.4, "request": -0.08,
    }  # fmt: skip
    assert timeline.describe(marks).startswith(
        "request -0.08, submitted 0.04, exec 0.50, port reported 1.97"
    )
    assert timeline.spawn_timeline(hub_log, tmp_path / "home", name="carol") == {}
