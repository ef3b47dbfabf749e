"""Older test helpers (fault proxy, convergence checker, raw client, Redis engine, MariaDB schema).
Waiting, free ports and service processes are in :mod:`tests.support`; the re-exports here keep
the suites that still import them working."""
