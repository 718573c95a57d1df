"""The tests' own hub, beside the demo's, and the deploy scripts that run the cluster.

$PORTAL_TEST_PORT (default 18000) moves the test hub to other ports (PORT,
PORT+81 for its API, PORT+1 for the proxy's, PORT+2 for the portal service),
its own state folder and Slurm job name, so that two runs of the tests can
share the cluster.
"""

import os
import subprocess
from pathlib import Path

from tests.support import REPO
from tests.support.hubsettings import (
    DISTRIBUTED_PROFILE,
    IMAGE_PROFILES,
    PYTORCH_PROFILE,
    SITE_PROFILE,
    hub_settings,
)

PORT = int(os.environ.get("PORTAL_TEST_PORT", "18000"))
_SUFFIX = "" if PORT == 18000 else f"-{PORT}"
STATE = Path(f"/var/lib/portal/test-hub{_SUFFIX}")
JOB_NAME = f"portal-test{_SUFFIX}"
# The test hub's settings: where its account (not root only) can read them.
SETTINGS_FILE = Path(f"/var/lib/portal/test-settings{_SUFFIX}.toml")
# Spawner.poll_interval and the shared squeue's interval of the test hub, in seconds.
POLL_INTERVAL = 2.0
# The test hub's login throttle: the default count, a short lockout and short
# delays, so that a test that locks a name out waits seconds, not minutes.
LOGIN_THROTTLE = """
[ldap]
login_failures_allowed = 5
login_lockout_seconds = 10.0
login_failure_delay_seconds = 0.2
"""

# The hub's samples of the sessions' GPU use and its check of the proxy's
# routes, every few seconds.
GPU_SAMPLE_SECONDS = 2.0
ROUTE_CHECK_SECONDS = 2.0
GPU_SAMPLES = f"""
[metrics]
gpu_sample_seconds = {GPU_SAMPLE_SECONDS}
route_check_seconds = {ROUTE_CHECK_SECONDS}
"""

TEST_SETTINGS = (
    hub_settings(PORT, STATE, JOB_NAME)
    + f"""poll_interval = {POLL_INTERVAL}
cluster_interval = {POLL_INTERVAL}
"""
    + LOGIN_THROTTLE
    + GPU_SAMPLES
    + PYTORCH_PROFILE
    + """
[[profiles]]
name = "tensorflow"
display_name = "TensorFlow"
environment = "tensorflow"
max_gpus = 2

[[profiles]]
name = "vision"
display_name = "Vision team"
environment = "pytorch"
max_gpus = 2
default_hours = 2
max_hours = 4
groups = ["vision"]
"""
    + DISTRIBUTED_PROFILE
    + IMAGE_PROFILES
    + SITE_PROFILE
)


def deploy(*args, env=None, check=True):
    """Run ``deploy/ARGS[0] ARGS[1:]`` (e.g. ``deploy("slurm.sh", "start")``), output captured."""
    return subprocess.run(
        ["bash", str(REPO / "deploy" / args[0]), *args[1:]],
        env=env,
        check=check,
        capture_output=True,
        text=True,
    )
