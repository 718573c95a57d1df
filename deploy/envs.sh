#!/usr/bin/env bash
# The Python environments under [envs] prefix, each rebuilt only when its
# requirements changed, and their kernels (deploy/envs_setup.py).
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"
deploy_py envs_setup build
