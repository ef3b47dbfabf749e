"""Issue 28, risk 10: the transport docs say what the code serves. Every WebSocket and HTTP
transport the settings can enable has its default path in the docs' endpoint tables, and the
WebSocket row says Protobuf is selected by ``centrifuge-protobuf`` (it said "not supported")."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.schema import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"
TRANSPORTS = ("websocket", "sse", "http_stream", "uni_sse", "uni_http_stream", "uni_websocket")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_served_transport_is_in_the_endpoint_tables(transport: str) -> None:
    prefix = getattr(Settings(), transport).handler_prefix
    for page in ("transports.md", "gateway.md"):
        text = (DOCS / page).read_text()
        rows = [line for line in text.splitlines() if line.startswith("|") and f"`{prefix}`" in line]
        assert rows, f"{prefix} ({transport}) is missing from the endpoint table of docs/{page}"
    assert f"`{transport}`, WebTransport" not in (DOCS / "transports.md").read_text()


def test_the_websocket_row_documents_protobuf() -> None:
    text = (DOCS / "gateway.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| `/connection/websocket`")]
    assert "centrifuge-protobuf" in row and "Protobuf is not supported" not in row
