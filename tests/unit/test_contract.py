"""The hub-session contract (portal/contract.py): what the hub exports is
what the session reads, each default once, from the site's defaults."""

from portal.contract import TENSORBOARD_API, SessionEnv
from portal.session import jobend
from portal.session.tensorboard import magic
from portal.settings import defaults


def test_what_the_hub_exports_the_session_reads_back():
    sent = SessionEnv(
        log_dir=".logs", warn_minutes=30, activity_seconds=20.0, gpu_busy_percent=5.5,
        profile="vision", environment="pytorch", slurm_bin_dir="/opt/slurm/bin",
        prewarm="torch,matplotlib.pyplot",
    )  # fmt: skip
    assert SessionEnv.from_environ(sent.to_environ()) == sent
    assert set(sent.to_environ()) == {
        "PORTAL_LOG_DIR", "PORTAL_WARN_MINUTES", "PORTAL_ACTIVITY_SECONDS",
        "PORTAL_GPU_BUSY_PERCENT", "PORTAL_PROFILE", "PORTAL_ENVIRONMENT",
        "PORTAL_SLURM_BIN_DIR", "PORTAL_PREWARM",
    }  # fmt: skip


def test_the_defaults_are_the_sites():
    site = defaults()
    missing = SessionEnv.from_environ({})
    assert missing == SessionEnv.site_defaults()
    assert (missing.log_dir, missing.warn_minutes) == (
        site["slurm"]["log_dir"], site["slurm"]["warn_minutes"],
    )  # fmt: skip
    assert (missing.activity_seconds, missing.gpu_busy_percent) == (
        site["culling"]["activity_seconds"], site["culling"]["gpu_busy_percent"],
    )  # fmt: skip


def test_the_sessions_readers_use_the_contract():
    assert jobend.warn_minutes({"PORTAL_WARN_MINUTES": "7"}) == 7
    assert jobend.warn_minutes({}) == defaults()["slurm"]["warn_minutes"]
    assert jobend.slurm_bin_dir({"PORTAL_SLURM_BIN_DIR": "/opt/slurm/bin"}) == "/opt/slurm/bin"
    assert jobend.slurm_bin_dir({}) == defaults()["slurm"]["bin_dir"] == "/usr/bin"


def test_the_magic_copied_alone_names_the_same_variable():
    assert magic.API_ENV == TENSORBOARD_API
