#!/bin/sh
# Readies the web console's browser test (tests/integ/test_ui_browser.c): Debian's chromium (scripts/deps.sh
# installs it) and playwright-core, pinned in tests/integ/ui/package-lock.json, installed once.  Exits 1 with
# the reason (the test then skips, or fails under CI) when either is missing.
set -u
command -v "${LT_CHROMIUM:-chromium}" >/dev/null 2>&1 || { echo "test-ui: chromium not installed (apt-get install chromium)" >&2; exit 1; }
cd "$(dirname "$0")/../tests/integ/ui" || exit 1
[ -f node_modules/playwright-core/package.json ] && exit 0
command -v npm >/dev/null 2>&1 || { echo "test-ui: npm not installed" >&2; exit 1; }
timeout 300 npm ci --no-audit --no-fund >/dev/null 2>&1 || { echo "test-ui: npm registry unreachable" >&2; exit 1; }
