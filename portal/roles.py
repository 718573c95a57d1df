"""Who may administer the portal: the one scope the hub grants and the admin
service checks (shared by the hub, ``spawners``, and the service,
``portal.service``; imports nothing)."""

ADMIN_SCOPE = "custom:portal:admin"
# Run notebooks as Slurm jobs as oneself (portal.notebookjobs) through the
# hub's API: every user holds it, their sessions' servers' tokens too.
JOBS_SCOPE = "custom:portal:jobs"


def is_portal_admin(scopes):
    """Whether ``scopes`` (a hub handler's ``expanded_scopes``, or the
    ``scopes`` of the service's user model) make their holder a portal admin:
    they hold ADMIN_SCOPE. Being a JupyterHub admin (``user.admin``) is not
    enough: JupyterHub's admin role does not hold it.

    >>> is_portal_admin({"admin:users", "custom:portal:admin"}), is_portal_admin({"admin:users"})
    (True, False)
    """
    return ADMIN_SCOPE in scopes
