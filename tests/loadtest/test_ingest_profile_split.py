"""loadtest/ingest_http.categorize: py-spy raw stacks -> the share of an ingest worker's CPU per part."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

import ingest_http


def test_specific_parts_win_over_the_layers_around_them_and_idle_is_left_out() -> None:
    drain = "GroupCommit._drain (status_api/group_commit.py:65)"
    raw = "\n".join(
        [
            # a statement run from the batch runner: SQL, not "group commit"
            f"run (status_api/server.py:178);{drain};_execute_async (sqlalchemy/connectors/asyncio.py:279) 6",
            # JWT verify under the route: auth, not HTTP
            "run (uvicorn/server.py:1);task_events (status_api/http.py:165);decode (jwt/api_jws.py:341) 2",
            # the route itself: HTTP
            "run (uvicorn/server.py:1);task_events (status_api/http.py:175) 2",
            # the loop waiting: not work
            "run (asyncio/runners.py:118);select (selectors.py:468) 90",
        ]
    )
    assert ingest_http.categorize(raw) == [
        ("SQL driver + results (asyncmy, SQLAlchemy engine)", 60.0),
        ("auth (JWT verify, token cache)", 20.0),
        ("HTTP (uvicorn, starlette, routes)", 20.0),
    ]
