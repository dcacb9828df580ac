#!/bin/sh
# Installs the real agent CLIs that examples/agents/claude-code and codex (and the
# agent_cli tests, tests/integ/test_agent_gateway.c) train through an `agent`
# environment: Claude Code and Codex CLI, pinned
# in examples/agents/clis/package-lock.json, each a native binary that its npm
# package ships for this platform (about 800 MB together).  Needs the npm
# registry the first time; exits 1 (the tests then skip) when it cannot, or when
# the installed binaries do not run here.
set -u
cd "$(dirname "$0")/../examples/agents/clis" || exit 1
runs() { ./node_modules/.bin/claude --version >/dev/null 2>&1 && ./node_modules/.bin/codex --version >/dev/null 2>&1; }
runs && exit 0
command -v npm >/dev/null 2>&1 || { echo "test-agent-clis: npm not installed" >&2; exit 1; }
timeout 900 npm ci --no-audit --no-fund >/dev/null 2>&1 || { echo "test-agent-clis: npm registry unreachable" >&2; exit 1; }
runs || { echo "test-agent-clis: the installed claude or codex does not run on this machine" >&2; exit 1; }
