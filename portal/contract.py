"""The hub-session contract: what the hub tells a session, and how the session reads it.

The hub (``PortalSpawner.get_env``) exports these variables into the Slurm
job through the batch script; the session's code (``portal.session``: the
job log, the time left, the activity reporter) reads them with
``SessionEnv.from_environ``. Each default is the site's default
(deploy/portal.toml, through ``portal.settings.defaults``); a session reads
it only when the variable is missing or not a number (a server started
without the portal's hub). Besides these, the session reads JupyterHub's own
variables (``JUPYTERHUB_*``) and Slurm's (``SLURM_JOB_ID``).

================================  ======================================  ==================
variable                          what                                    field
================================  ======================================  ==================
``PORTAL_LOG_DIR``                the job logs' folder, relative to home  ``log_dir``
``PORTAL_WARN_MINUTES``           minutes before the end JupyterLab warns ``warn_minutes``
``PORTAL_ACTIVITY_SECONDS``       seconds between activity reports (0:    ``activity_seconds``
                                  none)
``PORTAL_GPU_BUSY_PERCENT``       a GPU this busy keeps the session on    ``gpu_busy_percent``
``PORTAL_PROFILE``                the profile's name                      ``profile``
``PORTAL_ENVIRONMENT``            the profile's environment               ``environment``
``PORTAL_SLURM_BIN_DIR``          the folder of Slurm's commands (the     ``slurm_bin_dir``
                                  hub's [slurm] bin_dir)
``PORTAL_PREWARM``                the modules the pre-warmed kernel of    ``prewarm``
                                  the environment imports, comma-
                                  separated ([session] prewarm_imports;
                                  empty: no pre-warmed kernel)
================================  ======================================  ==================

Inside the session, the server extension tells its kernels where its
TensorBoard API is: ``TENSORBOARD_API`` (``PORTAL_TENSORBOARD_API``).
"""

import os
from dataclasses import asdict, dataclass, fields

from portal.settings import defaults

TENSORBOARD_API = "PORTAL_TENSORBOARD_API"
PREFIX = "PORTAL_"


def _site():
    site = defaults()
    return {
        "log_dir": site["slurm"]["log_dir"],
        "warn_minutes": site["slurm"]["warn_minutes"],
        "activity_seconds": float(site["culling"]["activity_seconds"]),
        "gpu_busy_percent": float(site["culling"]["gpu_busy_percent"]),
        "profile": "",
        "environment": "",
        "slurm_bin_dir": site["slurm"]["bin_dir"],
        "prewarm": "",
    }


@dataclass(frozen=True)
class SessionEnv:
    """What the hub tells one session (see the table above)."""

    log_dir: str
    warn_minutes: int
    activity_seconds: float
    gpu_busy_percent: float
    profile: str
    environment: str
    slurm_bin_dir: str
    prewarm: str = ""

    @staticmethod
    def variable(field):
        """The environment variable of ``field``.

        >>> SessionEnv.variable("warn_minutes")
        'PORTAL_WARN_MINUTES'
        """
        return PREFIX + field.upper()

    @classmethod
    def site_defaults(cls, **values):
        """The site's defaults, with ``values`` over them."""
        return cls(**{**_site(), **values})

    def to_environ(self):
        """The variables, as the batch script exports them (text).

        >>> env = SessionEnv.site_defaults(warn_minutes=30, gpu_busy_percent=5.0)
        >>> env.to_environ()["PORTAL_WARN_MINUTES"], env.to_environ()["PORTAL_GPU_BUSY_PERCENT"]
        ('30', '5')
        """
        return {
            self.variable(k): f"{v:g}" if isinstance(v, float) else str(v)
            for k, v in asdict(self).items()
        }

    @classmethod
    def from_environ(cls, environ=None):
        """What the hub exported into ``environ`` (os.environ by default); a
        missing variable, or a number that is not one (a whole number: not
        ASCII digits), takes the site's default.

        >>> e = SessionEnv.from_environ({"PORTAL_WARN_MINUTES": "٣",
        ...                              "PORTAL_GPU_BUSY_PERCENT": "0"})
        >>> e.warn_minutes == SessionEnv.site_defaults().warn_minutes, e.gpu_busy_percent
        (True, 0.0)
        """
        environ = os.environ if environ is None else environ
        site, values = _site(), {}
        for field in fields(cls):
            default = site[field.name]
            text = environ.get(cls.variable(field.name), "").strip()
            if isinstance(default, str):
                values[field.name] = text or default
            elif isinstance(default, int):
                values[field.name] = int(text) if text.isascii() and text.isdigit() else default
            else:
                values[field.name] = _float(text, default)
        return cls(**values)


def _float(text, default):
    try:
        value = float(text)
    except ValueError:
        return default
    return value if value == value and abs(value) != float("inf") else default
