#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine (as root): installs what it needs, starts
# throwaway Redis and MariaDB on free ports in a temp dir, runs lint + pytest, stops the servers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
svc_dir=$(mktemp -d /tmp/taskcast-svc.XXXXXX)
trap 'bash scripts/services.sh stop "$svc_dir"; rm -rf "$svc_dir"' EXIT
eval "$(bash scripts/services.sh start "$svc_dir")"
export TASKCAST_TEST_REDIS_URL TASKCAST_TEST_MYSQL_URL
export TASKCAST_TEST_REQUIRE_SERVICES=1
make lint
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
