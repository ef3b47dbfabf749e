"""Moved to :mod:`taskcast.dev.topology` (``make topology``); kept for the suites that still import it."""

from taskcast.dev.procs import Proc, free_port
from taskcast.dev.topology import Topology, topology_nodes

__all__ = ["Proc", "Topology", "free_port", "topology_nodes"]
