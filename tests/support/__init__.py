"""Shared test support, one of each: waiting on a condition (:mod:`tests.support.waiting`, bounds
scaled by ``TASKCAST_TEST_TIME_SCALE``), a free port, and the gateway / Status API / relay process
factory (:mod:`tests.support.procs`)."""

from tests.support.procs import (
    DEFAULT_API_KEY,
    ROOT,
    GatewayProcess,
    RelayProcess,
    ServiceProcess,
    StatusApiProcess,
    free_port,
    merge,
    mint_token,
)
from tests.support.waiting import WaitTimeout, scaled, time_scale, wait_until, wait_until_blocking

__all__ = [
    "DEFAULT_API_KEY",
    "ROOT",
    "GatewayProcess",
    "RelayProcess",
    "ServiceProcess",
    "StatusApiProcess",
    "WaitTimeout",
    "free_port",
    "merge",
    "mint_token",
    "scaled",
    "time_scale",
    "wait_until",
    "wait_until_blocking",
]
