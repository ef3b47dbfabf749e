"""The markdown of the capacity model's e2e and idle steps (``capacity_e2e.py``'s results)."""

from __future__ import annotations

from typing import Any

from capacity_e2e import PATH


def _n(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return f"{v:,.{digits}f}"


def _cpu_columns(rungs: list[dict[str, Any]]) -> list[str]:
    """The processes to show, path first, in a stable order."""
    names = list(rungs[0]["cpu_ms_per_event"]) if rungs else []
    order = [*PATH, "nginx", "reconciler", "producer", "clients"]
    return sorted(names, key=lambda n: (next((i for i, g in enumerate(order) if n.startswith(g)), 99), n))


def _pair(v: Any) -> str:
    return f"{_n(v[0])} / {_n(v[1])}" if v else "–"


def _gc(gateways: list[dict[str, float]]) -> str:
    """Per gateway: ``n, ms total, k over 50 ms`` of its full (generation 2) collections."""
    return (
        "; ".join(
            f"{g.get('gen2_collections', 0):.0f}, {g.get('gen2_ms', 0):.0f} ms, "
            f"{g.get('gen2_over_50ms', 0):.0f} > 50 ms"
            for g in gateways
        )
        or "–"
    )


def markdown_e2e(e2e: dict[str, Any]) -> str:
    rungs = e2e.get("rungs", [])
    rows = [
        f"| {r['offered']:,} | {_n(r['accepted_per_s'])} | {r['errors']} | {_n(r['request_p50_ms'])} / "
        f"{_n(r['request_p99_ms'])} | {_n(r['commit_to_visible_p50_ms'])} / "
        f"{_n(r['commit_to_visible_p99_ms'])} "
        f"| {_n(r['deliveries_per_s'])} | {_n(r['deliveries_per_event'], 2)} "
        f"| **{_n(r['path_cpu_ms_per_event'], 2)}** | {'yes' if r['holds'] else 'no'} "
        f"| {r['load'][0]} / {r['load'][1]} |"
        for r in rungs
    ]
    cols = _cpu_columns(rungs)
    cpu_rows = [
        f"| {r['offered']:,} | " + " | ".join(_n(r["cpu_ms_per_event"][c], 3) for c in cols) + " |"
        for r in rungs
    ]
    share_rows = [
        f"| {r['offered']:,} | " + " | ".join(_n(r["cpu_share"][c], 0) for c in cols) + " |" for r in rungs
    ]
    stage_rows = [
        f"| {r['offered']:,} | {_pair(r.get('commit_to_relay_send_p50_p99_ms'))} "
        f"| {_pair(r.get('relay_send_to_visible_p50_p99_ms'))} | {_gc(r.get('gateway_gc', []))} |"
        for r in rungs
    ]
    first = rungs[0] if rungs else None
    verdict = "not measured"
    if first is not None:
        verdict = (
            f"{first['offered']:,} events/s: **{'holds' if first['holds'] else 'does not hold'}** "
            f"({_n(first['accepted_per_s'])} accepted/s, p99 commit→visible "
            f"{_n(first['commit_to_visible_p99_ms'])} ms, whole path {_n(first['path_cpu_ms_per_event'], 2)} "
            "ms of CPU per event against the 2.5 ms target)"
        )
    ceiling = e2e.get("ceiling")
    ceiling_text = (
        "none of the rungs held"
        if ceiling is None
        else f"**{ceiling:,} events/s**" + (" (the last rung offered; the ladder did not reach a failure)"
                                             if e2e.get("ceiling_bounded") else "")
    )  # fmt: skip
    conn = e2e.get("connect", {})
    return "\n".join(
        [
            "Topology: MariaDB + Redis (throwaway), "
            f"`status-api serve --workers {e2e['status_api_workers']}`, "
            f"the reconciler, {e2e['relays']} relays woken through Redis (deploy/relay.yaml), "
            f"{e2e['gateways']} gateway(s), nginx (the relays' `gateway_api_url`). {e2e['tasks']:,} active "
            f"tasks owned by {e2e['users']:,} users; {e2e.get('board_connections', 0):,} board + "
            f"{e2e.get('detail_connections', 0):,} detail connections ({e2e.get('watched_tasks', 0):,} "
            f"watched tasks) connected in {_n(conn.get('seconds'))} s. Setup: tasks created in "
            f"{_n(e2e.get('create_tasks_s'))} s, first events in "
            f"{_n(e2e.get('first_events', {}).get('seconds'))} s. Each rung: {e2e['warmup_s']:g} s warm-up, "
            f"{e2e['window_s']:g} s window, open loop over {e2e['http_conns']} keep-alive connections from "
            f"one producer process. Load = 1-minute load average at the window's start / end.",
            "",
            "| offered/s | accepted/s | errors | HTTP p50 / p99 ms | commit→visible p50 / p99 ms "
            "| deliveries/s "
            "| deliveries per event | path CPU ms per event | holds | load |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
            *rows,
            "",
            f"{verdict}. Ceiling (≥ 95 % accepted and p99 ≤ 100 ms): {ceiling_text}.",
            "",
            "Where commit→visible goes (the relay's send time is each publication's `published_at_ms` "
            "tag; one machine, one clock) and the gateway's garbage-collector pauses in the window "
            "(`taskcast_gateway_gc_pause_seconds`, per gateway: full collections, their total ms, "
            "how many over 50 ms):",
            "",
            "| offered/s | commit → relay send p50 / p99 ms | relay send → visible p50 / p99 ms "
            "| gateway full collections |",
            "|---:|---:|---:|---|",
            *stage_rows,
            "",
            "CPU ms per accepted event, per process "
            "(path = Status API + relays + gateway + MariaDB + Redis):",
            "",
            "| offered/s | " + " | ".join(cols) + " |",
            "|---:|" + "---:|" * len(cols),
            *cpu_rows,
            "",
            "The same as % of one core over the window:",
            "",
            "| offered/s | " + " | ".join(cols) + " |",
            "|---:|" + "---:|" * len(cols),
            *share_rows,
        ]
    )


def markdown_idle(idle: dict[str, Any]) -> str:
    rows = [
        f"| {r['connections']:,} | {r['failed']} | {r['connect_s']} | {r['rss_per_conn_kib']} "
        f"| {100 * r['idle_cpu_share']:.1f} % | {r['us_per_ping']} "
        f"| {r['cores_100k_at_25s']:.2f} "
        f"| {r['load'][0]} → {r['load'][1]} |"
        for r in idle.get("rungs", [])
    ]
    error = f" Error: `{idle['error']}`." if idle.get("error") else ""
    if idle.get("fd_limited"):
        error += f" Target lowered to the descriptor limit ({idle.get('nofile')})."
    return "\n".join(
        [
            f"Idle connections (`{idle['command']}`).{error}",
            "",
            "| connections | failed | connect s | RSS KiB per conn | idle gateway CPU | µs per ping "
            "| cores for 100k at 25 s | load |",
            "|---:|---:|---:|---:|---:|---:|---:|---|",
            *rows,
        ]
    )
