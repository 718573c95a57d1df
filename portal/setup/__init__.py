"""What ``portal setup`` does on a site's login node, and ``portal
uninstall`` undoes: the portal's own installation steps, each idempotent
and each saying the change it makes (LAYOUT: what a site installs is the
package; what only the demo builds lives in deploy/).

- ``files``: atomic writes of the portal's files, their owners and modes;
- ``install``: the steps (the service accounts, the root helpers and the
  hub's registration with them, the sudoers rules for the configured Slurm
  folder and groups, the state folders, the internal certificates, the
  database's migrations, the systemd units) and their undoing;
- ``units``: the systemd units' text (pure).

Standard library only, like the deploy scripts that call it before any
environment exists.
"""
