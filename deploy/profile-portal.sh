# shellcheck shell=sh
# Installed by the portal's deploy/envs.sh as /etc/profile.d/portal.sh.
#
# The terminal of a JupyterLab session is a login shell, and /etc/profile
# resets its PATH, dropping the environment the session runs in. When the
# spawner named one ($PORTAL_ENVIRONMENT), load its modulefile again
# (environment-modules' /etc/profile.d/modules.sh, read before this file,
# defines `module`).
if [ -n "${PORTAL_ENVIRONMENT:-}" ] && command -v module >/dev/null 2>&1; then
    module load "$PORTAL_ENVIRONMENT" >/dev/null 2>&1 || true
fi
