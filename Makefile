# Taskcast developer targets. `make test` is what CI runs (.ci/run).
PY := .venv/bin/python
CONFIG ?= examples/gateway.json

.PHONY: up run topology bootstrap test test-quick test-fast lint fmt type bench bench-fanout bench-ingest bench-relay bench-relay-rate bench-claim bench-gc bench-capacity

up: bootstrap  ## make up ARGS="--allowed-origin http://localhost:5173 --port-gateway 8001"
	$(PY) -m taskcast up $(ARGS)

run: bootstrap
	$(PY) -m taskcast gateway --config $(CONFIG)

bootstrap:
	bash scripts/bootstrap.sh

# `make test AREA=gateway` runs one folder of tests/ (no lint); see docs/testing.md.
test:
	AREA=$(AREA) bash scripts/test.sh

# Pure cores and in-process tests: no services, no processes, in parallel (< 60 s).
test-quick: bootstrap
	TASKCAST_TEST_QUICK=1 $(PY) -m pytest -q -p no:cacheprovider -n $(shell echo $$(( $$(nproc) + 1 ))) \
		-m "not process and not services and not node" --durations=10

test-fast: test-quick

lint: bootstrap
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

fmt: bootstrap
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

type: bootstrap
	$(PY) -m mypy

bench-fanout: bootstrap
	$(PY) loadtest/bench_fanout.py --out docs/PERFORMANCE.md

bench-ingest: bootstrap
	bash scripts/bench_ingest.sh

bench-relay: bootstrap
	$(PY) loadtest/bench_relay.py --out docs/PERFORMANCE.md

bench-relay-rate: bootstrap  ## the relays' CPU per row at 50, 200 and 667 events/s
	$(PY) loadtest/bench_relay_rate.py

bench-claim: bootstrap
	$(PY) loadtest/bench_claim.py --out docs/PERFORMANCE.md

bench-capacity: bootstrap  ## seed §15: ingest vs the database floor, the model end to end (20,000 tasks, 667 events/s, a ladder), idle connections
	$(PY) loadtest/bench_capacity.py --out docs/PERFORMANCE.md --json docs/perf/capacity-results.json

bench-gc: bootstrap
	$(PY) loadtest/bench_gc.py --out docs/PERFORMANCE.md

topology: bootstrap
	$(PY) -m taskcast.dev.topology_cli $(ARGS)

bench: bootstrap
	$(PY) loadtest/bench_all.py --out docs/PERFORMANCE.md
