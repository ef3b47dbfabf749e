# ruff: noqa: E501, RUF005  (markdown tables are long lines; list building reads better with +)
"""The fan-out benchmark's report (loadtest/bench_fanout.py): its py-spy profile summary, the
machine facts, and the Markdown section of docs/PERFORMANCE.md between ``<!-- fanout:start -->``
and ``<!-- fanout:end -->`` (with its notes, Redis and Protobuf blocks), rendered from the runs'
JSON and written in place (the rest of the file is kept). Pure functions over the results, plus
the two writers; no process is started here."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- fanout:start -->", "<!-- fanout:end -->"
NOTES_START, NOTES_END = "<!-- fanout:notes:start -->", "<!-- fanout:notes:end -->"
REDIS_START, REDIS_END = "<!-- fanout:redis:start -->", "<!-- fanout:redis:end -->"
PB_START, PB_END = "<!-- fanout:protobuf:start -->", "<!-- fanout:protobuf:end -->"
NOTES_DEFAULT = (
    "_Hand-written analysis goes here; the benchmark keeps this block when it regenerates the section._"
)
REDIS2 = "gateway-redis-2nodes"
LABEL = {
    "baseline": "websockets.broadcast (baseline)",
    "gateway": "Taskcast gateway",
    "gateway-history": "Taskcast gateway, history on",
    REDIS2: "Taskcast gateway, Redis engine, 2 nodes",
    "nchan": "nginx + nchan (1 worker)",
}

# --------------------------------------------------------------------------------- profile summary


def _frame(f: str, line: bool) -> str:
    """'flush (/work/main/gateway/connection/client.py:523)' -> 'Client.flush (gateway/connection/client.py:523)'-ish, short path."""
    if " (" not in f:
        return f
    name, loc = f.split(" (", 1)
    loc = loc.rstrip(")").replace(str(ROOT) + "/", "").split("site-packages/")[-1]
    return f"{name} ({loc if line else loc.rsplit(':', 1)[0]})"


def summarize_profile(raw: str, top: int = 16) -> dict[str, Any]:
    """py-spy raw (collapsed) stacks -> self share per source line, inclusive share per gateway function."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, cnt = line.rpartition(" ")
        if not stack or not cnt.isdigit():
            continue
        c = int(cnt)
        total += c
        frames = stack.split(";")
        self_c[_frame(frames[-1], True)] += c
        for f in {_frame(x, False) for x in frames}:
            if "(gateway/" in f:
                incl[f] += c

    def share(cn: Counter[str]) -> list[tuple[str, float]]:
        return [(f, round(100 * v / total, 1)) for f, v in cn.most_common(top)] if total else []

    return {"samples": total, "self": share(self_c), "inclusive": share(incl)}


# --------------------------------------------------------------------------------- report


def env_info() -> dict[str, Any]:
    def ver(mod: str) -> str | None:
        try:
            from importlib.metadata import version

            return version(mod)
        except Exception:
            return None

    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "?")
    git = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    nginx_v = (
        subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
        if shutil.which("nginx")
        else None
    )
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "git": git,
        "python": platform.python_version(),
        "websockets": ver("websockets"),
        "uvicorn": ver("uvicorn"),
        "uvloop": ver("uvloop"),
        "orjson": ver("orjson"),
        "nginx": nginx_v,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "mem_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "loadavg_start": os.getloadavg(),
    }


def ok_steps(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in run.get("steps", []) if not s.get("saturated")]


def f_int(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else ("–" if v is None else str(v))


def f_ms(v: Any) -> str:
    return "–" if v is None or v < 0 else (f"{v:,.0f}" if v >= 100 else f"{v:.1f}")


def json_runs(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of the main tables: JSON subscribers (the Protobuf ones have their own block)."""
    return [r for r in res["runs"] if "error" not in r and r.get("protocol", "json") == "json"]


def render(res: dict[str, Any]) -> str:
    e, p = res["env"], res["params"]
    runs = json_runs(res)
    L: list[str] = [START, "", "## Fan-out: one hot channel, N WebSocket subscribers", ""]
    L += [
        f"Generated by `make bench-fanout` (`loadtest/bench_fanout.py`) on {e['date']}, git `{e['git']}`"
        f"{' — **quick run**' if p['quick'] else ''}. Raw results: `{p['json_rel']}`.",
        "",
    ]
    L += [
        "### Method",
        "",
        f"- Machine: {e['cores']} vCPU ({e['cpu']}), {e['mem_gib']} GiB, Linux {e['kernel']}, Python {e['python']}, "
        f"websockets {e['websockets']}, uvicorn {e['uvicorn']}, uvloop {e['uvloop']}, orjson {e['orjson']}"
        f"{', ' + e['nginx'] if e.get('nginx') else ''}. Load average at start: "
        f"{', '.join(f'{x:.2f}' for x in e['loadavg_start'])}.",
        "- Everything on 127.0.0.1. Server pinned to CPU 0; load client and publisher pinned to CPU 1 "
        "(the method of ../shared/PERFORMANCE-ANCHORS.md, so the numbers are comparable with it).",
        "- Subscribers: `loadtest/fanout_client.c`, one epoll thread, reads promptly (the worst case for the server), "
        "splits every frame on `\\n` (the gateway joins a tick's pushes into one frame), counts every publication, "
        "takes latency on 1 connection in 10 from the CLOCK_MONOTONIC send time at the start of the 200-byte payload, "
        "answers Centrifugo pings (`{}`) and WebSocket pings. Each sends the Centrifugo connect + subscribe in one frame "
        "(`client.insecure: true`, `channel.without_namespace.allow_subscribe_for_client: true`).",
        "- Gateway: `python -m taskcast gateway --config …` exactly as shipped (uvicorn, uvloop, httptools); "
        "history off, then on (`history_size` 100, `history_ttl` 300 s); default ping (25 s) and `client.queue_max_size` (1 MiB).",
        f"- Publisher: gateway and nchan by `POST /api/publish` (`X-API-Key`) / `POST /pub` over {p['http_conns']} "
        "keep-alive HTTP/1.1 connections, open loop (a publication waits only for a free connection). The baseline "
        "(`loadtest/baseline_ws_broadcast.py`: `websockets` 17 asyncio server on uvloop, `broadcast()` of the same push "
        "envelope, one frame serialised per connection) is published to over one WebSocket, fire and forget — cheaper "
        "for the baseline than an HTTP API.",
        f"- Ladder of offered deliveries/s: {', '.join(f'{x // 1000}k' for x in p['ladder'])}; publishes/s = offered / N. "
        f"Each rung: {p['warm']} s warm-up, {p['window']} s measured window, {p['drain']} s drain. Stop at the first "
        "saturated rung: delivered < 90 % of offered, publish rate < 90 % of target, p99 > 1 s, or connections closed.",
        "- Server CPU: psutil user+sys of the server process (nginx: master + worker; Redis engine, 2 nodes: both "
        "gateway processes + redis-server, all on CPU 0) over the window. "
        "*Deliveries per CPU-second* = deliveries in the window / server CPU seconds in the window.",
        "- Idle RSS per connection: server RSS after N subscribed connections and 2 s idle, minus RSS before, / N.",
        "- `busy` = whole-CPU utilisation (CPU 0, CPU 1) during the window, from /proc/stat: CPU 0 busy well above "
        "the server's own CPU % means other work shared the core.",
        "",
    ]
    ns = sorted({r["N"] for r in runs})
    for n in ns:
        L += [f"### N = {n:,}", ""]
        L += [
            "| Server | idle RSS/conn | sustained delivered/s (p50 / p99 ms) | peak delivered/s | stopped because |",
            "|---|---|---|---|---|",
        ]
        for r in [r for r in runs if r["N"] == n]:
            ok = ok_steps(r)
            best = max(ok, key=lambda s: s["delivered_per_s"]) if ok else None
            peak = max(r["steps"], key=lambda s: s["delivered_per_s"]) if r["steps"] else None
            L.append(
                f"| {LABEL[r['server']]} | {r.get('rss_per_conn_kib', '–')} KiB | "
                + (
                    f"{best['delivered_per_s']:,} ({f_ms(best['p50_ms'])} / {f_ms(best['p99_ms'])})"
                    if best
                    else "–"
                )
                + f" | {f_int(peak['delivered_per_s']) if peak else '–'} | {r.get('stopped', 'end of ladder')} |"
            )
        L += [
            "",
            "Per rung:",
            "",
            "| Server | offered/s | pub/s | delivered/s | p50 ms | p99 ms | server CPU % | deliveries / CPU-s | µs / delivery | client CPU % | busy CPU0/CPU1 % |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in [r for r in runs if r["N"] == n]:
            for s in r["steps"]:
                sat = " ⚠" if s.get("saturated") else ""
                L.append(
                    f"| {LABEL[r['server']]} | {s['offered_per_s']:,}{sat} | {s['pub_rate']:,.0f} | {s['delivered_per_s']:,} | "
                    f"{f_ms(s['p50_ms'])} | {f_ms(s['p99_ms'])} | {s['server_cpu_pct']} | {f_int(s['deliveries_per_cpu_s'])} | "
                    f"{s['server_us_per_delivery']} | {s['client_cpu_pct']} | {'/'.join(f'{x:.0f}' for x in s['cpu_busy_pct'][:2])} |"
                )
        L += ["", "⚠ = saturated rung (the ladder stopped there).", ""]
        L += ratio_lines(runs, n)
    L += targets(runs)
    L += render_redis_block(res) if any(r["server"] == REDIS2 for r in runs) else [REDIS_START, REDIS_END, ""]
    L += render_protobuf_block(res) if has_protobuf(res) else [PB_START, PB_END, ""]
    L += ["### Analysis: what limits us, and what to change", "", NOTES_START, NOTES_DEFAULT, NOTES_END, ""]
    L += profile_lines(
        res.get("profile"),
        "### Where the gateway's CPU goes (py-spy)",
        "the gateway (history off)",
        p["profile_rel"],
    )
    L += [
        "### Reproduce",
        "",
        "```",
        "make bench-fanout                                              # full run (JSON + Protobuf), ≈25–30 min, writes this section",
        ".venv/bin/python loadtest/bench_fanout.py --quick --out /tmp/perf.md   # N=1000, short rungs",
        ".venv/bin/python loadtest/bench_fanout.py --with-nchan --out docs/PERFORMANCE.md   # also apt-get nginx+nchan",
        ".venv/bin/python loadtest/bench_fanout.py --protobuf-block --out docs/PERFORMANCE.md   # only the Protobuf block",
        ".venv/bin/python loadtest/bench_fanout.py --redis-block --ns 5000 --servers baseline,gateway,gateway-redis-2nodes "
        "--out docs/PERFORMANCE.md   # only the Redis block",
        "```",
        "",
        "Options and caveats: `loadtest/README.md`.",
        "",
        END,
    ]
    return "\n".join(L)


def profile_lines(prof: dict[str, Any] | None, title: str, what: str, rel: str) -> list[str]:
    if not prof or not prof.get("summary", {}).get("samples"):
        return []
    s, sm = prof["step"], prof["summary"]
    L = [
        title,
        "",
        f"`py-spy record --nonblocking --rate 250` on {what}, N = {s['N']:,}, one extra rung at "
        f"{s['offered_per_s']:,} offered deliveries/s ({s['pub_rate']:.0f} publishes/s): delivered {s['delivered_per_s']:,}/s, "
        f"server CPU {s['server_cpu_pct']} %{cpu_parts_text(s)}, p99 {f_ms(s['p99_ms'])} ms. {sm['samples']:,} non-idle samples "
        "(percentages are of those; time in uvloop/kernel C code is charged to the calling Python line).",
        "",
        "| Source line (self time) | % | | Gateway function (inclusive) | % |",
        "|---|---|---|---|---|",
    ]
    for i in range(max(len(sm["self"]), len(sm["inclusive"]))):
        a_ = sm["self"][i] if i < len(sm["self"]) else ("", "")
        b_ = sm["inclusive"][i] if i < len(sm["inclusive"]) else ("", "")
        L.append(f"| `{a_[0]}` | {a_[1]} | | `{b_[0]}` | {b_[1]} |")
    return L + ["", f"Collapsed stacks: `{rel}` (open with speedscope or flamegraph.pl).", ""]


def cpu_parts_text(s: dict[str, Any]) -> str:
    parts = s.get("server_cpu_parts_pct")
    return f" ({' + '.join(f'{k} {v}' for k, v in parts.items())})" if parts else ""


def pooled(steps: list[dict[str, Any]]) -> float:
    """Deliveries per CPU-second over several rungs: all deliveries / all CPU (equal windows)."""
    cpu = sum(s["server_cpu_pct"] for s in steps) / 100
    return sum(s["delivered_per_s"] for s in steps) / cpu if cpu > 0 else 0.0


def redis_compare(runs: list[dict[str, Any]], n: int) -> dict[str, Any] | None:
    """The Redis 2-node run against the memory engine (``gateway``) of the same run, same N."""
    mem = next((r for r in runs if r["N"] == n and r["server"] == "gateway"), None)
    red = next((r for r in runs if r["N"] == n and r["server"] == REDIS2), None)
    if mem is None or red is None:
        return None
    msteps = {s["offered_per_s"]: s for s in ok_steps(mem)}
    rows = [(msteps[s["offered_per_s"]], s) for s in ok_steps(red) if s["offered_per_s"] in msteps]
    out: dict[str, Any] = {"mem": mem, "red": red, "rows": rows}
    if rows:
        out["pooled_mem"], out["pooled_red"] = pooled([m for m, _ in rows]), pooled([r for _, r in rows])
        out["ratio"] = out["pooled_red"] / out["pooled_mem"] if out["pooled_mem"] else 0.0
        out["per_rung"] = [r["deliveries_per_cpu_s"] / m["deliveries_per_cpu_s"] for m, r in rows]
    return out


def baseline_text(runs: list[dict[str, Any]], n: int) -> str:
    base = next((r for r in runs if r["N"] == n and r["server"] == "baseline"), None)
    ok = ok_steps(base) if base else []
    if not ok:
        return ""
    top = max(ok, key=lambda s: s["delivered_per_s"])
    return (
        f" For scale, `websockets.broadcast()` (baseline) in this run: sustained {top['delivered_per_s']:,}/s at "
        f"{f_int(top['deliveries_per_cpu_s'])} deliveries/CPU-s."
    )


def render_redis_block(res: dict[str, Any]) -> list[str]:
    """The Redis engine + 2 nodes subsection (between its own markers, so a ``--redis-block`` run
    can replace it alone)."""
    e, p = res["env"], res["params"]
    runs = json_runs(res)
    L = [REDIS_START, "", "### Redis engine, two gateway nodes, against the memory engine (issue 4)", ""]
    L += [
        f"Measured on {e['date']}, git `{e['git']}`, {'**quick run**, ' if p['quick'] else ''}load average at start "
        f"{', '.join(f'{x:.2f}' for x in e['loadavg_start'])}; servers in this run: {', '.join(p['servers'])}. "
        f"Raw results: `{p['json_rel']}`.",
        "",
        "- Setup: a throwaway `redis-server` (7, `--save '' --appendonly no`) and two gateway processes "
        '(`engine: {"type": "redis", "redis": {"address": …, "prefix": "bench"}}`, history off like the memory-engine '
        "row), **all three pinned to CPU 0**. The publisher posts to node A's server API only; the C client connects "
        "the even-numbered subscribers to node A and the odd ones to node B (N/2 each, one client process, so the "
        "deliveries add up and the percentiles are of the merged samples; latency sampled on 1 in 10 per node). "
        "Each publication goes node A → Lua `PUBLISH` in Redis → both nodes' PUB/SUB connections → their local subscribers.",
        "- **Server CPU counted** for this row: node A + node B + redis-server (user+sys, psutil), against the single "
        "gateway process of the memory engine. Idle RSS/conn is the sum of the three processes' growth / N.",
        "- Ratio = the Redis run's deliveries per server-CPU-second / the memory engine's, pooled over the rungs both "
        "sustain in this run (all deliveries / all CPU-seconds of those rungs); per-rung ratios alongside.",
        "",
    ]
    for n in sorted({r["N"] for r in runs}):
        c = redis_compare(runs, n)
        if c is None:
            continue
        L += [
            f"N = {n:,} (connected per node: {' / '.join(str(x) for x in c['red'].get('connected_per_node') or [])}; "
            f"idle RSS/conn {c['red'].get('rss_per_conn_kib', '–')} KiB vs {c['mem'].get('rss_per_conn_kib', '–')} KiB):",
            "",
            "| offered/s | memory: delivered/s, p50/p99 ms, CPU %, deliveries/CPU-s | Redis 2 nodes: delivered/s, p50/p99 ms, "
            "CPU % (node A + node B + redis), deliveries/CPU-s | node A / node B delivered/s, p99 ms | ratio |",
            "|---|---|---|---|---|",
        ]
        for m, r in c["rows"]:
            sides = " / ".join(f"{x['delivered_per_s']:,} ({f_ms(x['p99_ms'])})" for x in r.get("sides", []))
            L.append(
                f"| {m['offered_per_s']:,} | {m['delivered_per_s']:,}, {f_ms(m['p50_ms'])}/{f_ms(m['p99_ms'])}, "
                f"{m['server_cpu_pct']} %, {f_int(m['deliveries_per_cpu_s'])} | {r['delivered_per_s']:,}, "
                f"{f_ms(r['p50_ms'])}/{f_ms(r['p99_ms'])}, {r['server_cpu_pct']} %{cpu_parts_text(r)}, "
                f"{f_int(r['deliveries_per_cpu_s'])} | {sides} | "
                f"{r['deliveries_per_cpu_s'] / m['deliveries_per_cpu_s']:.2f}× |"
            )
        ceil = {k: max((s["delivered_per_s"] for s in ok_steps(c[k])), default=0) for k in ("mem", "red")}
        L += [
            "",
            f"Sustained ceiling: memory {ceil['mem']:,}/s ({c['mem'].get('stopped', 'end of ladder')}), "
            f"Redis 2 nodes {ceil['red']:,}/s ({c['red'].get('stopped', 'end of ladder')})."
            + baseline_text(runs, n),
            "",
        ]
    L += ["| Target (issue 4) | Measured | Met? |", "|---|---|---|"]
    for n in sorted({r["N"] for r in runs}):
        c = redis_compare(runs, n)
        if c and c["rows"]:
            pr = c["per_rung"]
            L.append(
                f"| Redis engine, 2 nodes: deliveries per server-CPU-second ≥ 0.7× the memory engine (N = {n:,}) | "
                f"{c['ratio']:.2f}× pooled over {len(pr)} common rungs ({c['pooled_red']:,.0f} vs {c['pooled_mem']:,.0f}); "
                f"per rung {min(pr):.2f}–{max(pr):.2f}× | {'yes' if c['ratio'] >= 0.7 else 'no'} |"
            )
    L += [""]
    L += profile_lines(
        res.get("profile_redis"),
        "#### Where node A's CPU goes (py-spy, Redis engine)",
        "node A (published to; serves N/2 subscribers)",
        p.get("profile_redis_rel", ""),
    )
    return L + [REDIS_END, ""]


def has_protobuf(res: dict[str, Any]) -> bool:
    return any(r.get("protocol") == "protobuf" for r in res["runs"])


def protobuf_pairs(res: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(JSON run, Protobuf run) of the same server kind and N, in run order."""
    ok = [r for r in res["runs"] if "error" not in r]
    pairs = []
    for pb in (r for r in ok if r.get("protocol") == "protobuf"):
        js = next(
            (
                r
                for r in ok
                if r["server"] == pb["server"] and r["N"] == pb["N"] and r.get("protocol", "json") == "json"
            ),
            None,
        )
        if js is not None:
            pairs.append((js, pb))
    return pairs


def ceiling(delivered: int) -> str:
    return f"{delivered:,}/s" if delivered else "no rung sustained"


def render_protobuf_block(res: dict[str, Any]) -> list[str]:
    """The JSON-vs-Protobuf subscribers subsection (issue 17), between its own markers so that a
    ``--protobuf-block`` run can replace it alone."""
    e, p = res["env"], res["params"]
    load_end = e.get("loadavg_end")
    L = [PB_START, "", "### Protobuf subscribers against JSON subscribers (issue 17)", ""]
    L += [
        f"Measured on {e['date']}, git `{e['git']}`, {'**quick run**, ' if p['quick'] else ''}servers "
        f"{', '.join(p['servers'])}. Raw results: `{p['json_rel']}`. Load average (1/5/15 min) at start "
        f"{', '.join(f'{x:.2f}' for x in e['loadavg_start'])}"
        + (f", at the end {', '.join(f'{x:.2f}' for x in load_end)}" if load_end else "")
        + ": **the machine is shared with other jobs and was loaded**, so compare the two protocols of one run "
        "(each Protobuf run follows its JSON run directly), not these figures with other sections.",
        "",
        "- Same server process, publisher and 200-byte payload as the JSON rows. The only change is the subscribers: "
        "the C client offers the `centrifuge-protobuf` subprotocol (a handshake answered without it counts as a "
        "failed connection), sends connect + subscribe as varint-delimited `Command`s in one binary frame, and walks "
        "each varint-delimited `Reply` just enough (`push` → `pub` → `data`) to count the publication and read the "
        "send time at the start of its JSON `data` bytes. Server pings (empty `Reply`) are answered with an empty `Command`.",
        "- Ratio = Protobuf deliveries per server-CPU-second / JSON's at the same offered rate; pooled over the rungs "
        "both sustain (all deliveries / all CPU-seconds of those rungs), or, when there are none, over every rung "
        "both measured. Deliveries per CPU-second stays a cost measure on a saturated rung (CPU the server got, "
        "per delivery), but a server starved of CPU 0 by other work (`server CPU %` far below the `busy` 100 %) "
        "saturates early, so on a loaded machine the ceilings say little.",
        "",
    ]
    for js, pb in protobuf_pairs(res):
        n = js["N"]
        jsteps = {s["offered_per_s"]: s for s in js["steps"]}
        psteps = {s["offered_per_s"]: s for s in pb["steps"]}
        L += [
            f"{LABEL[js['server']]}, N = {n:,} (connected: JSON {js.get('connected', '–')}, Protobuf "
            f"{pb.get('connected', '–')}; idle RSS/conn {js.get('rss_per_conn_kib', '–')} vs "
            f"{pb.get('rss_per_conn_kib', '–')} KiB):",
            "",
            "| offered/s | JSON: delivered/s, p50/p99 ms, server CPU %, deliveries/CPU-s, µs/delivery | "
            "Protobuf: delivered/s, p50/p99 ms, server CPU %, deliveries/CPU-s, µs/delivery | ratio |",
            "|---|---|---|---|",
        ]

        def cell(s: dict[str, Any] | None) -> str:
            if s is None:
                return "–"
            return (
                f"{s['delivered_per_s']:,}{' ⚠' if s.get('saturated') else ''}, {f_ms(s['p50_ms'])}/{f_ms(s['p99_ms'])}, "
                f"{s['server_cpu_pct']} %, {f_int(s['deliveries_per_cpu_s'])}, {s['server_us_per_delivery']}"
            )

        common = []
        for offered in sorted(set(jsteps) | set(psteps)):
            j, b = jsteps.get(offered), psteps.get(offered)
            ratio = "–"
            if j and b and j["deliveries_per_cpu_s"] and b["deliveries_per_cpu_s"]:
                ratio = f"{b['deliveries_per_cpu_s'] / j['deliveries_per_cpu_s']:.2f}×"
                common.append((j, b))
            L.append(f"| {offered:,} | {cell(j)} | {cell(b)} | {ratio} |")
        ceil = {
            k: max((s["delivered_per_s"] for s in ok_steps(r)), default=0)
            for k, r in (("js", js), ("pb", pb))
        }
        pooled_line = ""
        sustained = [(j, b) for j, b in common if not j.get("saturated") and not b.get("saturated")]
        for label, rows in (("both sustain", sustained), ("both measured (saturated ones included)", common)):
            pj, pp = pooled([j for j, _ in rows]), pooled([b for _, b in rows])
            if rows and pj:
                pooled_line = (
                    f" Pooled over the {len(rows)} rung(s) {label}: Protobuf {pp:,.0f} vs JSON {pj:,.0f} "
                    f"deliveries/CPU-s = {pp / pj:.2f}×."
                )
                break
        L += [
            "",
            f"Sustained ceiling: JSON {ceiling(ceil['js'])} ({js.get('stopped', 'end of ladder')}), Protobuf "
            f"{ceiling(ceil['pb'])} ({pb.get('stopped', 'end of ladder')}).{pooled_line}",
            "",
        ]
    L += ["⚠ = saturated rung (its ladder stopped there).", ""]
    failed = [r for r in res["runs"] if r.get("protocol") == "protobuf" and "error" in r]
    L += [f"- {LABEL[r['server']]} N = {r['N']:,}, Protobuf: run failed: `{r['error']}`" for r in failed]
    return L + ([""] if failed else []) + [PB_END, ""]


def ratio_lines(runs: list[dict[str, Any]], n: int) -> list[str]:
    base = next((r for r in runs if r["N"] == n and r["server"] == "baseline"), None)
    if base is None:
        return []
    bsteps = {s["offered_per_s"]: s for s in ok_steps(base)}
    L = [
        f"Ratios against the baseline measured in this run (N = {n:,}); deliveries per server-CPU-second at the same "
        "offered load (rungs where both are unsaturated):",
        "",
        "| Server | " + " | ".join(f"{o // 1000}k" for o in sorted(bsteps)) + " | sustained ceiling |",
        "|---|" + "---|" * (len(bsteps) + 1),
    ]
    bbest = max((s["delivered_per_s"] for s in bsteps.values()), default=0)
    for r in [r for r in runs if r["N"] == n and r["server"] != "baseline"]:
        mine = {s["offered_per_s"]: s for s in ok_steps(r)}
        cells = []
        for o in sorted(bsteps):
            if o in mine and mine[o]["deliveries_per_cpu_s"] and bsteps[o]["deliveries_per_cpu_s"]:
                cells.append(f"{mine[o]['deliveries_per_cpu_s'] / bsteps[o]['deliveries_per_cpu_s']:.2f}×")
            else:
                cells.append("–")
        best = max((s["delivered_per_s"] for s in mine.values()), default=0)
        ceil = f"{best / bbest:.1f}× ({best:,} vs {bbest:,})" if bbest else "–"
        L.append(f"| {LABEL[r['server']]} | " + " | ".join(cells) + f" | {ceil} |")
    return L + [""]


def targets(runs: list[dict[str, Any]]) -> list[str]:
    L = ["### Targets (issue 2)", "", "| Target | Measured | Met? |", "|---|---|---|"]
    nmax = max((r["N"] for r in runs), default=0)
    gw = next((r for r in runs if r["N"] == nmax and r["server"] == "gateway"), None)
    base = next((r for r in runs if r["N"] == nmax and r["server"] == "baseline"), None)
    if gw and base:
        bst = {s["offered_per_s"]: s for s in ok_steps(base)}
        common = [s for s in ok_steps(gw) if s["offered_per_s"] in bst]
        if common:
            top = max(common, key=lambda s: s["offered_per_s"])
            ratio = top["deliveries_per_cpu_s"] / bst[top["offered_per_s"]]["deliveries_per_cpu_s"]
            gpeak = max(s["deliveries_per_cpu_s"] or 0 for s in ok_steps(gw))
            bpeak = max(s["deliveries_per_cpu_s"] or 0 for s in bst.values())
            L.append(
                f"| deliveries per server-CPU-second ≥ 2× raw `websockets.broadcast()` at N = {nmax:,} | "
                f"{ratio:.2f}× at {top['offered_per_s']:,}/s offered (highest rung both sustain: "
                f"{top['deliveries_per_cpu_s']:,} vs {bst[top['offered_per_s']]['deliveries_per_cpu_s']:,}); best "
                f"sustained rung of each: {gpeak:,} vs {bpeak:,} = {gpeak / bpeak:.2f}× | "
                f"{'yes' if ratio >= 2 else 'no'} |"
            )
    for n in sorted({r["N"] for r in runs}):
        g = next((r for r in runs if r["N"] == n and r["server"] == "gateway"), None)
        s100 = next((s for s in (g or {}).get("steps", []) if s["offered_per_s"] == 100_000), None)
        if s100:
            good = not s100.get("saturated") and s100["p99_ms"] <= 100
            L.append(
                f"| p99 ≤ 100 ms at 100k deliveries/s (N = {n:,}) | p99 {f_ms(s100['p99_ms'])} ms, p50 "
                f"{f_ms(s100['p50_ms'])} ms, delivered {s100['delivered_per_s']:,}/s | {'yes' if good else 'no'} |"
            )
        if g and "rss_per_conn_kib" in g:
            L.append(
                f"| RSS per idle connection ≤ 16 KiB (N = {n:,}) | {g['rss_per_conn_kib']} KiB | "
                f"{'yes' if g['rss_per_conn_kib'] <= 16 else 'no'} |"
            )
    return L + [""]


def replace_block(text: str, start: str, end: str, block: str) -> str:
    pre, rest = text.split(start, 1)
    return pre + block + rest.split(end, 1)[1]


def write_redis_block(out: Path, block: str, start: str = REDIS_START, end: str = REDIS_END) -> None:
    """``--redis-block`` (``--protobuf-block`` with PB markers): replace only that subsection of the
    fan-out section (or insert it before the analysis notes), leaving the rest of the section as
    the last full run wrote it."""
    text = out.read_text() if out.exists() else ""
    if start in text and end in text:
        text = replace_block(text, start, end, block.rstrip("\n"))
    elif START in text and END in text:
        anchor = "### Analysis: what limits us" if "### Analysis: what limits us" in text else END
        pre, post = text.split(anchor, 1)
        text = pre + block + "\n" + anchor + post
    else:
        text = text.rstrip("\n") + "\n\n" + START + "\n\n" + block + "\n" + END + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def write_section(out: Path, section: str) -> None:
    """Replace only our section of ``out``; keep the hand-written notes block inside it, and the
    Redis block when this run did not measure the Redis engine."""
    if out.exists():
        text = out.read_text()
        for start, end in ((REDIS_START, REDIS_END), (PB_START, PB_END)):
            empty = start + "\n" + end
            if empty in section and start in text and end in text:
                kept = text.split(start, 1)[1].split(end, 1)[0]
                section = section.replace(empty, start + kept + end)
        if NOTES_START in text and NOTES_END in text:
            notes = text.split(NOTES_START, 1)[1].split(NOTES_END, 1)[0].strip("\n")
            section = section.replace(NOTES_START + "\n" + NOTES_DEFAULT, NOTES_START + "\n" + notes)
        if START in text and END in text:
            pre, rest = text.split(START, 1)
            post = rest.split(END, 1)[1]
            text = pre + section + post
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
    else:
        text = (
            "# Performance\n\nMeasured on the project machine; every section says how to reproduce it. "
            "Targets are from issue 2.\n\n" + section + "\n"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
