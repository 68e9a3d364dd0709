"""Totals, the backlog and list pages cost the same whatever the terminal history holds."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_outbox
import studio_state
from studio_outbox import TransportResult


def _plan(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> str:
    return " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


def _actual(db_path: Path) -> dict[tuple[str, str], int]:
    raw = sqlite3.connect(db_path)
    try:
        rows = raw.execute("SELECT status, kind, count(*) FROM dispatch_outbox GROUP BY 1, 2")
        return {(s, k): n for s, k, n in rows}
    finally:
        raw.close()


async def test_counts_follow_every_change_and_match_the_rows(
    db_path: Path,
    conn: aiosqlite.Connection,
    clock: studio_state.ManualClock,
    transport_factory: Any,
) -> None:
    ids = await studio_outbox.enqueue_many(
        conn,
        [{"kind": f"k{i % 3}", "deliver_to": "fail" if i % 4 == 0 else "ok"} for i in range(40)],
        clock=clock,
    )
    transport = transport_factory(
        lambda e: TransportResult.failure("x") if e.deliver_to == "fail" else None
    )
    await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    await studio_outbox.purge_dispatch(conn, ids[1], clock=clock)
    await conn.execute("UPDATE dispatch_outbox SET status = 'dead_letter' WHERE id = ?", (ids[0],))
    await studio_outbox.retry_dispatch(conn, ids[0], clock=clock)
    actual = _actual(db_path)
    for (status, kind), n in actual.items():
        assert await studio_outbox.count_dispatches(conn, status=status, kind=kind) == n
    assert await studio_outbox.count_dispatches(conn) == 39
    assert await studio_outbox.count_dispatches(conn, status="acked") == 0
    by_status = (await studio_outbox.dispatch_backlog(conn, clock=clock))["by_status"]
    for status in studio_outbox.DISPATCH_STATUSES:
        assert by_status[status] == sum(n for (s, _), n in actual.items() if s == status)
    raw = sqlite3.connect(db_path)
    try:
        query = "SELECT status, kind, n FROM dispatch_outbox_counts"
        stored = {(s, k): n for s, k, n in raw.execute(query)}
    finally:
        raw.close()
    assert stored == actual


@pytest.mark.parametrize(
    ("where", "params"),
    [
        ("", ()),
        (" WHERE status = ?", ("delivered",)),
        (" WHERE kind = ?", ("k",)),
        (" WHERE status = ? AND kind = ?", ("delivered", "k")),
    ],
)
async def test_list_pages_use_an_index_and_totals_never_scan_the_table(
    db_path: Path, conn: aiosqlite.Connection, where: str, params: tuple[str, ...]
) -> None:
    raw = sqlite3.connect(db_path)
    try:
        page = _plan(
            raw, f"SELECT id FROM dispatch_outbox{where} ORDER BY rowid DESC LIMIT 50", params
        )
        assert "TEMP B-TREE" not in page, page
        if where:
            assert "USING INDEX" in page or "USING COVERING INDEX" in page, page
        total = _plan(raw, f"SELECT coalesce(sum(n), 0) FROM dispatch_outbox_counts{where}", params)
        assert "dispatch_outbox_counts" in total and "TEMP" not in total, total
        assert total.replace("dispatch_outbox_counts", "") == total.replace(
            "dispatch_outbox_counts", ""
        ).replace("dispatch_outbox", "?"), total  # never the dispatch table itself
        backlog = _plan(raw, "SELECT status, sum(n) FROM dispatch_outbox_counts GROUP BY status")
        assert "dispatch_outbox_counts" in backlog
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("status", "kind"), [(None, None), ("pending", None), (None, "k1"), ("pending", "k1")]
)
async def test_keyset_pages_walk_every_row_once_and_seek_on_an_index(
    db_path: Path,
    conn: aiosqlite.Connection,
    clock: studio_state.ManualClock,
    status: str | None,
    kind: str | None,
) -> None:
    await studio_outbox.enqueue_many(
        conn, [{"kind": f"k{i % 2}", "deliver_to": "ok"} for i in range(45)], clock=clock
    )
    everything = await studio_outbox.list_dispatches(conn, status=status, kind=kind, limit=1000)
    seen: list[str] = []
    await conn.set_trace_callback(seen.append)
    walked: list[str] = []
    before = None
    try:
        while True:
            rows, before = await studio_outbox.page_dispatches(
                conn, status=status, kind=kind, limit=4, before=before
            )
            walked += [row["id"] for row in rows]
            assert all("page_seq" not in row and "ack_token" not in row for row in rows)
            if before is None:
                break
            await studio_outbox.enqueue_dispatch(conn, kind="k1", deliver_to="ok", clock=clock)
    finally:
        await conn.set_trace_callback(None)
    assert walked == [row["id"] for row in everything]
    raw = sqlite3.connect(db_path)
    try:
        seeks = [s for s in seen if "rowid < " in s and s.startswith("SELECT")]
        assert seeks
        for sql in seeks:
            plan = _plan(raw, sql)
            assert plan.startswith("SEARCH dispatch_outbox") and "rowid<?" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
    finally:
        raw.close()
    for bad in ({"before": 0}, {"before": 3, "offset": 1}):
        with pytest.raises(studio_outbox.InvalidArgument) as error:
            await studio_outbox.page_dispatches(conn, **bad)  # type: ignore[arg-type]
        assert error.value.field == "before"
