"""Calling a proxy: the request body of each kind, bounded concurrency, the per-proxy timeout and
the metrics, over one transport per configured proxy (``Proxies`` builds them once from the
settings and closes them at shutdown).

``Proxy.call`` never hangs (acquiring a slot and the call share ``timeout``) and never raises
anything but ``ProxyFailure`` for a failed call; the caller (``gateway.connection.authorization``) maps
that to Centrifugo's answer per command.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

from gateway.config.schema import ChannelOptions, Settings
from gateway.config.sections.proxy import ProxySettings, named_proxy
from gateway.log_limit import LogLimiter
from gateway.metrics import Metrics
from gateway.proxy.grpc import GrpcProxyTransport
from gateway.proxy.http import HttpProxyTransport
from gateway.proxy.replies import ProxyFailure, ProxyReply, parse_reply

log = logging.getLogger("taskcast.gateway.proxy")
_hints = LogLimiter(log)

DEFAULT_MAX_CONCURRENCY = 64
KINDS = (
    "connect",
    "refresh",
    "subscribe",
    "publish",
    "sub_refresh",
    "rpc",
    "subscribe_stream",
    "map_publish",
    "map_remove",
)


class ProxyTransport(Protocol):
    """One backend connection pool: HTTP (``HttpProxyTransport``) or gRPC (``GrpcProxyTransport``)."""

    protocol: str

    async def call(self, kind: str, request: Mapping[str, Any], headers: Mapping[str, str]) -> object:
        """The decoded answer (bytes fields as bytes). Raises ProxyFailure."""
        ...

    async def close(self) -> None: ...


class Proxy:
    """One configured proxy (``name``: its ``proxies`` entry, or ``default``)."""

    def __init__(self, name: str, settings: ProxySettings, metrics: Metrics) -> None:
        self.name = name
        self.settings = settings
        self.limit = settings.max_concurrency or DEFAULT_MAX_CONCURRENCY
        self._transport: ProxyTransport | None = None
        self.slots = asyncio.Semaphore(self.limit)
        self.metrics = metrics
        self.forwarded = tuple(h.lower() for h in (*settings.http_headers, *settings.grpc_metadata))
        self.emulated = tuple(h.lower() for h in settings.emulated_headers)

    @property
    def protocol(self) -> str:
        return "grpc" if self.settings.endpoint.startswith("grpc://") else "http"

    @property
    def transport(self) -> ProxyTransport:
        """Built on first use, inside the serving event loop (a grpcio aio channel is bound to
        the loop it was created in)."""
        if self._transport is None:
            self._transport = (
                GrpcProxyTransport(self.settings)
                if self.protocol == "grpc"
                else HttpProxyTransport(self.settings, max_connections=self.limit)
            )
        return self._transport

    async def close(self) -> None:
        if self._transport is not None:
            await self._transport.close()
            self._transport = None

    def base(self, kind: str, *, client: str, transport: str, protocol: str) -> dict[str, Any]:
        return {
            "client": client,
            "transport": transport,
            "protocol": protocol,
            "encoding": "binary" if self.settings.binary_encoding else "json",
        }

    def put_data(self, request: dict[str, Any], data: bytes | None, key: str = "data") -> None:
        """The client's payload: raw JSON, or base64 in ``b64data`` with binary_encoding."""
        if data is None:
            return
        if self.settings.binary_encoding:
            request["b64" + key] = base64.b64encode(data).decode()
        else:
            request[key] = data

    def headers(
        self, request_headers: Mapping[str, str], emulated: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The headers forwarded to the backend: the ``emulated_headers`` entries of the
        connect's headers map (``emulated``, lower-case names), under the allow-listed headers
        of the client's HTTP request (``http_headers``/``grpc_metadata``), which win."""
        sent = {k: v for k, v in emulated.items() if k in self.emulated} if emulated and self.emulated else {}
        if emulated and any(k in self.forwarded and k not in self.emulated for k in emulated):
            # Centrifugo's migration hint (v6.9): these names reach the backend as real headers
            # only. Names only: the values are the client's and may be credentials.
            dropped = sorted(k for k in emulated if k in self.forwarded and k not in self.emulated)
            _hints.log(
                logging.INFO,
                self.name,
                "emulated headers %s match http_headers but not emulated_headers of proxy %s: not forwarded",
                dropped,
                self.name,
            )
        sent.update((k.lower(), v) for k, v in request_headers.items() if k.lower() in self.forwarded)
        return sent

    async def call(
        self,
        kind: str,
        request: Mapping[str, Any],
        request_headers: Mapping[str, str],
        emulated: Mapping[str, str] | None = None,
    ) -> ProxyReply:
        """Ask the backend. Raises ProxyFailure (timeout, unavailable, status, malformed)."""
        protocol = self.protocol
        labels = (protocol, kind, self.name)
        inflight = self.metrics.proxy_inflight.labels(*labels)
        started = time.perf_counter()
        inflight.inc()
        try:
            async with asyncio.timeout(self.settings.timeout):
                async with self.slots:
                    headers = self.headers(request_headers, emulated)
                    answer = await self.transport.call(kind, request, headers)
            return parse_reply(answer)
        except TimeoutError:
            self.metrics.proxy_errors.labels(*labels).inc()
            log.warning("%s proxy %s (%s): timeout", kind, self.name, protocol)
            raise ProxyFailure("timeout") from None
        except ProxyFailure as exc:
            self.metrics.proxy_errors.labels(*labels).inc()
            if exc.reason == "too_large":
                self.metrics.proxy_oversized.labels(*labels).inc()
            log.warning("%s proxy %s (%s): %s", kind, self.name, protocol, exc)
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a transport bug must not take the connection down
            self.metrics.proxy_errors.labels(*labels).inc()
            log.error("%s proxy %s (%s): unexpected failure", kind, self.name, protocol, exc_info=True)
            raise ProxyFailure("internal", type(exc).__name__) from exc
        finally:
            inflight.dec()
            self.metrics.proxy_duration.labels(*labels).observe(time.perf_counter() - started)


class Proxies:
    """Every proxy the settings enable, built once; lookups by command and channel/method."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._built: dict[tuple[str, str], Proxy] = {}
        cp = settings.client.proxy
        self.connect = self._proxy("connect", "default", cp.connect) if cp.connect.enabled else None
        self.refresh = self._proxy("refresh", "default", cp.refresh) if cp.refresh.enabled else None

    def _proxy(self, kind: str, name: str, settings: ProxySettings) -> Proxy:
        key = (kind if name == "default" else "", name)
        found = self._built.get(key)
        if found is None:
            found = self._built[key] = Proxy(name, settings, self.metrics)
        return found

    @property
    def uses_emulated_headers(self) -> bool:
        """True when some configured proxy forwards headers of the connect's headers map
        (``emulated_headers``): only then does a connection keep that map."""
        s = self.settings
        cp, ch = s.client.proxy, s.channel.proxy
        every = (
            cp.connect,
            cp.refresh,
            ch.subscribe,
            ch.publish,
            ch.sub_refresh,
            ch.subscribe_stream,
            ch.map_publish,
            ch.map_remove,
        )
        return any(p.emulated_headers for p in (*every, s.rpc.proxy, *s.proxies))

    @property
    def any(self) -> bool:
        """True when some proxy is configured (the app builds ``ProxyAuthorizer`` then)."""
        s = self.settings
        kinds = ("subscribe", "publish", "sub_refresh", "subscribe_stream")
        return bool(
            self.connect
            or self.refresh
            or any(
                getattr(o, f"{k}_proxy_enabled")
                for o in (s.channel.without_namespace, *s.channel.namespaces)
                for k in kinds
            )
            or any(
                o.map.publish_proxy_enabled or o.map.remove_proxy_enabled
                for o in (s.channel.without_namespace, *s.channel.namespaces)
            )
            or any(o.proxy_enabled for o in (s.rpc.without_namespace, *s.rpc.namespaces))
        )

    def for_channel(self, kind: str, channel: str) -> Proxy | None:
        """The ``subscribe`` / ``publish`` / ``sub_refresh`` / ``subscribe_stream`` proxy of a
        channel's namespace."""
        opts = self.settings.channel_options(channel)
        if opts is None or not getattr(opts, f"{kind}_proxy_enabled"):
            return None
        name = getattr(opts, f"{kind}_proxy_name") or "default"
        proxy = named_proxy(self.settings.proxies, getattr(self.settings.channel.proxy, kind), name)
        return None if proxy is None else self._proxy(kind, name, proxy)

    def for_map(self, kind: str, opts: ChannelOptions) -> Proxy | None:
        """The ``map_publish`` / ``map_remove`` proxy of a map namespace (``map.publish_proxy_name``
        / ``map.remove_proxy_name``, else ``channel.proxy.map_publish`` / ``map_remove``); None
        when the namespace does not enable it."""
        option = kind.removeprefix("map_")
        if not getattr(opts.map, f"{option}_proxy_enabled"):
            return None
        name = getattr(opts.map, f"{option}_proxy_name") or "default"
        proxy = named_proxy(self.settings.proxies, getattr(self.settings.channel.proxy, kind), name)
        return None if proxy is None else self._proxy(kind, name, proxy)

    def for_shared_poll(self, opts: ChannelOptions) -> Proxy:
        """The ``shared_poll_refresh`` proxy of a shared-poll namespace (``shared_poll.proxy_name``,
        else ``channel.proxy.shared_poll_refresh``; the config checks made sure it exists)."""
        name = opts.shared_poll.proxy_name or "default"
        proxy = named_proxy(self.settings.proxies, self.settings.channel.proxy.shared_poll_refresh, name)
        assert proxy is not None
        return self._proxy("shared_poll_refresh", name, proxy)

    def for_rpc(self, method: str) -> Proxy | None:
        rpc = self.settings.rpc
        opts = rpc.options(method)
        if opts is None or not opts.proxy_enabled:
            return None
        name = opts.proxy_name or "default"
        proxy = named_proxy(self.settings.proxies, rpc.proxy, name)
        return None if proxy is None else self._proxy("rpc", name, proxy)

    async def close(self) -> None:
        for proxy in self._built.values():
            await proxy.close()
        self._built.clear()
