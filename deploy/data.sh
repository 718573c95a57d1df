#!/usr/bin/env bash
# The shared data folder ([data] shared_data), world-readable, with copies
# (real files, which a container session reads too) of the demo data sets
# that Debian packages; never replaces what a site keeps there
# (deploy/data_setup.py).
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"
deploy_py data_setup ensure
