#!/usr/bin/env bash
# The tools only the tests use, from npm: axe-core, the accessibility engine
# the browser tests run in Chromium (tests/browser/test_accessibility.py).
# Kept in /opt/portal/test-tools (make purge keeps it, as it keeps packages).
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

TOOLS=/opt/portal/test-tools
AXE_VERSION=4.14.1

installed=$(node -p "require('$TOOLS/node_modules/axe-core/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$AXE_VERSION" ]; then
    log "installing axe-core $AXE_VERSION from npm into $TOOLS"
    mkdir -p "$TOOLS"
    npm install --prefix "$TOOLS" --silent --no-audit --no-fund "axe-core@$AXE_VERSION" >/dev/null
fi
