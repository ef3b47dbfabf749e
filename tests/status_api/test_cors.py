"""CORS on a real Status API process (status_api/cors.py, docs/status-api.md "Cross-origin apps"):
an allowed origin gets its preflight answered (204, methods, headers, Max-Age) and its responses
carry ``Access-Control-Allow-Origin`` (exactly that origin, with credentials); any other origin
gets a coded 403 and never sees itself reflected; same-origin and non-browser requests are
untouched; bad ``cors.allowed_origins`` refuse to start."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from status_api.config import ConfigError, build_config
from tests.status_api.harness import TEST_CONFIG, user_token
from tests.support import StatusApiProcess, merge, scaled

APP = "http://localhost:5173"
EVIL = "https://evil.example"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatusApiProcess]:
    workdir = tmp_path_factory.mktemp("cors")
    cfg = merge(
        TEST_CONFIG,
        {
            "database": {"url": f"sqlite+aiosqlite:///{workdir}/status.db"},
            "cors": {"allowed_origins": [APP, "HTTPS://App.Example.com"], "max_age_seconds": 900},
        },
    )
    proc = StatusApiProcess(cfg, workdir).start()
    yield proc
    proc.terminate()
    assert "Traceback" not in proc.log_text()


def _preflight(
    api: StatusApiProcess, origin: str, method: str = "GET", headers: str = "authorization"
) -> httpx.Response:
    return httpx.options(
        f"{api.url}/api/tasks",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": headers,
        },
        timeout=scaled(10),
    )


def test_preflight_from_an_allowed_origin_is_answered_and_cached(api: StatusApiProcess) -> None:
    r = _preflight(api, APP, "POST", "authorization, content-type, idempotency-key")
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == APP
    assert r.headers["access-control-allow-credentials"] == "true"
    assert r.headers["access-control-max-age"] == "900"
    assert "POST" in r.headers["access-control-allow-methods"]
    allowed = {h.strip() for h in r.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "idempotency-key"} <= allowed
    assert "origin" in r.headers["vary"].lower()
    # Configured in another case: the browser sends the origin lower-case.
    assert _preflight(api, "https://app.example.com").status_code == 204


def test_an_allowed_origin_reads_responses_with_credentials(api: StatusApiProcess) -> None:
    token = user_token("t1", "u1")
    r = httpx.get(
        f"{api.url}/api/tasks",
        headers={"Origin": APP, "Authorization": f"Bearer {token}", "Sec-Fetch-Site": "same-site"},
        timeout=scaled(10),
    )
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == APP
    assert r.headers["access-control-allow-credentials"] == "true"
    assert "Retry-After" in r.headers["access-control-expose-headers"]
    # An error answer is readable too (the app shows the code, not an opaque CORS failure).
    r = httpx.get(f"{api.url}/api/tasks", headers={"Origin": APP}, timeout=scaled(10))
    assert r.status_code == 401
    assert r.headers["access-control-allow-origin"] == APP


@pytest.mark.parametrize(
    "origin", [EVIL, "null", "http://localhost:5174", "http://localhost:5173.evil.example"]
)
def test_other_origins_get_a_coded_403_and_no_reflection(api: StatusApiProcess, origin: str) -> None:
    r = _preflight(api, origin)
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "CORS_ORIGIN_NOT_ALLOWED"
    assert "access-control-allow-origin" not in r.headers
    token = user_token("t1", "u1")
    r = httpx.get(
        f"{api.url}/api/tasks",
        headers={"Origin": origin, "Authorization": f"Bearer {token}", "Sec-Fetch-Site": "cross-site"},
        timeout=scaled(10),
    )
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "CORS_ORIGIN_NOT_ALLOWED"
    assert "access-control-allow-origin" not in r.headers


def test_a_preflight_for_a_method_or_header_the_api_does_not_take_is_refused(api: StatusApiProcess) -> None:
    r = _preflight(api, APP, "DELETE")
    assert (r.status_code, r.json()["error"]["code"]) == (403, "CORS_METHOD_NOT_ALLOWED")
    r = _preflight(api, APP, "GET", "authorization, x-custom")
    assert (r.status_code, r.json()["error"]["code"]) == (403, "CORS_HEADER_NOT_ALLOWED")
    assert "x-custom" in r.json()["error"]["message"]


def test_same_origin_and_non_browser_requests_are_untouched(api: StatusApiProcess) -> None:
    token = user_token("t1", "u1")
    auth = {"Authorization": f"Bearer {token}"}
    r = httpx.get(f"{api.url}/api/tasks", headers=auth, timeout=scaled(10))  # curl, a server
    assert r.status_code == 200
    assert "access-control-allow-origin" not in r.headers
    assert "origin" in r.headers["vary"].lower()  # a cache keeps it apart from cross-origin answers
    # The board, or an app behind a reverse proxy (its Host differs from the Origin: a Vite proxy
    # with changeOrigin): the browser marks the request same-origin.
    r = httpx.get(
        f"{api.url}/api/tasks",
        headers={**auth, "Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-origin"},
        timeout=scaled(10),
    )
    assert r.status_code == 200
    assert "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize(
    "origin", ["*", "http://localhost:5173/", "localhost:5173", "ftp://x.example", "https://*.example.com"]
)
def test_an_origin_that_is_not_scheme_host_port_refuses_to_start(origin: str) -> None:
    with pytest.raises(ConfigError, match=r"cors\.allowed_origins\[0\]"):
        build_config(merge(TEST_CONFIG, {"cors": {"allowed_origins": [origin]}}))


def test_the_event_route_keeps_the_cors_rules_and_the_body_bound(api: StatusApiProcess) -> None:
    """``POST /internal/v1/task-events`` is answered without the framework (status_api/event_route.py):
    without an Origin its answer still says ``Vary: Origin``; with one, the CORS middleware decides
    as on every route; a declared length over the bound is a coded 413 that closes the connection."""
    url = f"{api.url}/internal/v1/task-events"
    plain = httpx.post(url, content=b"{}", timeout=scaled(10))
    assert plain.status_code == 401 and plain.json()["error"]["code"] == "UNAUTHENTICATED"
    assert plain.headers["vary"] == "Origin" and "access-control-allow-origin" not in plain.headers
    allowed = httpx.post(url, content=b"{}", headers={"Origin": APP}, timeout=scaled(10))
    assert allowed.status_code == 401 and allowed.headers["access-control-allow-origin"] == APP
    refused = httpx.post(
        url, content=b"{}", headers={"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}, timeout=scaled(10)
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "CORS_ORIGIN_NOT_ALLOWED"
    big = httpx.post(url, content=b" " * (2 * 1024 * 1024), timeout=scaled(10))
    assert big.status_code == 413 and big.json()["error"]["code"] == "BODY_TOO_LARGE"
    assert big.headers["connection"] == "close"
