"""PortalSpawner: one single-node Slurm job per session, submitted as the user.

Built on batchspawner's SlurmSpawner (its start/stop loop, state and the
batchspawner-singleuser port report); what changes is how the job is made:
the resources come from a validated GPU slice (``spawners.slice``), the batch
script from a sandboxed template with every value quoted (``spawners.script``)
and Slurm's commands run as argument lists with timeouts (``spawners.slurm``).
"""

import os
import pwd

from batchspawner import JobStatus, SlurmSpawner
from tornado import web
from traitlets import Float, Integer, Unicode, default

from . import slurm
from .script import render_batch_script
from .slice import Slice, SliceError, make_slice

STATE_VERSION = 1


class PortalSpawner(SlurmSpawner):
    partition = Unicode(
        "gpu",
        help="""Slurm partition of the sessions. Default ``gpu``. Example: ``"a100"``.""",
    ).tag(config=True)

    max_gpus = Integer(
        4,
        help="""Most GPUs one session may ask for (one node's worth at most). Default 4.""",
    ).tag(config=True)

    cores_per_gpu = Integer(
        8,
        help="""CPU cores allocated per GPU of the slice: N GPUs get N times this
        many cores (``--cpus-per-task``). Default 8.""",
    ).tag(config=True)

    mem_per_gpu_gb = Integer(
        48,
        help="""Memory in GB allocated per GPU of the slice: N GPUs get N times this
        (``--mem=NG``). Default 48.""",
    ).tag(config=True)

    default_hours = Integer(
        8,
        help="""Time limit of a session, in hours, unless the user asks for another. Default 8.""",
    ).tag(config=True)

    max_hours = Integer(
        24,
        help="""Longest time limit a user may ask for, in hours. Default 24.""",
    ).tag(config=True)

    python_env = Unicode(
        "/opt/portal/envs/jupyter",
        help="""Python environment (a venv) activated in the job; it provides
        jupyterhub-singleuser and batchspawner-singleuser. It must be readable
        by the users on the nodes. Default ``/opt/portal/envs/jupyter``.""",
    ).tag(config=True)

    job_name = Unicode(
        "portal-jupyter",
        help="""Slurm job name of the sessions (``squeue -n`` finds them). Default ``portal-jupyter``.""",
    ).tag(config=True)

    log_dir = Unicode(
        ".portal/logs",
        help="""Folder of the job logs (``jupyter-JOBID.log``), relative to the
        user's home, so the user can open them. Default ``.portal/logs``.""",
    ).tag(config=True)

    slurm_timeout = Float(
        20,
        help="""Seconds a Slurm command (sbatch, squeue, scancel) may take before it
        counts as failed. Default 20.""",
    ).tag(config=True)

    job_path = Unicode(
        "/usr/local/bin:/usr/bin:/bin",
        help="""PATH of the job before the environment is activated. Default
        ``/usr/local/bin:/usr/bin:/bin``.""",
    ).tag(config=True)

    @default("batchspawner_singleuser_cmd")
    def _singleuser_wrapper_default(self):
        return os.path.join(self.python_env, "bin", "batchspawner-singleuser")

    @default("cmd")
    def _cmd_default(self):
        return [os.path.join(self.python_env, "bin", "jupyterhub-singleuser")]

    @default("apply_user_options")
    def _apply_user_options_default(self):
        # JupyterHub calls this before start, for the form and the REST API alike.
        return lambda spawner, user_options: spawner.load_user_options(user_options)

    job_slice = None

    # -- options ---------------------------------------------------------

    def load_user_options(self, user_options):
        """Validate ``user_options`` and set ``self.job_slice``; HTTP 400 when invalid."""
        options = dict(user_options or {})
        unknown = sorted(set(options) - {"gpus", "hours"})
        if unknown:
            raise web.HTTPError(400, f"Unknown option(s): {', '.join(unknown)}")
        try:
            self.job_slice = make_slice(
                options.get("gpus", 1),
                options.get("hours", self.default_hours),
                partition=self.partition,
                max_gpus=self.max_gpus,
                cores_per_gpu=self.cores_per_gpu,
                mem_per_gpu_gb=self.mem_per_gpu_gb,
                max_hours=self.max_hours,
            )
        except SliceError as e:
            raise web.HTTPError(400, str(e)) from None
        return self.job_slice

    # -- running Slurm's commands ---------------------------------------

    def _as_user(self, argv):
        return ["sudo", "-E", "-u", self.user.name, "--", *argv]

    def user_env(self, env):
        try:
            entry = pwd.getpwnam(self.user.name)
        except KeyError:
            raise web.HTTPError(
                500,
                f"The account {self.user.name} is not known as a Unix user on the hub: "
                "check that LDAP users resolve (getent passwd).",
            ) from None
        env.update(USER=self.user.name, HOME=entry.pw_dir, SHELL=entry.pw_shell)
        env["PATH"] = self.job_path
        return env

    def cmd_formatted_for_batch(self):
        return [self.batchspawner_singleuser_cmd, *self.cmd, *self.get_args()]

    async def submit_batch_script(self):
        job_slice = self.job_slice or self.load_user_options(self.user_options)
        env = self.get_env()
        home = env["HOME"]
        log_dir = os.path.join(home, self.log_dir)
        script = render_batch_script(
            username=self.user.name,
            summary=job_slice.describe(),
            environment=self.python_env,
            cmd=self.cmd_formatted_for_batch(),
        )
        await slurm.run(self._as_user(["mkdir", "-p", log_dir]), timeout=self.slurm_timeout)
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={self.job_name}",
            f"--chdir={home}",
            f"--output={log_dir}/jupyter-%j.log",
            f"--export={','.join(sorted(env))}",
            *job_slice.sbatch_args(),
        ]
        self.log.info("Submitting for %s: %s", self.user.name, job_slice.describe())
        self.log.debug("Batch script for %s:\n%s", self.user.name, script)
        out = await slurm.run(
            self._as_user(argv), input=script, env=env, timeout=self.slurm_timeout
        )
        self.job_id = slurm.parse_job_id(out)
        self.log.info("Slurm job %s submitted for %s", self.job_id, self.user.name)
        return self.job_id

    async def query_job_status(self):
        """RUNNING, PENDING, NOTFOUND, or UNKNOWN when Slurm does not answer.

        A failed query never counts as "job gone" (batchspawner #315, #171).
        """
        if not self.job_id:
            self.job_status = ""
            return JobStatus.NOTFOUND
        argv = ["squeue", "-h", "-j", self.job_id, "-o", "%T %B"]
        try:
            self.job_status = await slurm.run(argv, timeout=self.slurm_timeout)
        except slurm.SlurmError as e:
            if "Invalid job id" in str(e):
                self.job_status = ""
                return JobStatus.NOTFOUND
            self.log.warning("Status of job %s of %s unknown: %s", self.job_id, self.user.name, e)
            return JobStatus.UNKNOWN
        if self.state_isrunning():
            return JobStatus.RUNNING
        if self.state_ispending():
            return JobStatus.PENDING
        return JobStatus.NOTFOUND

    async def cancel_batch_job(self):
        self.log.info("Cancelling job %s of %s", self.job_id, self.user.name)
        await slurm.run(self._as_user(["scancel", self.job_id]), timeout=self.slurm_timeout)

    # -- state -------------------------------------------------------------

    def get_state(self):
        state = super().get_state()
        state["version"] = STATE_VERSION
        if self.job_slice:
            state["slice"] = self.job_slice.__dict__
        return state

    def load_state(self, state):
        super().load_state(state)
        if state.get("slice"):
            try:
                self.job_slice = Slice(**state["slice"])
            except TypeError:
                self.log.warning("Ignoring a saved slice of another version: %s", state["slice"])

    def clear_state(self):
        super().clear_state()
        self.job_slice = None
