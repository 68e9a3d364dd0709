from __future__ import annotations

import asyncio

import psycopg
import pytest

import studio_state
from studio_outbox import InvalidDispatch
from studio_outbox import postgres as pg


async def _connect(dsn: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    return await psycopg.AsyncConnection.connect(dsn)


async def _count(dsn: str, sql: str = "SELECT count(*) FROM dispatch_outbox") -> int:
    async with await _connect(dsn) as conn:
        cur = await conn.execute(sql)
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])  # type: ignore[call-overload]


async def test_enqueue_commits_with_the_producers_transaction(pg_dsn: str) -> None:
    async with await _connect(pg_dsn) as conn:
        await pg.ensure_schema(conn)
        await conn.execute("CREATE TABLE orders (id int)")
        await conn.commit()
        await conn.execute("INSERT INTO orders VALUES (1)")
        dispatch_id = await pg.enqueue_dispatch(conn, kind="order.created", deliver_to="ops")
        assert await _count(pg_dsn) == 0  # not committed by the outbox
        await conn.commit()
    assert await _count(pg_dsn) == 1
    sql = f"SELECT count(*) FROM status_transitions WHERE entity_id = '{dispatch_id}'"
    assert await _count(pg_dsn, sql) == 1
    sql = "SELECT sum(n) FROM dispatch_outbox_counts WHERE status = 'pending'"
    assert await _count(pg_dsn, sql) == 1


async def test_enqueue_rolls_back_with_the_producers_transaction(pg_dsn: str) -> None:
    async with await _connect(pg_dsn) as conn:
        await pg.ensure_schema(conn)
        await conn.execute("SELECT 1")
        await pg.enqueue_dispatch(conn, kind="k", deliver_to="ops")
        await conn.rollback()
    assert await _count(pg_dsn) == 0
    assert await _count(pg_dsn, "SELECT count(*) FROM status_transitions") == 0


async def test_enqueue_on_autocommit_runs_its_own_transaction(pg_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await pg.ensure_schema(conn)
        ids = await pg.enqueue_many(conn, [{"kind": "a", "deliver_to": "x"}] * 3)
    assert len(set(ids)) == 3
    assert await _count(pg_dsn) == 3


async def test_dedup_hit_returns_the_existing_id(pg_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await pg.ensure_schema(conn)
        first = await pg.enqueue_dispatch(conn, kind="k", deliver_to="x", dedup_key="d1")
        again = await pg.enqueue_dispatch(conn, kind="k", deliver_to="y", dedup_key="d1")
    assert first == again
    assert await _count(pg_dsn) == 1


async def test_concurrent_producers_with_one_dedup_key_create_one_row(pg_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await pg.ensure_schema(conn)

    async def produce() -> str:
        async with await _connect(pg_dsn) as conn:
            await conn.execute("SELECT 1")  # the producer's own open transaction
            dispatch_id = await pg.enqueue_dispatch(
                conn, kind="k", deliver_to="x", dedup_key="same"
            )
            await asyncio.sleep(0.05)
            await conn.commit()
            return dispatch_id

    ids = await asyncio.gather(*(produce() for _ in range(8)))
    assert len(set(ids)) == 1
    assert await _count(pg_dsn) == 1


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"kind": "", "deliver_to": "x"}, "kind"),
        ({"kind": "k", "deliver_to": "x", "max_attempts": 0}, "max_attempts"),
        ({"kind": "k", "deliver_to": "x", "body": {"x": object()}}, "body"),
        ({"kind": "k", "deliver_to": "x", "expires_at": float("nan")}, "expires_at"),
    ],
)
async def test_bad_input_names_the_field_and_writes_nothing(
    pg_dsn: str, arguments: dict[str, object], field: str
) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await pg.ensure_schema(conn)
        with pytest.raises(InvalidDispatch) as caught:
            await pg.enqueue_dispatch(conn, **arguments)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert await _count(pg_dsn) == 0


async def test_ensure_schema_is_idempotent_and_refuses_a_newer_schema(pg_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await pg.ensure_schema(conn)
        await pg.ensure_schema(conn)
        sql = "SELECT count(*) FROM schema_migrations WHERE package = 'studio-outbox'"
        assert await _count(pg_dsn, sql) == len(pg.MIGRATIONS)
        await conn.execute(
            "INSERT INTO schema_migrations VALUES ('studio-outbox', %s, 0)",
            (len(pg.MIGRATIONS) + 1,),
        )
        with pytest.raises(studio_state.SchemaTooNew):
            await pg.ensure_schema(conn)
