from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_state


async def test_connect_creates_parent_and_sets_pragmas(tmp_path: Path, fetch_all: Any) -> None:
    path = tmp_path / "a" / "b" / "studio.db"
    async with studio_state.connect(path) as conn:
        assert path.parent.is_dir()
        assert (await fetch_all(conn, "PRAGMA journal_mode"))[0]["journal_mode"] == "wal"
        assert (await fetch_all(conn, "PRAGMA synchronous"))[0]["synchronous"] == 2  # FULL
        assert (await fetch_all(conn, "PRAGMA foreign_keys"))[0]["foreign_keys"] == 1
        assert (await fetch_all(conn, "PRAGMA busy_timeout"))[0]["timeout"] == 5000


@pytest.mark.parametrize(("value", "level"), [("full", 2), ("normal", 1), (" NORMAL ", 1)])
async def test_synchronous_is_chosen_per_connection(
    tmp_path: Path, fetch_all: Any, value: str, level: int
) -> None:
    async with studio_state.connect(tmp_path / "s.db", synchronous=value) as conn:
        assert (await fetch_all(conn, "PRAGMA synchronous"))[0]["synchronous"] == level


@pytest.mark.parametrize("value", ["off", "extra", "", "fast"])
async def test_unknown_synchronous_is_refused_before_the_file_exists(
    tmp_path: Path, value: str
) -> None:
    path = tmp_path / "nested" / "s.db"
    with pytest.raises(studio_state.InvalidSetting, match="synchronous"):
        async with studio_state.connect(path, synchronous=value):
            pass
    assert not path.exists()


async def test_rows_are_plain_dicts(tmp_path: Path, fetch_all: Any) -> None:
    async with studio_state.connect(tmp_path / "x.db") as conn:
        rows = await fetch_all(conn, "SELECT 1 AS one, 'a' AS letter")
        assert rows == [{"one": 1, "letter": "a"}]
        cursor = await conn.execute("SELECT 2 AS two")
        row = await cursor.fetchone()
        assert type(row) is dict and row == {"two": 2}


async def test_connection_is_in_autocommit_mode(tmp_path: Path, fetch_all: Any) -> None:
    path = tmp_path / "auto.db"
    async with studio_state.connect(path) as conn:
        await conn.execute("CREATE TABLE t (x INTEGER)")
        await conn.execute("INSERT INTO t VALUES (1)")
        assert conn.in_transaction is False
    async with studio_state.connect(path) as other:
        assert await fetch_all(other, "SELECT x FROM t") == [{"x": 1}]


def test_new_id_is_twelve_lowercase_hex() -> None:
    ids = {studio_state.new_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{12}", value) for value in ids)


def test_manual_clock_moves_only_when_told() -> None:
    clock = studio_state.ManualClock(100.0)
    assert clock() == 100.0
    assert clock.advance(2.5) == 102.5
    assert clock() == 102.5
    clock.set(50)
    assert clock() == 50.0
    try:
        clock.advance(-1)
    except ValueError as exc:
        assert "-1" in str(exc)
    else:  # pragma: no cover - the assertion below documents the failure
        raise AssertionError("advance(-1) must be refused")


def test_system_clock_is_epoch_seconds() -> None:
    import time

    before = time.time()
    assert before <= studio_state.system_clock() <= time.time()


async def test_query_helpers_return_dicts_values_and_counts(tmp_path: Path) -> None:
    async with studio_state.connect(tmp_path / "q.db") as conn:
        await conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        await studio_state.execute_many(conn, "INSERT INTO t (name) VALUES (?)", [("a",), ("b",)])
        assert await studio_state.fetch_all(conn, "SELECT name FROM t ORDER BY id") == [
            {"name": "a"},
            {"name": "b"},
        ]
        assert await studio_state.fetch_one(conn, "SELECT name FROM t WHERE id = ?", (2,)) == {
            "name": "b"
        }
        assert await studio_state.fetch_one(conn, "SELECT name FROM t WHERE id = 9") is None
        assert await studio_state.fetch_value(conn, "SELECT count(*) FROM t") == 2
        assert await studio_state.fetch_value(conn, "SELECT name FROM t WHERE id = 9") is None
        assert await studio_state.execute(conn, "UPDATE t SET name = 'z'") == 2


async def test_query_helpers_make_one_round_trip_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Counts calls into aiosqlite's worker thread (the library's own dispatch, wrapped, not
    # replaced): each helper is one hop, where execute + fetch + close would be three.
    hops = 0
    original = aiosqlite.Connection._execute

    async def counting(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return await original(self, fn, *args, **kwargs)

    async with studio_state.connect(tmp_path / "hops.db") as conn:
        await conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        await studio_state.execute_many(conn, "INSERT INTO t (name) VALUES (?)", [("a",), ("b",)])
        monkeypatch.setattr(aiosqlite.Connection, "_execute", counting)
        hops = 0
        assert await studio_state.fetch_all(conn, "SELECT name FROM t ORDER BY id") == [
            {"name": "a"},
            {"name": "b"},
        ]
        assert hops == 1
        hops = 0
        assert await studio_state.fetch_one(
            conn, "SELECT name FROM t WHERE id = :id", {"id": 1}
        ) == {"name": "a"}
        assert hops == 1
        hops = 0
        assert await studio_state.fetch_value(conn, "SELECT name FROM t WHERE id = ?", (2,)) == "b"
        assert hops == 1
        hops = 0
        assert await studio_state.fetch_one(conn, "SELECT name FROM t WHERE id = 9") is None
        assert hops == 1
