"""``taskcast trace EVENT_ID --config relay.yaml [--json] [--no-gateway]``: one command from a
worker's eventId to the browsers' channel — the task version the event produced, that version's
outbox rows (status, attempts, commit → publish time, last error; a row carrying several
publications — a task version's VERSION row — shows once per publication, with the row's id) and,
for each publication of a published row, the publication in the gateway's history of its
channel (offset and epoch), found by the tags the relay sets (``task`` and ``committed_at_ms``).

The relay's config file holds what it needs: ``database_url``, ``gateway_api_url`` and
``gateway_api_key`` (environment overrides apply as for ``taskcast relay``). Exit codes: 0 traced,
1 unknown eventId (``EVENT_NOT_FOUND`` on stderr), 2 bad arguments or config. Prints no payloads,
no secrets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import httpx

from relay.config import ConfigError, RelayConfig
from relay.config import load_config as load_relay_config
from relay.publisher import COMMITTED_AT_TAG, committed_at_ms
from status_api.storage.database import create_engine
from status_api.storage.outbox import CONFLATION_TAG
from status_api.storage.trace import Trace, TracedRow, trace_event

#: How many of a channel's newest publications are searched for a row's publication.
HISTORY_LIMIT = 200
NOT_IN_HISTORY = "history size/TTL passed, or a newer version superseded it"
NO_ROWS = "no outbox rows (none written for this version, or PUBLISHED rows purged by retention)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="taskcast trace", description="Where one event went.")
    p.add_argument("event_id")
    p.add_argument("--config", required=True, help="the relay's config file (database and gateway API)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--no-gateway", action="store_true", help="do not look the publications up")
    return p


async def _publication(http: httpx.AsyncClient, cfg: RelayConfig, task_id: str, row: TracedRow) -> Any:
    """The row's publication in its channel's history: ``{offset, epoch}``, or a reason string."""
    try:
        reply = await http.post(
            f"{cfg.gateway_api_url.rstrip('/')}/history",
            json={"channel": row.channel, "limit": HISTORY_LIMIT, "reverse": True},
            headers={"X-API-Key": cfg.gateway_api_key},
        )
        body = reply.json()
    except (httpx.HTTPError, ValueError) as exc:
        return f"gateway unreachable ({type(exc).__name__})"
    if "error" in body:
        return f"history error {body['error'].get('code')}: {body['error'].get('message', '')}"
    result = body.get("result", {})
    stamp = str(committed_at_ms(row.created_at))
    for pub in result.get("publications", []):
        tags = pub.get("tags") or {}
        if tags.get(CONFLATION_TAG) == task_id and tags.get(COMMITTED_AT_TAG) == stamp:
            return {"offset": pub.get("offset"), "epoch": result.get("epoch")}
    return f"not in the newest {HISTORY_LIMIT} publications ({NOT_IN_HISTORY})"


def _text(trace: Trace, found: dict[tuple[int, str], Any]) -> str:
    e = trace.event
    step = f" step {e.step_id} attempt {e.step_attempt}" if e.step_id else ""
    committed = e.committed_at.isoformat(sep=" ", timespec="milliseconds")
    lines = [
        f"event {e.event_id}: {e.event_type}{step} by {e.producer_id} (sourceSeq {e.source_seq})",
        f"  task {e.task_id} version {e.task_version} ({e.lifecycle_status}), committed {committed} UTC;"
        f" the task is at version {e.current_version} now",
    ]
    if not trace.rows:
        lines.append(f"  {NO_ROWS}")
    for r in trace.rows:
        latency = ""
        if r.published_at is not None:
            latency = f" {(r.published_at - r.created_at).total_seconds() * 1000:.0f} ms after commit"
        lines.append(
            f"  outbox #{r.id} {r.projection} → {r.channel}: {r.status}{latency}, attempts {r.attempts},"
            f" priority {r.priority}"
            + (f", last error: {r.last_error}" if r.last_error else "")
            + (f", trace {r.traceparent[3:35]}" if r.traceparent else "")
        )
        pub = found.get((r.id, r.channel))
        if isinstance(pub, dict):
            lines.append(f"    published: offset {pub['offset']} epoch {pub['epoch']} in {r.channel}")
        elif pub is not None:
            lines.append(f"    publication: {pub}")
    return "\n".join(lines)


async def _run(args: argparse.Namespace, cfg: RelayConfig) -> int:
    engine = create_engine(cfg.database_url)
    try:
        trace = await trace_event(engine, args.event_id)
    finally:
        await engine.dispose()
    if trace is None:
        print(f"EVENT_NOT_FOUND: no accepted event {args.event_id!r}", file=sys.stderr)
        return 1
    found: dict[tuple[int, str], Any] = {}
    if not args.no_gateway:
        async with httpx.AsyncClient(timeout=cfg.publish_timeout_seconds) as http:
            for row in trace.rows:
                if row.status == "PUBLISHED":
                    found[(row.id, row.channel)] = await _publication(http, cfg, trace.event.task_id, row)
    if args.json:
        doc = trace.as_json()
        for row in doc["rows"]:
            row["publication"] = found.get((row["id"], row["channel"]))
        print(json.dumps(doc))
    else:
        print(_text(trace, found))
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = load_relay_config(args.config)
    except ConfigError as exc:
        print(f"CONFIG_INVALID: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_run(args, cfg))
