"""Where commit→publish goes, stage by stage, for ``bench_e2e.py`` (issue 16).

Per accepted event the bench records, all on the one machine's wall clock (ms):

* ``sent`` / ``answered``: the load generator sends the event / reads the 2xx (after COMMIT);
* ``committed``: the outbox row's commit clock (``tags.committed_at_ms`` = ``created_at``);
* ``hint``: the first wake-up hint seen on the relays' Redis channel at or after ``committed``
  (this process subscribes to it like a relay does);
* ``published``: the relay's send time (``tags.published_at_ms``); ``visible``: the client has it.

A publication is matched to its event by ``(task id, task version)``. :func:`summarise` turns the
records into p50/p99 per stage; :func:`relay_counters` reads the counters and histogram sums of a
relay's ``/metrics`` so a rung can report claims, wake-ups by source and the mean claim / publish
durations as deltas. Bench code only: no assertions, nothing here is imported by the services.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleet import now_ms, pct

#: The stages reported, each ``(name, start field, end field)``.
STAGES = (
    ("send → commit clock", "sent", "committed"),
    ("commit clock → 2xx", "committed", "answered"),
    ("commit clock → hint", "committed", "hint"),
    ("hint → relay send", "hint", "published"),
    ("commit clock → relay send", "committed", "published"),
    ("relay send → visible", "published", "visible"),
)


@dataclass
class StageRecorder:
    """Collects the per-event timestamps of one rung (``take`` resets)."""

    events: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    hints: list[float] = field(default_factory=list)

    def sent(self, key: tuple[str, str], sent_ms: float, answered_ms: float) -> None:
        self.events.setdefault(key, {}).update(sent=sent_ms, answered=answered_ms)

    def seen(self, pub: dict[str, Any], committed: float, published: float | None, visible: float) -> None:
        task = (pub.get("data") or {}).get("task") or {}
        if "id" in task and "version" in task:
            rec = self.events.setdefault((task["id"], str(task["version"])), {})
            rec.update(committed=committed, visible=visible)
            if published is not None:
                rec["published"] = published

    def take(self) -> tuple[dict[tuple[str, str], dict[str, float]], list[float]]:
        out = self.events, sorted(self.hints)
        self.events, self.hints = {}, []
        return out

    async def listen(self, redis_url: str, channel: str, ready: asyncio.Event) -> None:
        """Record the arrival time of every hint on ``channel`` until cancelled."""
        import redis.asyncio as redis

        client = redis.Redis.from_url(redis_url)
        try:
            async with client.pubsub(ignore_subscribe_messages=True) as ps:
                await ps.subscribe(channel)
                ready.set()
                while True:
                    msg = await ps.get_message(timeout=1.0)
                    if msg is not None:
                        self.hints.append(now_ms())
        finally:
            await client.aclose()


def summarise(events: dict[tuple[str, str], dict[str, float]], hints: list[float]) -> dict[str, Any]:
    """p50/p99 (ms) and sample count of each of :data:`STAGES`."""
    for rec in events.values():
        c = rec.get("committed")
        if c is not None:
            # the commit clock is truncated to the ms: a hint in the same ms counts
            i = bisect.bisect_left(hints, c - 1.0)
            if i < len(hints):
                rec["hint"] = hints[i]
    out: dict[str, Any] = {}
    for name, a, b in STAGES:
        xs = [r[b] - r[a] for r in events.values() if a in r and b in r]
        out[name] = {"p50": pct(xs, 50), "p99": pct(xs, 99), "n": len(xs)}
    return out


def relay_counters(url: str) -> dict[str, float]:
    """The relay's counter and histogram ``_sum``/``_count`` samples (labels kept in the name)."""
    with contextlib.suppress(OSError):
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("taskcast_relay_") and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                if name.endswith(("_total", "_sum", "_count")) or "_total{" in name:
                    out[name] = float(value)
        return out
    return {}


def gc_pauses(url: str) -> dict[str, float]:
    """A gateway's ``taskcast_gateway_gc_pause_seconds`` samples (count, sum, buckets; labels in the
    name), {} when its ``/metrics`` does not answer."""
    with contextlib.suppress(OSError):
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("taskcast_gateway_gc_pause_seconds"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out
    return {}


def gc_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per generation, what a rung added: collections, their total ms, and those over 50 ms."""
    out: dict[str, float] = {}
    for gen in ("0", "1", "2"):
        label = f'generation="{gen}"'

        def delta(suffix: str, extra: str = "", label: str = label) -> float:
            keys = [k for k in after if suffix in k and label in k and extra in k]
            return after[keys[0]] - before.get(keys[0], 0.0) if keys else 0.0

        n = delta("_count")
        if n:
            out[f"gen{gen}_collections"] = n
            out[f"gen{gen}_ms"] = round(1000 * delta("_sum"), 1)
            out[f"gen{gen}_over_50ms"] = n - delta("_bucket", 'le="0.05"')
    return out


def relay_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What a rung added: claims, wake-ups by source, mean claim/publish/mark ms."""
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    out = {
        k.removeprefix("taskcast_relay_"): v for k, v in d.items() if k.endswith("_total") or "_total{" in k
    }
    out = {k: v for k, v in out.items() if v}
    for h in ("claim_seconds", "publish_request_seconds", "mark_seconds"):
        n = d.get(f"taskcast_relay_{h}_count", 0.0)
        if n:
            out[f"{h.removesuffix('_seconds')}_mean_ms"] = round(1000 * d[f"taskcast_relay_{h}_sum"] / n, 2)
    return out


def render(res: dict[str, Any], fmt: Callable[[Any], str]) -> str:
    """The commit→publish breakdown per pipeline rate and the idle CPU (loadtest/e2e_stages.py)."""
    out = ""
    rungs = [r for r in res.get("pipeline", []) if r.get("stages")]
    if rungs:
        names = list(rungs[0]["stages"])
        out += "\nStages (ms, p50 / p99; wall clock of the one machine; `loadtest/e2e_stages.py`):\n\n"
        out += "| offered/s | " + " | ".join(names) + " | relay claims (rows) / wake-ups |\n"
        out += "|---:|" + "---:|" * len(names) + "---|\n"
        for r in rungs:
            cells = [f"{fmt(r['stages'][n]['p50'])} / {fmt(r['stages'][n]['p99'])}" for n in names]
            relays = "; ".join(
                f"{d.get('claims_total', 0):.0f} ({d.get('claimed_rows_total', 0):.0f}) / "
                + ", ".join(f"{k[14:-1]} {v:.0f}" for k, v in d.items() if k.startswith("wakeups_total{"))
                for d in r.get("relays", [])
            )
            out += f"| {r['offered']:,} | " + " | ".join(cells) + f" | {relays} |\n"
    idle = res.get("idle")
    if idle:
        cpu = ", ".join(f"{k} {v:.1f} %" for k, v in idle["cpu_pct"].items())
        out += f"\nIdle ({idle['seconds']:.0f} s, no traffic, load {idle['load']}): {cpu} of one core.\n"
    return out
