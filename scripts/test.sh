#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine (as root): installs what it needs, starts
# throwaway Redis and MariaDB on free ports in a temp dir, runs lint + pytest in parallel
# (pytest-xdist, whole files per worker, longest files first: docs/testing.md), stops the servers.
#   AREA=gateway bash scripts/test.sh    one area (a folder of tests/, or root: its files), without lint
#   bash scripts/test.sh -k name         extra pytest arguments
#   TASKCAST_TEST_WORKERS=N              xdist workers (default: twice the cores; 0 = serial)
#   TASKCAST_TEST_TIME_SCALE=F           every test bound times F (default: 1, or the 1-minute load
#                                        average per core, rounded up, at most 2, when other work
#                                        keeps the cores busy: docs/testing.md "Under load")
set -euo pipefail
cd "$(dirname "$0")/.."
paths=()
if [ "${AREA:-}" = root ]; then
  paths=(tests/test_*.py)  # the files at the root of tests/
elif [ -n "${AREA:-}" ]; then
  if [ ! -e "tests/$AREA" ]; then
    areas=$(cd tests && ls -d */ | tr -d / | grep -v -e support -e helpers -e __pycache__ | tr '\n' ' ')
    echo "AREA=$AREA: no tests/$AREA (areas: root $areas)" >&2
    exit 2
  fi
  paths=("tests/$AREA")
fi
bash scripts/bootstrap.sh
svc_dir=$(mktemp -d /tmp/taskcast-svc.XXXXXX)
trap 'bash scripts/services.sh stop "$svc_dir"; rm -rf "$svc_dir"' EXIT
eval "$(bash scripts/services.sh start "$svc_dir")"
export TASKCAST_TEST_REDIS_URL TASKCAST_TEST_MYSQL_URL
export TASKCAST_TEST_REQUIRE_SERVICES=1
if [ ${#paths[@]} -eq 0 ]; then
  make lint
fi
if [ -z "${TASKCAST_TEST_TIME_SCALE:-}" ]; then
  # Measured before this run adds its own load: the machine is shared (other agents, other runs).
  TASKCAST_TEST_TIME_SCALE=$(awk -v cores="$(nproc)" '{ s = $1 / cores; s = (s == int(s)) ? s : int(s) + 1;
    print (s < 1) ? 1 : (s > 2) ? 2 : s }' /proc/loadavg)
  if [ "$TASKCAST_TEST_TIME_SCALE" != 1 ]; then
    echo "load $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores: TASKCAST_TEST_TIME_SCALE=$TASKCAST_TEST_TIME_SCALE (set it to override)"
  fi
fi
export TASKCAST_TEST_TIME_SCALE
workers=${TASKCAST_TEST_WORKERS:-$(( 2 * $(nproc) ))}
parallel=()
if [ "$workers" -gt 0 ]; then
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
# Every run leaves its per-test times for scripts/test_durations.py (docs/testing.md "Wall times").
mkdir -p .test-results
.venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" --durations=25 \
  --junitxml=.test-results/last.xml "${paths[@]}" "$@"
