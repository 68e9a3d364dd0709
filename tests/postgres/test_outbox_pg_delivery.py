from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

from studio_outbox import InvalidArgument, TransportResult, backoff_seconds
from studio_outbox import postgres as pg
from studio_outbox.testing import RecordingTransport
from studio_state import ManualClock

from .conftest import Rows

Conn = psycopg.AsyncConnection[Any]


async def _ready(dsn: str) -> Conn:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await pg.ensure_schema(conn)
    return conn


async def _history(pg_rows: Rows, dispatch_id: str) -> list[str]:
    # The manual clock gives one pass's transitions one timestamp: compare them as a sorted list.
    found = await pg_rows(
        "SELECT reason_code FROM status_transitions WHERE entity_id = %s", (dispatch_id,)
    )
    return sorted(r["reason_code"] for r in found)


async def _row(pg_rows: Rows, dispatch_id: str) -> dict[str, Any]:
    (found,) = await pg_rows("SELECT * FROM dispatch_outbox WHERE id = %s", (dispatch_id,))
    return found


async def test_a_pass_sends_each_due_row_once_with_its_transitions(
    pg_dsn: str, pg_rows: Rows
) -> None:
    clock = ManualClock()
    transport = RecordingTransport()
    async with await _ready(pg_dsn) as conn:
        ids = await pg.enqueue_many(
            conn,
            [{"kind": "k", "deliver_to": "ops", "body": {"n": n, "attempt": 99}} for n in range(5)],
            clock=clock,
        )
        counts = await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)
        again = await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert counts == {"attempted": 5, "delivered": 5, "retried": 0, "dead_letter": 0, "expired": 0}
    assert again["attempted"] == 0
    assert sorted(e.dispatch_id for e in transport.sent) == sorted(ids)
    for envelope in transport.sent:
        payload = json.loads(envelope.payload)
        assert payload["attempt"] == 1 and envelope.attempt == 1
        assert payload["body"]["attempt"] == 99  # only the top-level attempt is rewritten
        row = await _row(pg_rows, envelope.dispatch_id)
        assert row["status"] == "delivered" and row["attempt"] == 1
        assert row["claimed_by"]
        assert json.dumps(row["payload"], separators=(",", ":")) == envelope.payload
    assert await _history(pg_rows, ids[0]) == sorted(
        [
            "dispatch.pending.enqueued",
            "dispatch.delivering.claimed",
            "dispatch.delivered.transport_ok",
        ]
    )
    counted = "SELECT status, sum(n) AS n FROM dispatch_outbox_counts GROUP BY status "
    counted += "HAVING sum(n) <> 0"
    assert await pg_rows(counted) == [{"status": "delivered", "n": 5}]
    async with await _ready(pg_dsn) as conn:
        await pg.compact_counts(conn)
    assert await pg_rows("SELECT status, n FROM dispatch_outbox_counts") == [
        {"status": "delivered", "n": 5}
    ]


async def test_failures_back_off_then_dead_letter_after_max_attempts(
    pg_dsn: str, pg_rows: Rows
) -> None:
    clock = ManualClock()
    transport = RecordingTransport(lambda e: TransportResult.failure(f"boom {e.attempt}"))
    async with await _ready(pg_dsn) as conn:
        dispatch_id = await pg.enqueue_dispatch(
            conn, kind="k", deliver_to="ops", max_attempts=2, clock=clock
        )
        first = await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)
        row = await _row(pg_rows, dispatch_id)
        assert first["retried"] == 1
        assert row["status"] == "pending" and row["last_error"] == "boom 1"
        assert row["next_attempt_at"] == clock() + backoff_seconds(1)
        clock.advance(backoff_seconds(1) - 1)
        assert (await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)) == {
            "attempted": 0,
            "delivered": 0,
            "retried": 0,
            "dead_letter": 0,
            "expired": 0,
        }
        clock.advance(1)
        second = await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert second["dead_letter"] == 1
    row = await _row(pg_rows, dispatch_id)
    assert (row["status"], row["attempt"], row["last_error"]) == ("dead_letter", 2, "boom 2")
    assert await _history(pg_rows, dispatch_id) == sorted(
        [
            "dispatch.pending.enqueued",
            "dispatch.delivering.claimed",
            "dispatch.pending.retry_backoff",
            "dispatch.delivering.claimed",
            "dispatch.dead_letter.max_attempts",
        ]
    )


async def test_retry_after_gone_ack_and_expiry_follow_the_sqlite_rules(
    pg_dsn: str, pg_rows: Rows
) -> None:
    clock = ManualClock()
    answers = {
        "later": TransportResult.failure("busy", retry_after=5),
        "gone": TransportResult.permanent_failure("HTTP 410"),
    }
    transport = RecordingTransport(lambda e: answers.get(e.kind))
    async with await _ready(pg_dsn) as conn:
        later = await pg.enqueue_dispatch(conn, kind="later", deliver_to="x", clock=clock)
        gone = await pg.enqueue_dispatch(conn, kind="gone", deliver_to="x", clock=clock)
        acked = await pg.enqueue_dispatch(
            conn, kind="ack", deliver_to="x", ack_required=True, clock=clock
        )
        stale = await pg.enqueue_dispatch(
            conn, kind="stale", deliver_to="x", expires_at=clock() - 1, clock=clock
        )
        counts = await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert counts == {"attempted": 3, "delivered": 1, "retried": 1, "dead_letter": 1, "expired": 1}
    assert {e.kind for e in transport.sent} == {"later", "gone", "ack"}
    assert (await _row(pg_rows, later))["next_attempt_at"] == clock() + 5
    assert (await _row(pg_rows, gone))["status"] == "dead_letter"
    assert "dispatch.dead_letter.gone" in await _history(pg_rows, gone)
    ack_row = await _row(pg_rows, acked)
    assert ack_row["status"] == "pending"
    assert ack_row["next_attempt_at"] == clock() + backoff_seconds(1)
    assert "dispatch.pending.awaiting_ack" in await _history(pg_rows, acked)
    assert (await _row(pg_rows, stale))["status"] == "expired"
    assert await _history(pg_rows, stale) == ["dispatch.expired.ttl", "dispatch.pending.enqueued"]


async def test_a_row_in_backoff_expires_without_a_send(pg_dsn: str, pg_rows: Rows) -> None:
    clock = ManualClock()
    transport = RecordingTransport(lambda e: TransportResult.failure("down"))
    async with await _ready(pg_dsn) as conn:
        dispatch_id = await pg.enqueue_dispatch(
            conn, kind="k", deliver_to="x", expires_at=clock() + 10, clock=clock
        )
        await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)
        clock.advance(11)  # inside the 60 s backoff, past expires_at
        counts = await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert counts["expired"] == 1 and len(transport.sent) == 1
    assert (await _row(pg_rows, dispatch_id))["status"] == "expired"


async def test_a_lapsed_lease_is_claimed_again_and_the_stale_outcome_writes_nothing(
    pg_dsn: str, pg_rows: Rows
) -> None:
    clock = ManualClock()
    async with await _ready(pg_dsn) as conn:
        dispatch_id = await pg.enqueue_dispatch(conn, kind="k", deliver_to="x", clock=clock)
        # A deliverer on another machine claimed attempt 1 and died before recording it.
        await conn.execute(
            "UPDATE dispatch_outbox SET status = 'delivering', attempt = 1, "
            "next_attempt_at = %s, claimed_by = 'another-boot:1:1' WHERE id = %s",
            (clock() + 15, dispatch_id),
        )
        transport = RecordingTransport()
        assert (await pg.deliver_due_dispatches(conn, transport=transport, clock=clock))[
            "attempted"
        ] == 0  # the lease still runs
        clock.advance(15)
        counts = await pg.deliver_due_dispatches(conn, transport=transport, clock=clock)
        # The dead deliverer's outcome for attempt 1, written late, matches nothing.
        cur = await conn.execute(
            "UPDATE dispatch_outbox SET status = 'pending' "
            "WHERE id = %s AND status = 'delivering' AND attempt = 1",
            (dispatch_id,),
        )
        assert cur.rowcount == 0
    assert counts["delivered"] == 1
    assert [e.attempt for e in transport.sent] == [2]
    row = await _row(pg_rows, dispatch_id)
    assert (row["status"], row["attempt"]) == ("delivered", 2)


async def test_three_deliverers_deliver_every_dispatch_exactly_once(
    pg_dsn: str, pg_rows: Rows
) -> None:
    total = 300
    transport = RecordingTransport(latency=0.005)
    async with await _ready(pg_dsn) as conn:
        ids = await pg.enqueue_many(
            conn, [{"kind": "k", "deliver_to": "x", "body": {"n": n}} for n in range(total)]
        )
    stop = asyncio.Event()
    connections = [await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) for _ in range(6)]
    try:
        runs = [
            asyncio.ensure_future(
                pg.run_deliverer(
                    connections[i],
                    connections[i + 3],
                    stop=stop,
                    transport=transport,
                    limit=20,
                    concurrency=4,
                )
            )
            for i in range(3)
        ]
        deadline = time.monotonic() + 60
        while len(transport.sent) < total and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        totals = await asyncio.gather(*runs)
    finally:
        for c in connections:
            await c.close()
    sent = [e.dispatch_id for e in transport.sent]
    assert len(sent) == total and set(sent) == set(ids)  # each exactly once
    assert all(t["delivered"] > 0 for t in totals)  # all three took a share
    assert sum(t["delivered"] for t in totals) == total
    claims = await pg_rows(
        "SELECT count(*) AS n FROM status_transitions "
        "WHERE reason_code = 'dispatch.delivering.claimed'"
    )
    assert claims == [{"n": total}]
    delivered = await pg_rows(
        "SELECT count(*) AS n FROM dispatch_outbox WHERE status = 'delivered'"
    )
    assert delivered == [{"n": total}]


async def test_an_enqueue_wakes_a_waiting_deliverer_without_polling(pg_dsn: str) -> None:
    transport = RecordingTransport()
    stop = asyncio.Event()
    async with (
        await _ready(pg_dsn) as conn,
        await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as listen,
        await psycopg.AsyncConnection.connect(pg_dsn) as producer,
    ):
        run = asyncio.ensure_future(
            pg.run_deliverer(conn, listen, stop=stop, transport=transport, idle_seconds=60)
        )
        await asyncio.sleep(0.5)  # the deliverer found nothing and sleeps (up to 60 s)
        await producer.execute("SELECT 1")  # the producer's own transaction
        dispatch_id = await pg.enqueue_dispatch(producer, kind="k", deliver_to="x")
        await asyncio.sleep(0.3)
        assert transport.sent == []  # not committed: not visible, no wake-up
        started = time.monotonic()
        await producer.commit()
        while not transport.sent and time.monotonic() - started < 10:
            await asyncio.sleep(0.01)
        woke_after = time.monotonic() - started
        stop.set()
        await run
    assert [e.dispatch_id for e in transport.sent] == [dispatch_id]
    assert woke_after < 5  # generous; the idle sleep is 60 s


async def test_delivery_refuses_an_open_transaction(pg_dsn: str, pg_rows: Rows) -> None:
    async with await _ready(pg_dsn) as conn:
        await pg.enqueue_dispatch(conn, kind="k", deliver_to="x")
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        await conn.execute("SELECT 1")
        with pytest.raises(InvalidArgument) as caught:
            await pg.deliver_due_dispatches(conn, transport=RecordingTransport())
    assert caught.value.field == "conn"
    assert await pg_rows("SELECT status FROM dispatch_outbox") == [{"status": "pending"}]


async def test_rows_without_a_transport_stay_untouched(pg_dsn: str, pg_rows: Rows) -> None:
    async with await _ready(pg_dsn) as conn:
        await pg.enqueue_dispatch(conn, kind="k", deliver_to="x")
        counts = await pg.deliver_due_dispatches(conn)
    assert counts["attempted"] == 0
    assert await pg_rows("SELECT status, attempt FROM dispatch_outbox") == [
        {"status": "pending", "attempt": 0}
    ]


_DELIVERER = """
import asyncio, json, sys, time
import psycopg
from studio_outbox import postgres as pg
from studio_outbox.testing import RecordingTransport

async def main() -> None:
    transport = RecordingTransport(latency=0.002)
    async with await psycopg.AsyncConnection.connect(sys.argv[1], autocommit=True) as conn:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        while True:
            counts = await pg.deliver_due_dispatches(conn, transport=transport, limit=10)
            if counts["attempted"] == 0:
                due = await pg.next_due_at(conn)
                if due is None or due > time.time():
                    break
    print(json.dumps([e.dispatch_id for e in transport.sent]), flush=True)

asyncio.run(main())
"""


async def test_three_deliverer_processes_deliver_every_dispatch_exactly_once(
    pg_dsn: str, pg_rows: Rows
) -> None:
    total = 400
    async with await _ready(pg_dsn) as conn:
        ids = await pg.enqueue_many(conn, [{"kind": "k", "deliver_to": "x"}] * total)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _DELIVERER, pg_dsn],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    sent: list[list[str]] = []
    try:
        for child in children:
            assert child.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 60)
            assert line.strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, _ = await asyncio.to_thread(child.communicate, None, 120)
            sent.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    everything = [dispatch_id for part in sent for dispatch_id in part]
    assert len(everything) == total and set(everything) == set(ids)
    assert all(part for part in sent)  # every process took a share
    assert await pg_rows(
        "SELECT status, attempt, count(*) AS n FROM dispatch_outbox GROUP BY status, attempt"
    ) == [{"status": "delivered", "attempt": 1, "n": total}]


async def test_a_pass_skips_rows_another_deliverer_has_locked_instead_of_waiting(
    pg_dsn: str, pg_rows: Rows
) -> None:
    transport = RecordingTransport()
    async with (
        await _ready(pg_dsn) as conn,
        await psycopg.AsyncConnection.connect(pg_dsn) as other,
    ):
        held, *rest = await pg.enqueue_many(conn, [{"kind": "k", "deliver_to": "x"}] * 4)
        # Another deliverer's open claiming transaction holds the first row.
        await other.execute("SELECT id FROM dispatch_outbox WHERE id = %s FOR UPDATE", (held,))
        counts = await asyncio.wait_for(
            pg.deliver_due_dispatches(conn, transport=transport), timeout=10
        )
        await other.rollback()
    assert counts["delivered"] == 3
    assert sorted(e.dispatch_id for e in transport.sent) == sorted(rest)
    assert (await _row(pg_rows, held))["status"] == "pending"
