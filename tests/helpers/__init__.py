"""Suite-specific test helpers (fault proxy, convergence checker, raw client, Redis engine,
MariaDB schema). Waiting, free ports and service processes live in :mod:`tests.support` only."""
