"""The outbox inside a PostgreSQL producer's own transaction, on the producer's own connection.

``studio_outbox.enqueue_dispatch`` / ``enqueue_many`` take an asyncpg connection or a psycopg 3
``AsyncConnection``, ``studio_outbox.sync``'s a psycopg 3 ``Connection``; each joins the
transaction the producer has open (its row and its ``dispatch.pending.enqueued`` transition
commit or roll back with the producer's change) and commits on its own when none is open. For
each driver: a rolled-back producer leaves nothing, a committed one leaves exactly one dispatch
with its transition, which a real ``studio serve`` node on the cluster delivers to a loopback
webhook receiver; the docs/recipes.md programs ("Enqueue from a PostgreSQL producer's own
transaction") run as written against the same node (tests/test_readme_examples.py runs only
SQLite programs, so they are run here).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest
from psycopg.pq import TransactionStatus

import studio_outbox
from studio_outbox import InvalidDispatch
from studio_outbox import postgres as pg
from studio_outbox import sync as outbox_sync
from studio_state.testing import load_beside

from .conftest import Rows
from .test_nodes_pg import nodes, wait_until

ROOT = Path(__file__).resolve().parents[2]
_receivers = load_beside(
    ROOT / "packages" / "outbox" / "tests" / "conftest.py",
    "webhook_receiver.py",
    "studio_outbox_test_webhook_receiver_pg",
)

DRIVERS = ["asyncpg", "psycopg-async", "psycopg-sync"]
#: The python block of docs/recipes.md that is each driver's recipe.
RECIPE_MARKERS = {
    "asyncpg": "asyncpg.connect(dsn)",
    "psycopg-async": "psycopg.AsyncConnection.connect(dsn",
    "psycopg-sync": "psycopg.connect(sys.argv[1]",
}
RECIPE_URL = "http://127.0.0.1:9000/orders"


class Producer:
    """A producer's own connection of one driver, driven the way its users drive it.

    asyncpg opens its transaction with ``conn.transaction().start()``; psycopg (not in
    autocommit) opens one implicitly at the first statement, until ``commit``/``rollback``.
    """

    def __init__(self, driver: str, conn: Any) -> None:
        self.driver = driver
        self.conn = conn
        self._tx: Any = None

    @classmethod
    async def open(cls, driver: str, dsn: str) -> Producer:
        if driver == "asyncpg":
            return cls(driver, await asyncpg.connect(dsn))
        if driver == "psycopg-async":
            return cls(driver, await psycopg.AsyncConnection.connect(dsn))
        return cls(driver, psycopg.Connection.connect(dsn))

    async def _sql(self, sql: str, *params: Any) -> None:
        if self.driver == "asyncpg":
            await self.conn.execute(sql.replace("%s", "$1"), *params)
        elif self.driver == "psycopg-async":
            await self.conn.execute(sql, params)
        else:
            self.conn.execute(sql, params)

    async def begin(self) -> None:
        if self.driver == "asyncpg":
            self._tx = self.conn.transaction()
            await self._tx.start()
        # psycopg begins at the transaction's first statement (write).

    async def write(self, order_id: int) -> None:
        """The producer's own change."""
        await self._sql("INSERT INTO orders (id) VALUES (%s)", order_id)

    async def enqueue(self, **arguments: Any) -> str:
        if self.driver == "psycopg-sync":
            return outbox_sync.enqueue_dispatch(self.conn, **arguments)
        return await studio_outbox.enqueue_dispatch(self.conn, **arguments)

    async def enqueue_many(self, items: Sequence[Mapping[str, Any]]) -> list[str]:
        if self.driver == "psycopg-sync":
            return outbox_sync.enqueue_many(self.conn, items)
        return await studio_outbox.enqueue_many(self.conn, items)

    async def in_transaction(self) -> bool:
        if self.driver == "asyncpg":
            return bool(self.conn.is_in_transaction())
        return bool(self.conn.info.transaction_status == TransactionStatus.INTRANS)

    async def _end(self, how: str) -> None:
        if self.driver == "asyncpg":
            await getattr(self._tx, how)()
            self._tx = None
        elif self.driver == "psycopg-async":
            await getattr(self.conn, how)()
        else:
            getattr(self.conn, how)()

    async def commit(self) -> None:
        await self._end("commit")

    async def rollback(self) -> None:
        await self._end("rollback")

    async def create_orders(self) -> None:
        await self.begin()
        await self._sql("CREATE TABLE IF NOT EXISTS orders (id integer PRIMARY KEY)")
        await self.commit()

    async def close(self) -> None:
        if self.driver == "psycopg-sync":
            self.conn.close()
        else:
            await self.conn.close()


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def receiver() -> Iterator[Any]:
    with _receivers.serve_receiver() as running:
        yield running


def create_schema(dsn: str) -> str:
    """The outbox's tables and the producer's ``orders`` on ``dsn`` (as a node would)."""
    with psycopg.Connection.connect(dsn, autocommit=True) as conn:
        pg.ensure_schema_sync(conn)
        conn.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
    return dsn


@pytest.fixture
def schema(pg_dsn: str) -> str:
    """The test's database with :func:`create_schema`'s tables."""
    return create_schema(pg_dsn)


async def _producer(driver: str, dsn: str) -> Producer:
    return await Producer.open(driver, dsn)


async def _state(pg_rows: Rows) -> tuple[list[Any], list[Any], list[Any]]:
    """(dispatch ids, dispatch transitions, order ids), as another connection sees them."""
    dispatches = await pg_rows("SELECT id FROM dispatch_outbox ORDER BY created_at, id")
    transitions = await pg_rows(
        "SELECT entity_id, previous_status, status, reason_code FROM status_transitions "
        "WHERE entity_type = 'dispatch' ORDER BY created_at, id"
    )
    orders = await pg_rows("SELECT id FROM orders ORDER BY id")
    return [r["id"] for r in dispatches], transitions, [r["id"] for r in orders]


def _recipe(driver: str) -> str:
    """The python block of docs/recipes.md that is ``driver``'s recipe, as written there."""
    text = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")
    marker = RECIPE_MARKERS[driver]
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        if marker in block:
            return textwrap.dedent(block)
    raise AssertionError(f"no python block with {marker!r} in docs/recipes.md")


def _sent(receiver: Any) -> dict[str, dict[str, Any]]:
    """What the receiver got, by dispatch id."""
    signals = [json.loads(request.body) for request in receiver.received()]
    return {signal["dispatch_id"]: signal for signal in signals}


async def test_rolled_back_leaves_nothing_committed_is_delivered_by_a_node(
    driver: str, pg_dsn: str, pg_rows: Rows, receiver: Any, tmp_path: Path
) -> None:
    with nodes(pg_dsn, tmp_path / "home", ["solo"]) as (node,):  # it creates the schema
        producer = await _producer(driver, pg_dsn)
        try:
            await producer.create_orders()
            await producer.begin()
            await producer.write(1)
            dropped = await producer.enqueue(
                kind="order.created", deliver_to=receiver.url("/ok"), body={"order_id": 1}
            )
            assert await producer.in_transaction()  # joined, not committed by the outbox
            await producer.rollback()
            assert await _state(pg_rows) == ([], [], [])

            await producer.begin()
            await producer.write(2)
            kept = await producer.enqueue(
                kind="order.created", deliver_to=receiver.url("/ok"), body={"order_id": 2}
            )
            assert await producer.in_transaction()
            assert await _state(pg_rows) == ([], [], [])  # nothing visible before the commit
            await producer.commit()
        finally:
            await producer.close()
        ids, transitions, orders = await _state(pg_rows)
        assert ids == [kept] and orders == [2]
        assert transitions[0] == {
            "entity_id": kept,
            "previous_status": None,
            "status": "pending",
            "reason_code": "dispatch.pending.enqueued",
        }
        assert [t for t in transitions if t["previous_status"] is None] == transitions[:1]

        # The docs/recipes.md program for this driver, as written, on the same database.
        script = tmp_path / "recipe.py"
        script.write_text(_recipe(driver).replace(RECIPE_URL, receiver.url("/ok")))
        done = subprocess.run(
            [sys.executable, str(script), pg_dsn],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        ids, _, orders = await _state(pg_rows)
        assert len(ids) == 2 and orders == [2, 42]
        recipe_id = ids[1]

        wait_until(lambda: len(_sent(receiver)) >= 2, 60, "both dispatches sent")
        sent = _sent(receiver)
        assert set(sent) == {kept, recipe_id} and dropped not in sent
        assert sent[kept]["body"] == {"order_id": 2}
        assert sent[recipe_id]["body"] == {"order_id": 42}
        for dispatch_id in (kept, recipe_id):
            wait_until(
                lambda d=dispatch_id: node.get(f"/api/dispatch/{d}")["status"] == "delivered",
                30,
                f"{dispatch_id} delivered",
            )
    history = await pg_rows(
        "SELECT entity_id, reason_code FROM status_transitions "
        "WHERE entity_type = 'dispatch' AND reason_code = 'dispatch.pending.enqueued'"
    )
    assert sorted(r["entity_id"] for r in history) == sorted([kept, recipe_id])


async def test_an_enqueue_outside_a_transaction_commits_on_its_own(
    driver: str, schema: str, pg_rows: Rows
) -> None:
    producer = await _producer(driver, schema)
    try:
        assert not await producer.in_transaction()
        alone = await producer.enqueue(kind="k", deliver_to="ops", body={"n": 1})
        assert not await producer.in_transaction()  # committed, nothing left open
        assert (await _state(pg_rows))[0] == [alone]
        many = await producer.enqueue_many([{"kind": "k", "deliver_to": "ops"}] * 2)
        assert not await producer.in_transaction()
    finally:
        await producer.close()
    ids, transitions, _ = await _state(pg_rows)
    assert sorted(ids) == sorted([alone, *many])
    assert sorted(t["entity_id"] for t in transitions) == sorted(ids)


async def test_a_dedup_key_enqueued_twice_in_one_transaction_is_one_row(
    driver: str, schema: str, pg_rows: Rows
) -> None:
    producer = await _producer(driver, schema)
    try:
        await producer.begin()
        await producer.write(1)
        first = await producer.enqueue(kind="k", deliver_to="a", dedup_key="order:1")
        again = await producer.enqueue(kind="k", deliver_to="b", dedup_key="order:1")
        batch = await producer.enqueue_many(
            [
                {"kind": "k", "deliver_to": "a", "dedup_key": "order:1"},
                {"kind": "k", "deliver_to": "a", "dedup_key": "order:2"},
                {"kind": "k", "deliver_to": "b", "dedup_key": "order:2"},
            ]
        )
        await producer.commit()
        # A key committed earlier: its id, nothing written, the producer's change unharmed.
        await producer.begin()
        await producer.write(2)
        later = await producer.enqueue(kind="k", deliver_to="c", dedup_key="order:2")
        await producer.commit()
    finally:
        await producer.close()
    assert first == again == batch[0]
    assert batch[1] == batch[2] == later != first
    ids, transitions, orders = await _state(pg_rows)
    assert sorted(ids) == sorted([first, later]) and orders == [1, 2]
    assert sorted(t["entity_id"] for t in transitions) == sorted(ids)
    keys = await pg_rows("SELECT dedup_key, deliver_to FROM dispatch_outbox ORDER BY dedup_key")
    assert keys == [
        {"dedup_key": "order:1", "deliver_to": "a"},
        {"dedup_key": "order:2", "deliver_to": "a"},
    ]


async def test_bad_input_is_invalid_dispatch_and_writes_nothing(
    driver: str, schema: str, pg_rows: Rows
) -> None:
    producer = await _producer(driver, schema)
    try:
        await producer.begin()
        await producer.write(1)
        with pytest.raises(InvalidDispatch) as kind:
            await producer.enqueue(kind="", deliver_to="ops")
        with pytest.raises(InvalidDispatch) as body:
            await producer.enqueue(kind="k", deliver_to="ops", body=[1])
        with pytest.raises(InvalidDispatch) as url:
            await producer.enqueue_many(
                [{"kind": "k", "deliver_to": "ops"}, {"kind": "k", "deliver_to": "http:/x"}]
            )
        with pytest.raises(InvalidDispatch) as attempts:
            await producer.enqueue(kind="k", deliver_to="ops", max_attempts=0)
        # Refused before any statement: the producer's transaction is intact and commits.
        assert await producer.in_transaction()
        await producer.commit()
    finally:
        await producer.close()
    fields = [kind.value.field, body.value.field, url.value.field, attempts.value.field]
    assert fields == ["kind", "body", "items[1].deliver_to", "max_attempts"]
    assert await _state(pg_rows) == ([], [], [1])
