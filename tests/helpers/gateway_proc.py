"""Moved to :mod:`tests.support.procs`; kept for the suites that still import it from here."""

from tests.support.procs import (
    DEFAULT_API_KEY,
    READY_TIMEOUT_SECONDS,
    ROOT,
    GatewayProcess,
    free_port,
    mint_token,
)

__all__ = ["DEFAULT_API_KEY", "READY_TIMEOUT_SECONDS", "ROOT", "GatewayProcess", "free_port", "mint_token"]
