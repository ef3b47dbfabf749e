"""The production topology from local processes (taskcast/dev/topology.py), shared by the e2e
tests of one session: real MariaDB, Redis, 2 gateways, Status API, reconciler, 2 relays, nginx."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from taskcast.dev.topology import Topology
from tests.support import scaled


@pytest.fixture(scope="session")
def topology(tmp_path_factory: pytest.TempPathFactory, redis_url: str, mysql_url: str) -> Iterator[Topology]:
    topo = Topology(
        tmp_path_factory.mktemp("topology"),
        redis_url=redis_url,
        mysql_url=mysql_url,
        heartbeat_timeout_seconds=2.0,
        ready_timeout_seconds=scaled(60),
    )
    topo.start()
    yield topo
    topo.stop()
