"""docs/consumers.md's example runs as written in a real gateway process against a real
PostgreSQL (only the DSN's port differs), and a consumer type Taskcast refuses stops the
gateway at startup with the option's name and the reason; every consumer option is documented."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from gateway.config import doc as config_doc
from gateway.config.sections.consumers import ConsumerSettings
from tests.support.procs import GatewayProcess
from tests.support.waiting import scaled, wait_until_blocking

DOC = Path(__file__).resolve().parents[3] / "docs" / "consumers.md"

pytestmark = pytest.mark.timeout(120)


def example(name: str) -> str:
    """The fenced block after ``<!-- example: name -->`` in docs/consumers.md."""
    found = re.search(rf"<!-- example: {name} -->\n```\w*\n(.*?)```", DOC.read_text(), re.S)
    assert found, name
    return found.group(1)


def api(gateway: GatewayProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{gateway.api_url}/{method}",
        data=json.dumps(params).encode(),
        headers={"X-API-Key": gateway.api_key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=scaled(5)) as resp:
        return dict(json.loads(resp.read()))


def sql(dsn: str, *statements: str) -> object:
    """Run ``statements`` on one connection; the last one's first value."""

    async def run() -> object:
        conn = await asyncpg.connect(dsn)
        try:
            *commands, last = statements
            for statement in commands:
                await conn.execute(statement)
            if last.startswith("SELECT"):
                return await conn.fetchval(last)
            return await conn.execute(last)
        finally:
            await conn.close()

    return asyncio.run(run())


def test_the_documented_outbox_example_delivers(tmp_path: Path, postgres_dsn: str) -> None:
    config = json.loads(example("gateway-config"))
    port = postgres_dsn.rsplit(":", 1)[1].split("/")[0]
    pg = config["consumers"][0]["postgresql"]
    pg["dsn"] = pg["dsn"].replace("5432", port)
    sql(
        postgres_dsn,
        "DROP TABLE IF EXISTS centrifugo_outbox CASCADE",
        example("outbox-ddl"),
        example("outbox-notify"),
    )
    gateway = GatewayProcess({**config, "prometheus": {"enabled": True}}, tmp_path)
    try:
        gateway.start()
        # The same publication written twice (a producer's retry): one publication.
        sql(postgres_dsn, example("outbox-insert"), example("outbox-insert"))

        def published() -> list[Any]:
            result = api(gateway, "history", {"channel": "updates:news", "limit": 10})["result"]
            return list(result.get("publications", []))

        wait_until_blocking(published, what="the outbox row published")
        count = "SELECT count(*) FROM centrifugo_outbox"
        wait_until_blocking(lambda: sql(postgres_dsn, count) == 0, what="both rows deleted", every=0.1)
        assert [p["data"] for p in published()] == [{"text": "Hello, world!"}]
        counted = 'centrifugo_consumers_messages_processed_total{consumer_name="outbox"} 2.0'

        def scrape() -> str:
            with urllib.request.urlopen(f"{gateway.internal_url}/metrics", timeout=scaled(5)) as resp:
                return str(resp.read().decode())

        # A round's rows are counted after its COMMIT: the table can be seen empty just before.
        wait_until_blocking(lambda: counted in scrape(), what="both rows counted", every=0.1)
    finally:
        gateway.terminate()
        sql(postgres_dsn, "DROP TABLE IF EXISTS centrifugo_outbox CASCADE", "SELECT 1")


def test_a_consumer_type_no_test_can_run_stops_startup_with_the_reason(tmp_path: Path) -> None:
    """The process exits at startup (every refused type takes the same path: test_consumer_config)."""
    kind = "kafka"
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"consumers": [{"name": "bus", "enabled": True, "type": kind, kind: {}}]}))
    out = subprocess.run(
        [sys.executable, "-m", "taskcast", "gateway", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert out.returncode != 0
    said = out.stdout + out.stderr
    assert f"consumers[bus].type: {kind} consumers are not supported" in said, said
    assert "no test has run" in said


def test_every_consumer_option_is_documented() -> None:
    text = DOC.read_text()
    for option in config_doc.options(ConsumerSettings):
        if ".tls." in option.path:  # each section's tls is one documented (refused) option
            assert f"`{option.path.split('.tls.')[0]}.tls`" in text, option.path
            continue
        leaf = option.path.split(".")[-1]
        section = option.path.split(".")[0]
        assert f"`{option.path}`" in text or (f"{section}." in text and leaf in text), option.path
    assert {f.name for f in dataclasses.fields(ConsumerSettings)} >= {
        "postgresql",
        "redis_stream",
        "nats_jetstream",
    }
