"""The portal's admin service, ``/services/portal/``: spawner profiles and the cluster.

A JupyterHub-managed service (started by the hub as
``[sys.executable, "-m", "portal.service"]``, see ``spawners.hub_config``) with
its own store (``portal.store``). Everyone logged in to the hub may read the
profiles offered to them and the cluster page; portal admins, the holders of
the ``custom:portal:admin`` scope (the ``portal-admin`` role, granted to the
``[ldap] admin_groups``), edit profiles, in pages and through the JSON API
``/services/portal/api/profiles``, and see the site's container images and
their checks at ``/services/portal/images`` (``portal.service.images``: a
profile of an image is saved, and offered, only once the image passed its
check). A session's owner or a portal admin
extends its time limit with ``POST /services/portal/api/sessions/NAME/extend``
(``portal.extend``).
"""
