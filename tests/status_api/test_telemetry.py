"""Client telemetry (status_api/telemetry.py): the pure report validation, then a real
``taskcast status-api serve`` process: an accepted report is visible on /metrics; oversized,
out-of-range, over-sampled, unauthenticated and over-rate reports are refused with codes and
record nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from status_api.domain.errors import DomainError
from status_api.telemetry import MAX_COUNT, parse_report
from tests.status_api.harness import TEST_CONFIG, user_token
from tests.support import StatusApiProcess, merge, scaled

REPORT: dict[str, Any] = {
    "v": 1,
    "transport": "websocket",
    "counts": {"connectAttempts": 3, "connects": 2, "connectFailures": 1, "reconnects": 1, "recoveries": 2,
               "recoveredFalse": 1, "unknownOperations": 1, "unknownSchemas": 0, "clockSkew": 1},
    "samples": {"commitToVisibleMs": [12.5, 40, 900], "snapshotLoadMs": [80], "noticeDisplayMs": [30]},
}  # fmt: skip


def _code(body: Any, max_samples: int = 200) -> str:
    with pytest.raises(DomainError) as exc:
        parse_report(body, max_samples)
    return exc.value.code


# --- pure -----------------------------------------------------------------------------------


def test_a_valid_report_is_parsed_and_an_unknown_transport_becomes_other() -> None:
    r = parse_report(REPORT, 200)
    assert r.transport == "websocket" and r.counts["connects"] == 2
    assert r.samples["commitToVisibleMs"] == (12.5, 40.0, 900.0)
    assert parse_report({**REPORT, "transport": "x" * 500}, 200).transport == "other"
    assert parse_report({"v": 1}, 200).counts == {}


@pytest.mark.parametrize(
    ("patch", "code"),
    [
        ({"counts": {"connects": -1}}, "VALUE_OUT_OF_RANGE"),
        ({"counts": {"connects": MAX_COUNT + 1}}, "VALUE_OUT_OF_RANGE"),
        ({"counts": {"recoveries": 1, "recoveredFalse": 2}}, "VALUE_OUT_OF_RANGE"),
        ({"counts": {"connectAttempts": 1, "connects": 2}}, "VALUE_OUT_OF_RANGE"),
        ({"counts": {"connects": 1}}, "VALUE_OUT_OF_RANGE"),
        ({"samples": {"commitToVisibleMs": [-5]}}, "VALUE_OUT_OF_RANGE"),
        ({"samples": {"commitToVisibleMs": [3_600_001]}}, "VALUE_OUT_OF_RANGE"),
        ({"samples": {"snapshotLoadMs": [1e300]}}, "VALUE_OUT_OF_RANGE"),
        ({"counts": {"connects": True}}, "INVALID_TELEMETRY"),
        ({"counts": {"connects": 1.5}}, "INVALID_TELEMETRY"),
        ({"counts": {"bogus": 1}}, "INVALID_TELEMETRY"),
        ({"samples": {"commitToVisibleMs": ["1"]}}, "INVALID_TELEMETRY"),
        ({"samples": {"commitToVisibleMs": 5}}, "INVALID_TELEMETRY"),
        ({"samples": {"other": [1]}}, "INVALID_TELEMETRY"),
        ({"v": 2}, "INVALID_TELEMETRY"),
        ({"extra": 1}, "INVALID_TELEMETRY"),
        ({"transport": 5}, "INVALID_TELEMETRY"),
    ],
)
def test_bad_values_are_refused_with_a_code(patch: dict[str, Any], code: str) -> None:
    assert _code({**REPORT, **patch}) == code


def test_not_an_object_and_too_many_samples_are_refused() -> None:
    assert _code([1, 2]) == "INVALID_TELEMETRY"
    assert _code({"v": 1, "samples": {"commitToVisibleMs": [1] * 3, "snapshotLoadMs": [1] * 3}}, 5) == (
        "TOO_MANY_SAMPLES"
    )


# --- a real Status API process ----------------------------------------------------------------


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatusApiProcess]:
    workdir = tmp_path_factory.mktemp("telemetry")
    cfg = merge(
        TEST_CONFIG,
        {
            "database": {"url": f"sqlite+aiosqlite:///{workdir}/status.db"},
            "telemetry": {"max_body_bytes": 2048, "max_samples": 50, "reports_per_minute": 3},
        },
    )
    proc = StatusApiProcess(cfg, workdir).start()
    yield proc
    proc.terminate()
    assert "Traceback" not in proc.log_text(), "an expected refusal was logged as a crash"


def _metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _post(api: StatusApiProcess, body: Any, user: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {user_token('t1', user)}", **kw.pop("headers", {})}
    return httpx.post(f"{api.url}/api/telemetry/client", json=body, headers=headers, timeout=scaled(30), **kw)


def test_an_accepted_report_is_visible_on_metrics(api: StatusApiProcess) -> None:
    assert _post(api, REPORT, "alice").status_code == 204
    text = httpx.get(f"{api.url}/metrics", timeout=scaled(30)).text
    ws = '{transport="websocket"}'
    assert _metric(text, "taskcast_state_commit_to_visible_seconds_count", ws) == 3
    assert _metric(text, "taskcast_state_commit_to_visible_seconds_sum", ws) == pytest.approx(0.9525)
    assert (
        _metric(text, "taskcast_state_commit_to_visible_seconds_bucket", '{le="0.05",transport="websocket"}')
        == 2
    )
    assert _metric(text, "taskcast_client_snapshot_load_seconds_count", ws) == 1
    assert _metric(text, "taskcast_client_notice_display_seconds_count", ws) == 1
    assert _metric(text, "taskcast_client_connects_total", '{outcome="success",transport="websocket"}') == 2
    assert _metric(text, "taskcast_client_connects_total", '{outcome="failure",transport="websocket"}') == 1
    assert _metric(text, "taskcast_client_reconnects_total", ws) == 1
    assert _metric(text, "taskcast_client_recoveries_total", '{recovered="false",transport="websocket"}') == 1
    assert _metric(text, "taskcast_client_unknown_total", '{kind="operation",transport="websocket"}') == 1
    assert _metric(text, "taskcast_client_clock_skew_total", ws) == 1
    assert _metric(text, "taskcast_client_telemetry_reports_total", '{outcome="accepted"}') >= 1


def _count_visible(api: StatusApiProcess) -> float:
    text = httpx.get(f"{api.url}/metrics", timeout=scaled(30)).text
    return sum(
        float(v)
        for v in re.findall(r"^taskcast_state_commit_to_visible_seconds_count\{[^}]*\} (\S+)$", text, re.M)
    )


def test_bad_reports_are_refused_with_codes_and_record_nothing(api: StatusApiProcess) -> None:
    before = _count_visible(api)
    cases: list[tuple[httpx.Response, int, str]] = []
    out_of_range = {**REPORT, "samples": {"commitToVisibleMs": [10, -1]}}
    cases.append((_post(api, out_of_range, "bob"), 422, "VALUE_OUT_OF_RANGE"))
    cases.append(
        (_post(api, {**REPORT, "samples": {"commitToVisibleMs": [1] * 51}}, "carol"), 413, "TOO_MANY_SAMPLES")
    )
    padded = {**REPORT, "transport": "w" * 4000}
    cases.append((_post(api, padded, "dave"), 413, "BODY_TOO_LARGE"))
    chunked = httpx.post(
        f"{api.url}/api/telemetry/client",
        content=iter([b'{"v":1,"transport":"', b"w" * 3000, b'"}']),
        headers={"Authorization": f"Bearer {user_token('t1', 'erin')}", "Content-Type": "application/json"},
        timeout=scaled(30),
    )
    cases.append((chunked, 413, "BODY_TOO_LARGE"))
    no_auth = httpx.post(f"{api.url}/api/telemetry/client", json=REPORT, timeout=scaled(30))
    cases.append((no_auth, 401, ""))
    garbage = httpx.post(
        f"{api.url}/api/telemetry/client",
        content=b"{not json",
        headers={"Authorization": f"Bearer {user_token('t1', 'frank')}"},
        timeout=scaled(30),
    )
    cases.append((garbage, 422, "INVALID_JSON"))
    for response, status, code in cases:
        assert response.status_code == status, response.text
        if code:
            assert response.json()["error"]["code"] == code
    assert _count_visible(api) == before


def test_reports_are_rate_limited_per_user(api: StatusApiProcess) -> None:
    codes = [_post(api, {"v": 1}, "greedy").status_code for _ in range(6)]
    assert codes[:3] == [204, 204, 204] and 429 in codes[3:]
    assert _post(api, {"v": 1}, "polite").status_code == 204
