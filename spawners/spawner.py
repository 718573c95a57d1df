"""PortalSpawner: one Slurm job per session, submitted as the user; its
lifecycle (submit, start, poll, stop) and state.

On batchspawner's SlurmSpawner (state, the port report, its traits):

- the user picks a profile, a GPU count (per node), a node count where the
  profile allows several, and hours; the slice (cores, memory, gres,
  partition) is computed by ``portal.core.slice`` from the profile, never
  taken from the user, and validated again at start because the REST API
  skips the form. Jupyter runs on the job's first node; ``srun`` in the
  session reaches every node;
- a profile's container image (``spawners.container``) runs the session's
  launcher under the runtime (ch-run), a user's own image checked as them;
- the batch script comes from a sandboxed template with every value quoted
  (``portal.core.script``), and Slurm's commands run as argument lists with
  timeouts and a minimal environment (``portal.slurm.commands``);
- status comes from one shared poll for all sessions (``spawners.poller``),
  with three states: a failed query is "unknown", never "gone".

Its settings are ``spawners.spawner_settings``; the spawn form is
``spawners.form``, the home page's card ``spawners.card``, the session's
certificate ``spawners.session_tls``, the wait for its answer ``spawners.reach``.
"""

import asyncio
import os
import re
import time
from datetime import datetime

from tornado import web

from portal.contract import SessionEnv
from portal.core.idle import session_idle_seconds
from portal.core.profiles import ProfileError, profile_from_dict
from portal.core.script import render_batch_script
from portal.core.slice import Slice, SliceError
from portal.slurm import choices
from portal.slurm import commands as slurm

from . import form, jupyterhub_patches, metrics, quota, reach
from .card import SessionCard
from .container import ContainerSession
from .form import LinkOptions
from .notices import SessionNotices
from .session_tls import SessionCerts
from .spawner_settings import PortalSpawnerSettings

STATE_VERSION = 3  # 3: slices over nodes, GPU indices per node


def refusal_text(error):
    """An HTTP 400's message for a refused option: its own, naming the field."""
    return f"{error} (field: {error.field})" if error.field else str(error)


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class PortalSpawner(
    SessionCerts, SessionCard, ContainerSession, SessionNotices, PortalSpawnerSettings
):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.job_slice = None
        self.profile = None
        self.session_tls = None  # {"key", "cert", "ca"}: PEM texts for the next batch script
        self.last_options = None  # the last options that passed validation (kept in the state)
        self.last_end = None  # how the last session ended without a stop (kept until next start)
        self.stop_reason = ""  # "idle": the idle culler asked for the stop (spawners.handlers)
        self.submitted_at = 0.0
        self.gpu_indices = {}  # node -> its GPU indices ("0-1"), from scontrol once running
        self._port_event = None
        self.port_reported = False
        self.timeline = {}  # event -> seconds since start() began (this spawn's; logged once up)
        self._began = 0.0
        self._link_options = None  # a spawn link's values, for the next form render
        self.own_idle_limit = False  # its state names its limit: started since the arbiter

    # -- options ------------------------------------------------------------

    def resolve_options(self, options):
        """(profile, slice) for ``options``, checked against the profiles and the
        user's groups; ProfileError or SliceError with a message for the user."""
        form.check_options(options)
        groups = self.check_account()  # a refused account before the store is read
        return form.resolve(options, self.profiles(), groups)

    def options_from_form(self, formdata):
        """The form's fields, validated; a ValueError re-renders the form with its message."""
        fields = form.form_fields(formdata)
        return form.valid_options(*self.resolve_options(fields), fields)

    def options_from_query(self, query_data):
        """A spawn link (GET /hub/spawn?profile=...&gpus=...) never starts a job
        by itself: its values pre-fill the form, and the user presses Start.
        (JupyterHub renders the form with this exception's message.)"""
        self._link_options = form.link_fields(query_data)
        raise LinkOptions("Check the session below and press Start to launch it.")

    def load_user_options(self, user_options):
        """Validate again at start (the REST API skips the form): HTTP 400
        naming the field when invalid, and the user's saved options are put
        back as they were (the hub saved the refused ones before calling this)."""
        try:
            self.profile, self.job_slice = self.resolve_options(dict(user_options or {}))
        except (ProfileError, SliceError) as e:
            self._restore_last_options()
            metrics.refused("options")
            raise web.HTTPError(400, refusal_text(e)) from None
        self.last_options = form.valid_options(self.profile, self.job_slice, user_options)
        return self.job_slice

    async def apply_options(self, user_options):
        """``load_user_options``, then the check against the site's Slurm as
        the shared poll knows it (``portal.slurm.choices``: the partition,
        GPU model, account, QOS, reservation and node feature): JupyterHub
        calls this before start, for the form, spawn links and the REST API
        alike. A refusal is HTTP 400 naming the field, and changes nothing."""
        previous = self.profile, self.job_slice
        job_slice = self.load_user_options(user_options)
        try:
            self.job_slice = await self.check_site_choices(self.profile, job_slice)
        except SliceError as e:
            self.profile, self.job_slice = previous
            self._restore_last_options()
            metrics.refused("options")
            raise web.HTTPError(400, refusal_text(e)) from None
        return self.job_slice

    async def check_site_choices(self, profile, job_slice):
        """``job_slice`` of ``profile``, its QOS named where Slurm's own
        would refuse it (``choices.complete``); SliceError naming the field
        when the site's Slurm would refuse it or never start it
        (``choices.check``). The catalog of accounts is awaited (2 s at
        most), and the first sinfo, when none was read yet and the slice
        needs them (a choice of the site's, another partition, or no GPU)."""
        poller = self.poller
        chosen = job_slice.choices() or job_slice.partition != profile.partition
        if chosen and not poller.partitions:  # a hub just started: its first sinfo
            await poller.partitions_since(self.form_sinfo_age, timeout=2.0)
        catalog = poller.catalog
        if catalog is None and (chosen or job_slice.cpu_only):
            catalog = await poller.catalog_since(self.catalog_max_age, timeout=2.0)
        groups = self.check_account()
        job_slice = choices.complete(job_slice, catalog, self.user.name)
        choices.check(
            profile, job_slice, poller.partitions, catalog, self.user.name, datetime.now(), groups
        )
        return job_slice

    def site_offer(self, last):
        """The spawn page's site choices of a profile (``choices.offer``)."""
        poller, now = self.poller, datetime.now()
        catalog, name = poller.catalog, self.user.name
        try:
            groups = self.check_account()
        except ProfileError:
            groups = []

        def site(profile):
            found = choices.offer(
                profile, poller.partitions, catalog, name, now, last, self.gpu_memory_gb, groups
            )
            found["quotas"] = quota.page_quotas(self, choices.offered_qos(found))
            return found

        return site

    def _restore_last_options(self):
        orm = self.orm_spawner
        if orm is None or orm.user_options == (self.last_options or {}):
            return
        orm.user_options = dict(self.last_options or {})
        self.user.db.commit()

    async def fresh_options_form(self):
        """The spawn page from an sinfo at most ``form_sinfo_age`` seconds old
        (shared by every page rendered meanwhile, awaited at most 2 s): GPUs
        lost to a node that went down show at once, not after
        ``cluster_interval``; with the GPUs the user's QOS lets them ask
        for still (``spawners.quota``)."""
        await self.poller.partitions_since(self.form_sinfo_age, timeout=2.0)
        try:
            partitions = [p.partition for p in self.offered_profiles()]
        except ProfileError:
            partitions = []  # the page says why
        return self.render_options_form(await quota.form_quotas(self, partitions))

    def render_options_form(self, quotas=None):
        """The spawn page (``spawners.form``) for the profiles this user may run."""
        try:
            offered = self.offered_profiles()
        except ProfileError as e:
            return form.refusal(f"{e}.")
        if not offered:
            return form.refusal("No profile is available to you; ask your admin.")
        poller = self.poller
        if not poller.partitions:
            poller.poke_cluster()  # the page never waits on Slurm; the next render has it
        last = dict(self.orm_spawner.user_options or {}) if self.orm_spawner else {}
        link, self._link_options = self._link_options, None
        naming = self.sessions_per_user if self.sessions_per_user > 1 and not self.name else 0
        return form.render_options_form(
            offered, poller, last, link, self.user.name, quotas, naming,
            site=self.site_offer(link if link is not None else last),
            # only a preset's edit page renders it while this session runs
            main_running=not self.name and bool(self.job_id),
        )  # fmt: skip

    # -- running Slurm's commands ---------------------------------------

    def user_env(self, env):
        entry = self.account()
        env.update(USER=self.user.name, HOME=entry.pw_dir, SHELL=entry.pw_shell)
        env["PATH"] = self.job_path
        return env

    def idle_seconds(self):
        """Seconds idle before this session is stopped (``portal.core.idle``)."""
        profile_minutes = self.profile.idle_minutes if self.profile else 0
        return session_idle_seconds(self.idle_timeout, profile_minutes)

    def get_env(self):
        """The session's environment, as the batch script exports it: the
        hub's variables for the server (its own API token among them) and
        the portal's; nothing of the hub's own environment (``env_keep``)."""
        env = super().get_env()
        profile = self.profile
        told = SessionEnv(  # portal/contract.py: what the session reads back
            self.log_dir, self.warn_minutes, self.activity_interval, self.gpu_busy_percent,
            profile=profile.name if profile else "",
            environment=profile.environment if profile else "",
            slurm_bin_dir=self.slurm_bin_dir,
            prewarm=",".join(self.prewarm_imports.get(profile.environment, [])) if profile else "",
        )  # fmt: skip
        env.update({k: v for k, v in told.to_environ().items() if v})
        if self.activity_interval > 0:
            # the session's own reporter (portal.session.activity) sends what
            # JupyterHub's singleuser server would, and more: that one's
            # reports (one of them at its start, beside the port report and
            # the hub's first check) are off
            env["JUPYTERHUB_ACTIVITY_INTERVAL"] = "0"
        return env

    def cmd_formatted_for_batch(self):
        return [self.batchspawner_singleuser_cmd, *self.cmd, *self.get_args()]

    @property
    def job_log(self):
        return (
            os.path.join(self.account().pw_dir, self.log_dir, f"jupyter-{self.job_id}.log")
            if self.job_id
            else ""
        )

    async def submit_batch_script(self):
        job_slice = self.job_slice or self.load_user_options(self.user_options)
        env = self.get_env()
        bad = sorted(name for name in env if not ENV_NAME_RE.match(name))
        if bad:
            raise web.HTTPError(500, f"Invalid environment variable names: {bad[:5]}")
        home = env["HOME"]
        quota.check_sessions(self)
        try:  # the site's Slurm as the poll knows it now, just before sbatch
            job_slice = self.job_slice = await self.check_site_choices(self.profile, job_slice)
        except SliceError as e:
            raise web.HTTPError(400, refusal_text(e)) from None
        await quota.check(self, job_slice)  # before anything runs as the user
        await self.prepare_notices()
        await self.check_user_image()  # as the user, before anything is submitted
        container, container_env_prefix = self.container_exec(home)
        # The script itself exports the session's environment and opens its
        # log (the user's own folder, made by the job): sbatch runs through
        # sudo with a reset environment, and nothing runs as the user first.
        script = render_batch_script(
            env=env,
            tls=self.session_tls,
            log_dir=os.path.join(home, self.log_dir),
            environment=self.python_env,
            templates=self.templates_dir,
            shared_data=self.shared_data,
            container=container,
            image=self.session_image(),
            container_env_prefix=container_env_prefix,
            cmd=self.cmd_formatted_for_batch(),
        )
        self.session_tls = None  # the key is in the script alone from here
        argv = slurm.sbatch_argv(job_slice, job_name=self.job_name, chdir=home)
        self.log.info("Submitting for %s: %s", self.user.name, job_slice.describe())
        self.log.debug("sbatch for %s: %s", self.user.name, argv)
        try:
            self.job_id = await slurm.submit(
                self.user.name, script, argv, timeout=self.slurm_timeout
            )
            # only a query begun after sbatch returned must list the job
            self.submitted_at = time.monotonic()
        except slurm.SlurmError as e:
            self.log.error("Submission for %s failed: %s", self.user.name, e)
            raise web.HTTPError(
                503, f"The scheduler did not accept the job: {e}. Please try again later."
            ) from None
        self.log.info("Slurm job %s submitted for %s", self.job_id, self.user.name)
        self.record_session_job()
        self.follow_notices()
        return self.job_id

    async def cancel_batch_job(self):
        self.log.info("Cancelling job %s of %s", self.job_id, self.user.name)
        await slurm.cancel(self.user.name, self.job_id, self.job_name, timeout=self.slurm_timeout)

    async def _gpu_indices(self, nodes):
        """The running job's GPU indices on each of its ``nodes`` (one scontrol)."""
        try:
            return await slurm.gpu_indices(self.job_id, nodes, timeout=self.slurm_timeout)
        except slurm.SlurmError:
            return {}

    async def job_end_reason(self):
        """How the job ended, from sacct, as a short phrase (or "")."""
        try:
            return await slurm.end_reason(self.job_id, self.job_name, timeout=self.slurm_timeout)
        except slurm.SlurmError:
            return ""

    # -- the session --------------------------------------------------------

    def _mark(self, event):
        """Record ``event`` in this spawn's timeline (seconds since ``start`` began)."""
        self.timeline[event] = time.monotonic() - self._began

    def report_port(self, port):
        """Called by the port callback (``spawners.handlers``) once per spawn."""
        self._mark("port reported")
        self.port = port
        self.port_reported = True
        if self._port_event:
            self._port_event.set()
        job = self.poller.job(self.job_id) if self.job_id else None
        if not (job and job.running and job.node):
            # find the node now rather than at the next tick; when the poll
            # has seen it, no squeue runs while the hub checks the server
            self.poller.poke()

    async def start(self):
        self._began, began_wall = time.monotonic(), time.time()
        self.timeline = {}
        self.port = 0
        self.port_reported = False
        self.gpu_indices = {}
        self.own_idle_limit = True
        self.last_end = None
        self.stop_reason = ""
        self._port_event = asyncio.Event()
        if self.job_slice is None:
            self.load_user_options(self.user_options)
        await self._submit()
        self._mark("submitted")
        poller = self.poller
        poller.watch(self)
        indices = None  # the GPU indices (one scontrol), asked once the job runs
        try:
            while True:
                job = poller.job(self.job_id)
                running = job and job.running and job.node
                if running and indices is None:
                    self._mark("running seen")  # while Jupyter starts: off its path
                    indices = asyncio.ensure_future(self._gpu_indices(job.nodes))
                if self.port_reported and running:
                    break
                if poller.is_gone(self.job_id, self.submitted_at):
                    await self._job_ended()
                waits = [asyncio.ensure_future(poller.wait_changed(5))]
                if not self.port_reported:
                    waits.append(asyncio.ensure_future(self._port_event.wait()))
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()  # the ones still waiting, also when a stop cancels the spawn
            self.ip = job.node  # the first node, where the batch script runs Jupyter
            await self._wait_answering()
            self._mark("answered")
            self.gpu_indices = await indices
        finally:
            poller.unwatch(self)
            if indices is not None:
                indices.cancel()  # a failed start leaves no scontrol behind
        self._mark("GPU indices")
        self.log.info(
            "Spawn timeline of %s, job %s, began at %.3f: %s",
            self.user.name, self.job_id, began_wall,
            ", ".join(f"{event} {t:.3f} s" for event, t in self.timeline.items()),
        )  # fmt: skip
        metrics.observe_spawn(self)
        self.log.info(
            "Job %s of %s running on %s:%s (nodes %s; GPUs %s)",
            self.job_id, self.user.name, self.ip, self.port, ",".join(job.nodes),
            self.gpu_indices or "none",
        )  # fmt: skip
        return self.ip, self.port

    async def _submit(self):
        """``submit_batch_script``, finished even when a stop cancels the spawn
        meanwhile: sbatch may queue the job all the same, and the hub's stop
        cannot cancel a job whose id it never got. Such a job is cancelled here."""
        submission = asyncio.ensure_future(self.submit_batch_script())
        try:
            await asyncio.shield(submission)
        except asyncio.CancelledError:
            await asyncio.wait([submission])
            if not submission.cancelled() and not submission.exception():
                self.job_id = submission.result()  # even if the hub's stop cleared the state
                self.log.info(
                    "Spawn of %s stopped while job %s was submitted: cancelling it",
                    self.user.name, self.job_id,
                )  # fmt: skip
                await self.stop(now=True)
                self.clear_state()
            raise

    async def _wait_answering(self):
        """Wait for Jupyter's first HTTP answer, trying every ``answer_interval``
        (``spawners.reach``): a node the hub cannot reach for
        ``unreachable_timeout`` ends the spawn with an error, rather than a
        wait of ``http_timeout``."""
        base = self.server.base_url if self.server else self.user.url
        context = self.hub_ssl_context()
        url = f"{'https' if context else 'http'}://{self.ip}:{self.port}{base}api"
        target = reach.Target(self.job_id, self.user.name, self.ip, self.port)
        self.poller.watch(self)  # a job that ends meanwhile is noticed at the active rate
        try:
            answered = await reach.wait_answering(
                target,
                url,
                context,
                timeout=self.http_timeout,
                interval=self.answer_interval,
                unreachable_timeout=self.unreachable_timeout,
                log=self.log,
                check_job=self._check_job,
            )
        finally:
            self.poller.unwatch(self)
        if answered is None:
            raise TimeoutError(
                f"Jupyter of job {self.job_id} on {self.ip} did not answer at port {self.port} "
                f"within {self.http_timeout:.0f} s. Its log: {self.job_log}"
            )
        if self.server is not None:  # JupyterHub's own check takes this answer
            jupyterhub_patches.note_answer(self.server, url, answered)

    async def _check_job(self):
        """Raise, with what sacct says, when the job ended before Jupyter answered."""
        if self.poller.is_gone(self.job_id, self.submitted_at):
            await self._job_ended()

    async def _job_ended(self):
        reason = await self.job_end_reason()
        log_path = self.job_log
        self._forget_job()
        raise RuntimeError(
            "Your Slurm job ended before Jupyter started"
            + (f" ({reason})" if reason else "")
            + f". Its log: {log_path}"
        )

    async def poll(self):
        """None while the job is listed (or Slurm does not answer), 1 once it is gone."""
        if not self.job_id:
            return 0
        poller = self.poller
        # the shared loop keeps the snapshot fresh; a stale one (the sweep at hub
        # start) is refreshed once for all spawners
        await poller.snapshot_since(time.monotonic() - 2 * poller.interval)
        if poller.is_gone(self.job_id, self.submitted_at):
            await self._record_end()
            self._forget_job()
            return 1
        return None  # listed, or Slurm did not answer: kept as last seen

    def start_polling(self):
        """The hub's periodic poll, and a call as soon as the shared squeue finds
        the job gone (a scancel, the time limit, a node failure): the hub shows
        the server stopped within one squeue interval, not one plus a poll."""
        super().start_polling()
        if self.job_id and self._poll_callback:
            self.poller.follow(self.job_id, self.submitted_at, self.poll_and_notify)

    def stop_polling(self):
        super().stop_polling()
        if self.job_id:
            self.poller.unfollow(self.job_id)

    async def stop(self, now=False):
        reason, self.stop_reason = self.stop_reason, ""
        if not self.job_id:
            return
        if reason == "idle":
            self._record_idle_end()
        self.unfollow_notices()
        try:
            await self.cancel_batch_job()
        except slurm.SlurmError as e:
            self.log.error("scancel of job %s failed: %s", self.job_id, e)
        if now:
            return
        poller = self.poller
        asked = time.monotonic()
        poller.watch(self)
        try:
            for _ in range(20):
                await poller.snapshot_since(asked)
                if poller.is_gone(self.job_id, asked):
                    return
                await poller.wait_changed(1)
        finally:
            poller.unwatch(self)
        self.log.warning("Job %s of %s still listed after scancel", self.job_id, self.user.name)

    async def progress(self):
        poller = self.poller
        sent = None
        while True:
            message = self._progress_message(poller)
            notice = self.started_notice()  # a queued job started: the page's notification
            if notice:
                message = {**message, "portal_notice": notice}
            if message and message != sent:
                sent = message
                yield message
            if self.port_reported and self.ip:
                return
            await poller.wait_changed(2)

    # -- state -------------------------------------------------------------

    def get_state(self):
        state = super().get_state()
        state["version"] = STATE_VERSION
        if self.job_slice:
            state["slice"] = self.job_slice.__dict__
        if self.profile:
            state["profile"] = self.profile.to_dict()
        if self.gpu_indices:
            state["gpu_indices"] = self.gpu_indices
        if self.last_options:
            state["last_options"] = self.last_options
        if self.last_end:
            state["last_end"] = self.last_end
        if self.idle_timeout and self.job_slice and self.own_idle_limit:  # portal.core.idle
            state["idle_seconds"] = self.idle_seconds()
        state.update(self.notices_state())
        return state

    def load_state(self, state):
        super().load_state(state)
        try:
            if state.get("slice"):
                self.job_slice = Slice(**state["slice"])
            if state.get("profile"):
                # the revision this session started with; never re-applied to a new spawn
                self.profile = profile_from_dict(state["profile"])
        except (TypeError, ValueError) as e:
            self.log.warning("Ignoring saved session details of another version: %s", e)
        indices = state.get("gpu_indices") or {}  # a string: one node's, before multi-node
        self.gpu_indices = indices if isinstance(indices, dict) else {"": str(indices)}
        if isinstance(state.get("last_options"), dict):
            self.last_options = state["last_options"]
        if isinstance(state.get("last_end"), dict):
            self.last_end = state["last_end"]
        # a job from before the culler's arbiter shifts its reported activity itself
        self.own_idle_limit = "idle_seconds" in state
        self.load_notices_state(state)

    def _forget_job(self):
        """clear_state for a job that ended by itself, but the server's API
        token stays: JupyterHub's stop, which follows, reads it before it polls
        and deletes it, then clears the state. Cleared here, the token (with
        access to all of the user's future servers) was never deleted."""
        token = self.api_token
        self.clear_state()
        self.api_token = token

    def clear_state(self):
        super().clear_state()
        self.notice_address, self.notice_following = "", False
        self.job_slice = None
        self.profile = None
        self.gpu_indices = {}
        self.port_reported = False
