#!/usr/bin/env bash
# `make bench-ingest`: a throwaway MariaDB, the Status API ingest benchmark, results into
# docs/PERFORMANCE.md (section between <!-- ingest:start --> and <!-- ingest:end -->).
set -euo pipefail
cd "$(dirname "$0")/.."
svc_dir=$(mktemp -d /tmp/taskcast-bench.XXXXXX)
trap 'bash scripts/services.sh stop "$svc_dir"; rm -rf "$svc_dir"' EXIT
eval "$(bash scripts/services.sh start "$svc_dir")"
.venv/bin/python loadtest/bench_ingest.py --url "$TASKCAST_TEST_MYSQL_URL" --out docs/PERFORMANCE.md --http "$@"
