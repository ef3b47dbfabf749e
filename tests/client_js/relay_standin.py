"""A stand-in for the outbox relay (issue 6) in the client-js end-to-end and browser tests.

Until ``relay/`` lands on main, this tiny loop does the relay's job against a real database and a
real gateway: it claims due ``task_outbox`` rows through ``status_api.storage.outbox`` (the module
the relay uses), POSTs each payload to the gateway's ``/api/publish`` and marks the row PUBLISHED;
a failed publish (gateway down or restarting) goes back to PENDING and is retried on a later pass.
It has no backoff, DEAD handling or leases to speak of: it is test scaffolding, not the relay.

    python -m tests.client_js.relay_standin --db URL --gateway http://127.0.0.1:PORT --api-key KEY
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from datetime import timedelta

import httpx

from status_api.service import utc_now
from status_api.storage import outbox
from status_api.storage.database import create_engine

RELAY_ID = "client-js-relay-standin"
POLL_SECONDS = 0.05  # the relay's own polling interval when the outbox is empty
BATCH = 100


async def run(db_url: str, gateway: str, api_key: str, stop: asyncio.Event) -> None:
    engine = create_engine(db_url)
    try:
        async with httpx.AsyncClient(base_url=gateway, timeout=5.0) as http:
            while not stop.is_set():
                async with engine.begin() as conn:
                    rows = await outbox.claim(conn, RELAY_ID, BATCH, utc_now(), lease_seconds=30)
                published: list[int] = []
                failed: list[int] = []
                for row in rows:
                    try:
                        r = await http.post(
                            "/api/publish",
                            json={"channel": row.channel, "data": row.payload},
                            headers={"X-API-Key": api_key},
                        )
                        ok = r.status_code == 200 and "error" not in r.json()
                    except httpx.HTTPError:
                        ok = False
                    (published if ok else failed).append(row.id)
                    if not ok:
                        failed.extend(x.id for x in rows[rows.index(row) + 1 :])
                        break
                async with engine.begin() as conn:
                    await outbox.mark_published(conn, published, RELAY_ID, utc_now())
                    due = utc_now() + timedelta(milliseconds=200)
                    for row_id in failed:
                        await outbox.mark_retry(conn, row_id, RELAY_ID, "gateway unavailable", due)
                if not rows or failed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), POLL_SECONDS)
    finally:
        await engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True)
    p.add_argument("--gateway", required=True)
    p.add_argument("--api-key", required=True)
    args = p.parse_args()

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(args.db, args.gateway, args.api_key, stop)

    asyncio.run(_main())


if __name__ == "__main__":
    main()
