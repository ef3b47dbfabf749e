"""schema/mysql/001_status_api.sql matches storage/tables.py; init-db is idempotent and additive."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from status_api.storage.database import create_engine, init_db
from status_api.storage.tables import metadata

DDL = Path(__file__).resolve().parents[2] / "schema" / "mysql" / "001_status_api.sql"
#: Every numbered file in the order docker-entrypoint-initdb.d applies them (001 creates, later ones upgrade).
DDL_FILES = sorted(DDL.parent.glob("[0-9][0-9][0-9]_*.sql"))
OLD_PRODUCER_INDEX = (
    "CREATE INDEX task_event_producer_idx ON task_event_log (task_id, producer_id, task_attempt, source_seq)"
)


def _describe(sync_conn: sa.Connection) -> dict[str, Any]:
    insp = sa.inspect(sync_conn)
    out: dict[str, Any] = {}
    for name in sorted(insp.get_table_names()):
        out[name] = {
            "columns": [
                (c["name"], c["nullable"], str(c["type"]).split(" ")[0]) for c in insp.get_columns(name)
            ],
            "pk": insp.get_pk_constraint(name)["constrained_columns"],
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in insp.get_indexes(name)
            ),
            "fks": sorted((f["name"], tuple(f["constrained_columns"])) for f in insp.get_foreign_keys(name)),
        }
    return out


@pytest.mark.mysql
async def test_mysql_ddl_file_matches_sqlalchemy_metadata(mysql_url: str) -> None:
    server = sa.make_url(mysql_url)
    admin = create_engine(server.render_as_string(hide_password=False))
    a, b = f"taskcast_ddl_a_{uuid.uuid4().hex[:8]}", f"taskcast_ddl_b_{uuid.uuid4().hex[:8]}"
    async with admin.begin() as conn:
        for name in (a, b):
            await conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        from_ddl = create_engine(server.set(database=a).render_as_string(hide_password=False))
        from_meta = create_engine(server.set(database=b).render_as_string(hide_password=False))
        sql = "\n".join(
            line for f in DDL_FILES for line in f.read_text().splitlines() if not line.startswith("--")
        )
        async with from_ddl.begin() as conn:
            for stmt in filter(str.strip, sql.split(";")):
                await conn.exec_driver_sql(stmt)
            for stmt in filter(str.strip, sql.split(";")):  # idempotent: IF NOT EXISTS
                await conn.exec_driver_sql(stmt)
        await init_db(from_meta)
        assert await init_db(from_meta) == []  # second run: nothing to do
        async with from_ddl.connect() as c1, from_meta.connect() as c2:
            d1, d2 = await c1.run_sync(_describe), await c2.run_sync(_describe)
        assert set(d1) == {t.name for t in metadata.sorted_tables}
        assert d1 == d2
        # init-db on a database created from the DDL file has nothing to add
        assert await init_db(from_ddl) == []
        await from_ddl.dispose()
        await from_meta.dispose()
    finally:
        async with admin.begin() as conn:
            for name in (a, b):
                await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        await admin.dispose()


async def test_init_db_is_idempotent_and_adds_missing_columns(tmp_path: Path) -> None:
    eng = create_engine(f"sqlite+aiosqlite:///{tmp_path}/x.db")
    first = await init_db(eng)
    assert len([a for a in first if a.startswith("created table")]) == len(metadata.sorted_tables)
    assert await init_db(eng) == []
    async with eng.begin() as conn:
        await conn.exec_driver_sql("ALTER TABLE task DROP COLUMN duration_source")
    assert await init_db(eng) == ["added column task.duration_source"]
    await eng.dispose()


async def _index_names(engine: Any, table: str) -> set[str]:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda c: {i["name"] for i in sa.inspect(c).get_indexes(table)})


async def test_init_db_drops_a_retired_index_of_an_older_schema(tmp_path: Path) -> None:
    eng = create_engine(f"sqlite+aiosqlite:///{tmp_path}/old.db")
    await init_db(eng)
    async with eng.begin() as conn:  # the event log as an older version created it
        await conn.exec_driver_sql(OLD_PRODUCER_INDEX)
    assert await init_db(eng) == ["dropped index task_event_producer_idx"]
    assert "task_event_producer_idx" not in await _index_names(eng, "task_event_log")
    assert await init_db(eng) == []
    await eng.dispose()


@pytest.mark.mysql
async def test_mysql_upgrade_of_an_older_schema_drops_the_retired_index(mysql_url: str) -> None:
    """A database made by the previous DDL file (with the producer index) upgrades by init-db, and
    by 002_retired_indexes.sql alike, to the current schema."""
    server = sa.make_url(mysql_url)
    admin = create_engine(server.render_as_string(hide_password=False))
    a, b = f"taskcast_up_a_{uuid.uuid4().hex[:8]}", f"taskcast_up_b_{uuid.uuid4().hex[:8]}"
    async with admin.begin() as conn:
        for name in (a, b):
            await conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        engines = [
            create_engine(server.set(database=n).render_as_string(hide_password=False)) for n in (a, b)
        ]
        first = DDL_FILES[0].read_text()
        for eng in engines:
            sql = "\n".join(line for line in first.splitlines() if not line.startswith("--"))
            async with eng.begin() as conn:
                for stmt in filter(str.strip, sql.split(";")):
                    await conn.exec_driver_sql(stmt)
                await conn.exec_driver_sql(OLD_PRODUCER_INDEX)
        by_init, by_file = engines
        assert await init_db(by_init) == ["dropped index task_event_producer_idx"]
        upgrade = "\n".join(
            line for f in DDL_FILES[1:] for line in f.read_text().splitlines() if not line.startswith("--")
        )
        async with by_file.begin() as conn:
            for stmt in filter(str.strip, upgrade.split(";")):
                await conn.exec_driver_sql(stmt)
        for eng in engines:
            assert "task_event_producer_idx" not in await _index_names(eng, "task_event_log")
            assert await init_db(eng) == []
            await eng.dispose()
    finally:
        async with admin.begin() as conn:
            for name in (a, b):
                await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        await admin.dispose()
