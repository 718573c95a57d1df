"""PortalSpawner's settings: every ``c.PortalSpawner`` trait with its help
string (the reference of a site's configuration), the defaults it gives
JupyterHub's and batchspawner's own traits, the refusal of batchspawner's
settings it does not use, and what the settings give: the profiles, the
shared Slurm poll, and the user's account checked against them.

``spawners.spawner.PortalSpawner`` is this class with the session's
lifecycle and state; sites configure it as ``c.PortalSpawner``, whose
traits these are.
"""

import os

from batchspawner import SlurmSpawner
from traitlets import Any, Dict, Float, Integer, List, Unicode, default

from portal import settings as site_settings
from portal.core.profiles import SLICE_FIELDS, Profile, ProfileError, profile_from_dict
from portal.settings import defaults

from . import accounts
from .poller import SlurmPoller
from .unused_settings import refuse_unused_settings

SLURM, HUB, ENVS = defaults()["slurm"], defaults()["hub"], defaults()["envs"]
CONTAINERS = defaults()["containers"]
CULLING = defaults()["culling"]


class PortalSpawnerSettings(SlurmSpawner):
    """The settings of ``PortalSpawner`` (configured as ``c.PortalSpawner``)."""

    profile_source = Any(
        help="""A callable returning the current profiles (a list of
        ``portal.core.profiles.Profile`` or dicts). Called at every form render and
        every spawn, so an edited profile applies at the next spawn without a
        restart. Default: one profile built from this spawner's own settings.
        Example: ``spawners.hub_config.settings_profiles``.""",
    ).tag(config=True)

    default_profile = Dict(
        help="""The one profile offered when ``profile_source`` is None: fields
        of ``portal.core.profiles.Profile``; those left out take the defaults of
        deploy/portal.toml [slurm] (partition ``gpu``, 4 GPUs, 8 cores and 48 GB
        per GPU, 8 of at most 24 hours). Example: ``{"name": "a100",
        "display_name": "A100", "environment": "pytorch", "partition": "a100"}``.""",
    ).tag(config=True)

    python_env = Unicode(
        ENVS["jupyter"],
        help="""Python environment (a venv) activated in the job; it provides
        jupyterhub-singleuser and batchspawner-singleuser. It must be readable
        by the users on the nodes. Default ``/opt/portal/envs/jupyter``
        (deploy/portal.toml [envs] jupyter).""",
    ).tag(config=True)

    job_name = Unicode(
        SLURM["job_name"],
        help="""Slurm job name of the sessions (``squeue -n`` finds them). The
        shared poll lists the jobs of this name. Default ``portal-jupyter``.""",
    ).tag(config=True)

    log_dir = Unicode(
        SLURM["log_dir"],
        help="""Folder of the job logs (``jupyter-JOBID.log``), relative to the
        user's home, so the user can open them. Default ``.portal/logs``.""",
    ).tag(config=True)

    slurm_timeout = Float(
        SLURM["command_timeout"],
        help="""Seconds a Slurm command (sbatch, squeue, scancel) may take before it
        counts as failed. Default 20.""",
    ).tag(config=True)

    poll_interval_slurm = Float(
        SLURM["poll_interval"],
        help="""Seconds between the shared squeue of all sessions. Default 15.""",
    ).tag(config=True)
    poll_interval_active = Float(
        SLURM["poll_interval_active"],
        help="""Seconds between the shared squeue while a session starts. Default 1.""",
    ).tag(config=True)
    groups_ttl = Float(
        60.0,
        help="""Seconds a user's passwd entry and groups, as NSS resolves them,
        are kept for the spawn page, the profile check and the submission. A
        change in LDAP (a group, a uid, a home) applies after at most this
        long. 0: look them up every time. Default 60.""",
    ).tag(config=True)
    answer_interval = Float(
        0.05,
        help="""Seconds between the spawner's checks that a started Jupyter
        answers, before it hands the session to the hub (a refused connection
        costs the hub well under a millisecond). Default 0.05.""",
    ).tag(config=True)
    catalog_max_age = Float(
        300.0,
        help="""Seconds the catalog of the site's accounts, QOS and
        reservations may be old when a spawn names one of them; an older one
        is read again first (once for every spawn meanwhile). Default 300.""",
    ).tag(config=True)
    gpu_memory_gb = Dict(
        {},
        help="""GB of memory of each GPU model (a GRES type), as the spawn
        page shows it beside the model ([slurm] gpu_memory_gb).""",
    ).tag(config=True)
    form_sinfo_age = Float(
        5.0,
        help="""Seconds an sinfo may be old when the spawn page renders; an
        older one is refreshed first (one sinfo for every page meanwhile). 0:
        one sinfo per page. Default 5.""",
    ).tag(config=True)
    unreachable_timeout = Float(
        20.0,
        help="""Seconds the hub may fail to reach a started session's node
        (no route, no answer to the connection: not a refused connection,
        which only means Jupyter is not listening yet) before the spawn fails
        with an error naming the node, its address and port, and the job is
        cancelled. Check that the login node reaches the compute nodes' ports.
        Default 20.""",
    ).tag(config=True)
    cluster_interval = Float(
        SLURM["cluster_interval"],
        help="""Seconds between the shared sinfo behind the spawn page's
        availability and expected starts. Default 30.""",
    ).tag(config=True)
    catalog_interval = Float(
        SLURM["catalog_interval"],
        min=1.0,
        help="""Seconds between the shared poll's reads of the site's catalog
        (associations, default accounts, QOS and their limits, fairshare,
        reservations, the partitions' Allow/Deny lists), for every user at
        once; the spawn page reads the last one and never asks Slurm itself.
        Default 120 (deploy/portal.toml [slurm] catalog_interval). Example:
        ``60``.""",
    ).tag(config=True)
    unknown_grace = Float(
        SLURM["unknown_grace"],
        help="""Seconds Slurm may fail to answer before the hub logs an error.
        Sessions are never dropped for it. Default 300.""",
    ).tag(config=True)
    warn_minutes = Integer(
        SLURM["warn_minutes"],
        min=0,
        help="""Minutes before the end of a session's job (as Slurm has it) that
        JupyterLab shows a notice with the time left and a link to extend it,
        and again at 5 minutes; exported to the session as
        ``PORTAL_WARN_MINUTES``. 0: no notice. Default 15 (deploy/portal.toml
        [slurm] warn_minutes). Example: ``30``.""",
    ).tag(config=True)
    sessions_per_user = Integer(
        HUB["sessions_per_user"],
        min=1,
        help="""Sessions one user may run at once (the default server and
        named ones, each its own Slurm job): one more is refused before
        anything is submitted. Default 3 ([hub] sessions_per_user).
        Example: ``1``.""",
    ).tag(config=True)
    notice_from = Unicode(
        site_settings.mail_from(defaults()),
        help="""The From: address of the notices a session's user asked for
        by e-mail (``spawners.notices``). Default: [mail] from, else the
        hub's account at [mail] domain (``portal@portal.localhost``).
        Example: ``"hpc-portal@example.org"``.""",
    ).tag(config=True)
    notice_hub_url = Unicode(
        site_settings.public_url(defaults()) + "hub/",
        help="""The hub's address as the notices give it (its home page,
        where a session is extended, stopped or started again), with a
        trailing slash. Default: [hub] public_url, else from [hub] domain
        and bind_url (``https://portal.localhost:8000/hub/``).""",
    ).tag(config=True)

    idle_timeout = Float(
        CULLING["idle_minutes"] * 60 if CULLING["enabled"] else 0,
        help="""Seconds without activity after which the hub's idle culler stops a
        session ([culling] idle_minutes; the culler's timeout). A session whose
        profile allows a longer ``idle_minutes`` keeps its own limit in its
        state (``idle_seconds``), which the culler's arbiter
        (``portal.core.idle.cull_arbiter``) holds it to. 0: no culler.
        Default 7200 (deploy/portal.toml [culling]). Example: ``3600``.""",
    ).tag(config=True)
    activity_interval = Float(
        CULLING["activity_seconds"],
        help="""Seconds between a session's reports of its activity to the hub
        (``portal.session.activity``: a busy kernel or GPU counts), exported as
        ``PORTAL_ACTIVITY_SECONDS``; 0: no reports but the hub's own
        singleuser server's. Default 60 ([culling] activity_seconds).""",
    ).tag(config=True)
    gpu_busy_percent = Float(
        CULLING["gpu_busy_percent"],
        help="""Utilisation (percent) above which one of a session's own GPUs
        keeps it active, exported as ``PORTAL_GPU_BUSY_PERCENT``. Default 10
        ([culling] gpu_busy_percent). Example: ``5``.""",
    ).tag(config=True)

    prewarm_imports = Dict(
        site_settings.prewarm_imports(defaults()),
        help="""Per environment, the modules that the kernel started with a
        session of a profile of that environment imports before it is asked
        for (``portal.session.prewarm``), exported as ``PORTAL_PREWARM``; an
        environment not named gets no pre-warmed kernel. ``{}``: none.
        Default from deploy/portal.toml [session] prewarm_imports (``{}``
        when prewarm_kernel is false). Example: ``{"pytorch": ["torch"]}``.""",
    ).tag(config=True)

    cluster_snapshot = Unicode(
        "",
        help="""File where the shared Slurm poll writes what it sees (JSON), for
        the admin service's validation and cluster page. Default "" (none).
        Example: ``/var/lib/portal/hub/cluster.json``.""",
    ).tag(config=True)

    templates_dir = Unicode(
        "",
        help="""Folder of the notebook templates, readable on the nodes; each
        session copies what is new into ``~/templates`` and never overwrites
        the user's edited copies. Empty: no templates. Example:
        ``/opt/portal/notebook_templates``.""",
    ).tag(config=True)

    shared_data = Unicode(
        "",
        help="""The shared data storage (the cluster's NFS/Isilon mount), linked
        as ``~/shared-data`` unless that name is taken. Empty: no link.
        Example: ``/srv/portal/datasets``.""",
    ).tag(config=True)

    envs_prefix = Unicode(
        ENVS["prefix"],
        help="""Prefix of the framework environments: a profile's ``environment``
        NAME is ``PREFIX/envs/NAME``, on the nodes and inside its image alike.
        Default ``/opt/portal`` (deploy/portal.toml [envs] prefix).""",
    ).tag(config=True)

    images_dir = Unicode(
        CONTAINERS["images"],
        help="""Folder of the site's container images: a profile's ``image`` is a
        folder here (``spawners.container``). Default ``/var/lib/portal/images``
        (deploy/portal.toml [containers] images).""",
    ).tag(config=True)

    container_runtime = Unicode(
        CONTAINERS["runtime"],
        help="""The runtime that runs a session in its image:
        ``charliecloud`` (ch-run, run and tested here) or ``apptainer`` (its
        command line is unit-tested only). Default ``charliecloud``.""",
    ).tag(config=True)

    job_path = Unicode(
        "/usr/local/bin:/usr/bin:/bin",
        help="""PATH of the job before the environment is activated; the hub's
        configuration puts [slurm] bin_dir first when it is another folder
        (``spawners.hub_config.job_path``).""",
    ).tag(config=True)

    slurm_bin_dir = Unicode(
        SLURM["bin_dir"],
        help="""The folder of Slurm's commands, as the session is told it
        (``PORTAL_SLURM_BIN_DIR``: its squeue of the time left). The hub's
        own commands take theirs from ``portal.slurm.commands.use_bin_dir``;
        both are [slurm] bin_dir. Default ``/usr/bin``. Example:
        ``/opt/slurm/bin``.""",
    ).tag(config=True)

    allowed_unix_groups = List(
        Unicode(),
        help="""Unix (LDAP) groups whose members may run sessions; an account in
        none of them is refused before anything is submitted, whatever the
        caller's rights (a hub admin starting a server for a system account).
        Empty: no group check. Example: ``["portal-users", "portal-admins"]``.""",
    ).tag(config=True)
    uid_min = Integer(
        HUB["uid_min"],
        help="""Lowest uid of an account that may run sessions: system accounts
        (slapd's, munge's, the portal's own) are below it. Default 10000
        (deploy/portal.toml [hub] uid_min).""",
    ).tag(config=True)
    uid_max = Integer(
        HUB["uid_max"],
        help="""Highest uid of an account that may run sessions. Default 60000
        ([hub] uid_max).""",
    ).tag(config=True)

    @default("env_keep")
    def _env_keep_default(self):
        # nothing of the hub's own environment reaches a session
        return []

    @default("ssl_alt_names")
    def _ssl_alt_names_default(self):
        # JupyterHub's default is the hub's own names (trusted_alt_names): a
        # session's certificate, whose key its user reads, must not cover the
        # hub's address. Its nodes' names are added by create_certs.
        return []

    @default("ssl_alt_names_include_local")
    def _ssl_alt_names_include_local_default(self):
        # nothing reaches a session at localhost, where the proxy's API and
        # the admin service answer
        return False

    @default("ip")
    def _ip_default(self):
        # the batch script binds the server to its node's cluster address
        return ""

    @default("batchspawner_singleuser_cmd")
    def _singleuser_wrapper_default(self):
        return os.path.join(self.python_env, "bin", "portal-session")

    @default("cmd")
    def _cmd_default(self):
        return [os.path.join(self.python_env, "bin", "jupyterhub-singleuser")]

    @default("apply_user_options")
    def _apply_user_options_default(self):
        # JupyterHub calls this before start, for the form and the REST API alike.
        return lambda spawner, user_options: spawner.apply_options(user_options)

    @default("options_form")
    def _options_form_default(self):
        return lambda spawner: spawner.fresh_options_form()

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # batchspawner's settings that would do nothing here are refused, not ignored
        refuse_unused_settings(type(self), self.config)

    def profiles(self):
        """The current profiles: ``profile_source``'s (one that is not valid is
        left out, logged), or the one of ``default_profile``."""
        if self.profile_source is None:
            fallback = {"name": "default", "display_name": "Default", "environment": "default"}
            slice_defaults = {key: SLURM[key] for key in SLICE_FIELDS}
            return [profile_from_dict({**fallback, **self.default_profile}, slice_defaults)]
        profiles = []
        for p in self.profile_source():
            try:
                profiles.append(p if isinstance(p, Profile) else profile_from_dict(p))
            except ProfileError as e:
                # one bad profile must not stop every spawn: leave it out, loudly
                self.log.error(
                    "Profile %r left out: %s", p.get("name") if isinstance(p, dict) else p, e
                )
        return profiles

    @property
    def poller(self):
        """The shared Slurm poll of this hub's sessions, configured here."""
        poller = SlurmPoller.instance(
            self.job_name,
            interval=self.poll_interval_slurm,
            active_interval=self.poll_interval_active,
            cluster_interval=self.cluster_interval,
            catalog_interval=self.catalog_interval,
            unknown_grace=self.unknown_grace,
            timeout=self.slurm_timeout,
            will_run_slices=self.expected_slices,
            snapshot_path=self.cluster_snapshot,
        )
        poller.ensure_running()
        return poller

    def expected_slices(self):
        """The slices whose expected start the spawn page shows: each enabled
        profile's own, per GPU count, for its default hours."""
        return [
            p.make_slice(gpus, p.default_hours)
            for p in self.profiles()
            if p.enabled
            for gpus in range(1, p.max_gpus + 1)
        ]

    # -- the user's account (spawners.accounts) -----------------------------

    def account(self):
        """The user's passwd entry (``spawners.accounts``: kept ``groups_ttl`` seconds)."""
        return accounts.looked_up(self.user.name, self.groups_ttl)[1]

    def user_groups(self):
        """The user's Unix/LDAP groups (kept ``groups_ttl`` seconds)."""
        return accounts.looked_up(self.user.name, self.groups_ttl)[2]

    def check_account(self):
        """Refuse, with ProfileError, an account outside ``uid_min``..``uid_max``
        or in none of ``allowed_unix_groups``. Returns the user's groups."""
        return accounts.check_account(
            self.user.name,
            self.account(),
            self.user_groups(),
            uid_min=self.uid_min,
            uid_max=self.uid_max,
            allowed_groups=self.allowed_unix_groups,
        )

    def offered_profiles(self):
        groups = self.check_account()
        return [p for p in self.profiles() if p.allows(groups)]
