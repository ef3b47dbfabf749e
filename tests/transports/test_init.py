"""``init`` (GET ``/connection/init``, gateway/transports/init.py) on a real gateway: ``{}`` as
JSON, the connection endpoints' Origin check and CORS headers, GET only."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir: Path = tmp_path_factory.mktemp("init")
    gw = GatewayProcess(
        {"init": {"enabled": True}, "client": {"allowed_origins": ["https://app.example"]}}, workdir
    ).start()
    try:
        yield gw
    finally:
        gw.terminate()


def _request(url: str, method: str = "GET", origin: str = "") -> tuple[int, dict[str, str], bytes]:
    headers = {"Origin": origin} if origin else {}
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_get_answers_an_empty_json_object(gateway: GatewayProcess) -> None:
    status, headers, body = _request(gateway.url + "/connection/init")
    assert (status, body) == (200, b"{}")
    assert headers["content-type"] == "application/json; charset=utf-8"


def test_an_allowed_origin_gets_cors_headers_and_another_is_refused(gateway: GatewayProcess) -> None:
    status, headers, _ = _request(gateway.url + "/connection/init", origin="https://app.example")
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example"
    status, _, _ = _request(gateway.url + "/connection/init", origin="https://evil.example")
    assert status == 403


def test_only_get(gateway: GatewayProcess) -> None:
    status, _, _ = _request(gateway.url + "/connection/init", method="POST")
    assert status == 405


def test_off_by_default() -> None:
    from gateway.config.endpoint_checks import served_endpoints
    from gateway.config.loading import load_settings

    settings, warnings = load_settings(None, {"CENTRIFUGO_INIT_ENABLED": "true"})
    assert warnings == [] and served_endpoints(settings)["init"] == "/connection/init"
    settings, _ = load_settings(None, {})
    assert "init" not in served_endpoints(settings)
