"""Issue 28, defect 4 and risk 7: every proxy answer is bounded and no redirect is followed.

- A well-formed 20 MB answer (HTTP streamed without a length, gRPC one message) is refused at
  ``max_response_size`` (default 4 MiB): error 100, counted in
  ``taskcast_gateway_proxy_oversized_responses_total``, and three at once leave the gateway's
  peak RSS well below what reading them would take. It used to be read whole (HTTP: the
  subscribe succeeded with 20 MB of data; RSS grew by ~100 MB per answer).
- A 307 from an HTTP proxy is a failed call (error 100): the body and the static (secret)
  headers never reach the Location's host.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.gateway.proxy.backend import Served, serve_backend
from tests.gateway.proxy.conftest import GatewayStarter, proxy_config
from tests.gateway.proxy.test_proxy_failures import INTERNAL, _metrics, _outcome
from tests.support.procs import GatewayProcess


def _kib(gw: GatewayProcess, field: str) -> int:
    """VmRSS / VmHWM (peak) of the gateway process, in KiB."""
    assert gw.proc is not None
    text = Path(f"/proc/{gw.proc.pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB$", text, re.M)
    assert match, field
    return int(match.group(1))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_an_oversized_answer_is_error_100_counted_and_never_held(
    protocol: str, served: Served, start_gateway: GatewayStarter
) -> None:
    gw = start_gateway(proxy_config(lambda k: served.endpoint(protocol, k)))
    served.backend.mode["subscribe"] = "huge"
    assert await _outcome(gw, "subscribe") == INTERNAL  # warm: pools, codecs, first imports
    before = _kib(gw, "VmRSS")
    outcomes = await asyncio.gather(*(_outcome(gw, "subscribe") for _ in range(3)))
    assert outcomes == [INTERNAL] * 3
    growth_mb = (_kib(gw, "VmHWM") - before) / 1024
    assert growth_mb < 30, f"peak RSS grew {growth_mb:.0f} MB for 3 refused 20 MB answers"
    labels = f'name="default",protocol="{protocol}",type="subscribe"'
    assert f"taskcast_gateway_proxy_oversized_responses_total{{{labels}}} 4.0" in _metrics(gw)
    assert "Traceback" not in gw.log_text()


async def test_max_response_size_is_the_bound(served: Served, start_gateway: GatewayStarter) -> None:
    """A smaller ``max_response_size`` refuses a 256 KiB answer the default takes."""
    served.backend.huge_size = 256 * 1024  # under client.queue_max_size (1 MB: else 3008)
    served.backend.mode["subscribe"] = "huge"
    roomy = start_gateway(proxy_config(lambda k: served.endpoint("http", k)))
    reply = await _outcome(roomy, "subscribe")
    assert isinstance(reply, dict) and "subscribe" in reply, reply
    tight = start_gateway(proxy_config(lambda k: served.endpoint("http", k), max_response_size=64 * 1024))
    assert await _outcome(tight, "subscribe") == INTERNAL


async def test_a_redirect_is_a_failed_call_and_carries_nothing_elsewhere(
    served: Served, start_gateway: GatewayStarter
) -> None:
    async with serve_backend() as elsewhere:
        served.backend.mode["connect"] = "redirect"
        served.backend.redirect_to = f"{elsewhere.http_url}/connect"
        extra = {"http": {"static_headers": {"Authorization": "Bearer proxy-secret"}}}
        gw = start_gateway(proxy_config(lambda k: served.endpoint("http", k), **extra))
        assert await _outcome(gw, "connect") == INTERNAL
        assert len(served.backend.of("connect")) == 1
        assert elsewhere.backend.calls == [], "the redirect was followed"
    assert "proxy-secret" not in gw.log_text() and "Traceback" not in gw.log_text()
