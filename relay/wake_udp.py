"""The relay's half of the wake-up without Redis (docs/relay.md "Wake-up without Redis"): a UDP
socket on ``wake_udp_listen`` where the Status API sends one datagram per commit burst to one
relay at a time (``status_api/wake.py`` ``UdpWakeSender``); each hint calls ``on_wake``.

A hint is never the truth, as with Redis: a lost datagram costs at most the relay's poll. Only the
hint's exact bytes wake the relay (stray traffic on the port is ignored); nothing is ever sent
back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from relay.config import host_port
from status_api.storage.outbox import WAKE_UDP_HINT

log = logging.getLogger("taskcast.relay.wake")


class _HintProtocol(asyncio.DatagramProtocol):
    def __init__(self, on_wake: Callable[[], None]) -> None:
        self.on_wake = on_wake

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        if data == WAKE_UDP_HINT:
            self.on_wake()


class UdpWakeListener:
    """Calls ``on_wake()`` for each hint datagram received on ``address`` (``host:port``) between
    :meth:`start` and :meth:`close`. ``port`` is the bound port (useful with port 0)."""

    def __init__(self, address: str, on_wake: Callable[[], None]) -> None:
        self.host, self.port = host_port(address)
        self.on_wake = on_wake
        self._transport: asyncio.DatagramTransport | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _HintProtocol(self.on_wake), local_addr=(self.host, self.port)
        )
        self._transport = transport
        self.port = int(transport.get_extra_info("sockname")[1])
        log.info("wake-up hints on udp %s:%d", self.host, self.port)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
