"""Which connections the outbox's enqueue takes on PostgreSQL, and which it refuses.

A pooled asyncpg connection (a proxy, not an ``asyncpg.Connection``) joins its transaction like
a plain one; a connection of a kind a function does not take raises ``UnsupportedConnection``
naming ``conn`` with nothing written; the kind is told without importing asyncpg or psycopg.
The three drivers' transaction semantics are in ``test_outbox_producers_pg.py``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest
from psycopg.pq import TransactionStatus

import studio_outbox
import studio_state
from studio_outbox import OutboxError, UnsupportedConnection
from studio_outbox import sync as outbox_sync

from .conftest import Rows
from .test_outbox_producers_pg import _state, create_schema


@pytest.fixture
def schema(pg_dsn: str) -> str:
    """The test's database with the outbox's tables and ``orders``."""
    return create_schema(pg_dsn)


async def test_a_pooled_asyncpg_connection_joins_its_transaction(
    schema: str, pg_rows: Rows
) -> None:
    """A pool hands out proxies of asyncpg.pool, not asyncpg.Connection: taken all the same."""
    pool: Any = await asyncpg.create_pool(schema, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute("INSERT INTO orders (id) VALUES (1)")
                kept = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="ops")
            rolled_back = conn.transaction()
            await rolled_back.start()
            await studio_outbox.enqueue_many(conn, [{"kind": "k", "deliver_to": "ops"}])
            await rolled_back.rollback()
    finally:
        await pool.close()
    ids, transitions, orders = await _state(pg_rows)
    assert ids == [kept] and orders == [1]
    assert [t["entity_id"] for t in transitions] == [kept]


async def test_a_connection_of_the_wrong_kind_is_refused_naming_conn(
    schema: str, pg_rows: Rows, tmp_path: Path
) -> None:
    arguments: dict[str, Any] = {"kind": "k", "deliver_to": "ops"}
    refused: list[UnsupportedConnection] = []
    async_pg: Any = await asyncpg.connect(schema)
    try:
        async with await psycopg.AsyncConnection.connect(schema) as async_psycopg:
            for conn in (async_pg, async_psycopg):
                with pytest.raises(UnsupportedConnection) as caught:
                    outbox_sync.enqueue_dispatch(conn, **arguments)
                refused.append(caught.value)
                with pytest.raises(UnsupportedConnection) as caught:
                    outbox_sync.enqueue_many(conn, [arguments])
                refused.append(caught.value)
    finally:
        await async_pg.close()
    with psycopg.Connection.connect(schema) as sync_psycopg:
        with pytest.raises(UnsupportedConnection) as caught:
            await studio_outbox.enqueue_dispatch(sync_psycopg, **arguments)
        refused.append(caught.value)
        with pytest.raises(UnsupportedConnection) as caught:
            await studio_outbox.enqueue_many(sync_psycopg, [arguments])
        refused.append(caught.value)
        with pytest.raises(UnsupportedConnection) as caught:
            outbox_sync.get_dispatch(sync_psycopg, "x")  # only the enqueues take psycopg
        refused.append(caught.value)
        assert sync_psycopg.info.transaction_status == TransactionStatus.IDLE  # nothing sent
    async with studio_state.connect(tmp_path / "x.db") as aiosqlite_conn:
        with pytest.raises(UnsupportedConnection) as caught:
            outbox_sync.enqueue_dispatch(aiosqlite_conn, **arguments)
        refused.append(caught.value)
    with pytest.raises(UnsupportedConnection) as caught:
        await studio_outbox.enqueue_dispatch(object(), **arguments)
    refused.append(caught.value)
    assert [e.field for e in refused] == ["conn"] * len(refused)
    assert all(isinstance(e, OutboxError) for e in refused)
    assert str(refused[0]).startswith("conn: must be a sqlite3.Connection or a psycopg Connection")
    assert "got asyncpg." in str(refused[0]) and "AsyncConnection" in str(refused[2])
    assert str(refused[4]).startswith("conn: must be an aiosqlite.Connection, an asyncpg")
    assert "got psycopg.Connection" in str(refused[4])
    assert "got aiosqlite." in str(refused[7]) and "got builtins.object" in str(refused[8])
    assert len(refused) == 9
    assert await _state(pg_rows) == ([], [], [])


def test_the_connection_kind_is_told_without_importing_a_driver() -> None:
    code = textwrap.dedent(
        """
        import asyncio, sqlite3, sys
        import studio_outbox
        from studio_outbox import sync

        fields = []
        for call in (
            lambda: sync.enqueue_dispatch(object(), kind="k", deliver_to="x"),
            lambda: asyncio.run(studio_outbox.enqueue_dispatch(object(), kind="k", deliver_to="x")),
            lambda: asyncio.run(studio_outbox.enqueue_many(sqlite3.connect(":memory:"),
                                                           [{"kind": "k", "deliver_to": "x"}])),
        ):
            try:
                call()
            except studio_outbox.UnsupportedConnection as exc:
                fields.append(exc.field)
        print(fields, sorted(m for m in ("psycopg", "asyncpg") if m in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['conn', 'conn', 'conn'] []"
