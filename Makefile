# Taskcast developer targets. `make test` is what CI runs (.ci/run).
PY := .venv/bin/python
CONFIG ?= examples/gateway.json

.PHONY: up run topology bootstrap test test-fast lint fmt type bench bench-fanout bench-ingest bench-relay bench-claim bench-gc

up: bootstrap
	$(PY) -m taskcast up

run: bootstrap
	$(PY) -m taskcast gateway --config $(CONFIG)

bootstrap:
	bash scripts/bootstrap.sh

test:
	bash scripts/test.sh

test-fast: bootstrap
	$(PY) -m pytest -q

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

bench-claim: bootstrap
	$(PY) loadtest/bench_claim.py --out docs/PERFORMANCE.md

bench-gc: bootstrap
	$(PY) loadtest/bench_gc.py --out docs/PERFORMANCE.md

topology: bootstrap
	$(PY) -m taskcast.dev.topology

bench: bootstrap
	$(PY) loadtest/bench_all.py --out docs/PERFORMANCE.md
