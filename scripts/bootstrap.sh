#!/usr/bin/env bash
# Creates .venv with the project and its dev tools, and installs the npm packages that the
# conformance tests drive (the official centrifuge-js SDK). Idempotent and quick when done before.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 nodejs npm
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.taskcast-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ sdk/python/pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  .venv/bin/pip install -q -e sdk/python  # the worker SDK (its own package: httpx only)
  touch "$stamp"
fi
if [ -f tests/conformance/js/package.json ]; then
  if [ ! -d tests/conformance/js/node_modules ] || [ tests/conformance/js/package.json -nt tests/conformance/js/node_modules ]; then
    (cd tests/conformance/js && npm install --no-audit --no-fund --loglevel=error)
  fi
fi
if [ -f client-js/package.json ]; then
  if [ ! -d client-js/node_modules ] || [ client-js/package.json -nt client-js/node_modules ]; then
    (cd client-js && npm install --no-audit --no-fund --loglevel=error && touch node_modules)
  fi
  # dist/ is a build output (git-ignored); the Status API serves it at /board/dist/.
  (cd client-js && npm run --silent build)
fi
# The browser tests drive Debian's chromium through playwright-core (tests/client_js).
if [ ! -x /usr/bin/chromium ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 chromium
fi
