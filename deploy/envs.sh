#!/usr/bin/env bash
# The Python environments under [envs] prefix, each rebuilt only when its
# requirements changed, and their kernels (deploy/envs_setup.py); then the
# container images of [containers] build made from them, each rebuilt only
# when an environment it holds changed (deploy/images.py ensure).
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"
deploy_py envs_setup build
deploy_py images ensure
