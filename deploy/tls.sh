#!/usr/bin/env bash
# The portal's TLS certificate, made when missing (deploy/tls_setup.py):
#     deploy/tls.sh ensure | key-copy USER FILE [-] | status
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"
deploy_py tls_setup "$@"
