#!/bin/sh
# Installs the agent gateway and serve tests' Node dependencies (the official
# `openai` and `@anthropic-ai/sdk` SDKs, pinned in
# tests/integ/agents/package-lock.json) once.  Needs the
# npm registry the first time; exits 1 (the test then skips) when it cannot.
set -u
cd "$(dirname "$0")/../tests/integ/agents" || exit 1
[ -f node_modules/openai/package.json ] && [ -f node_modules/@anthropic-ai/sdk/package.json ] && exit 0
command -v npm >/dev/null 2>&1 || { echo "test-agents: npm not installed" >&2; exit 1; }
timeout 300 npm ci --no-audit --no-fund >/dev/null 2>&1 || { echo "test-agents: npm registry unreachable" >&2; exit 1; }
