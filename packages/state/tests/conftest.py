from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_state
from studio_state.testing import clean_environment  # noqa: F401  (autouse fixture)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "studio.db"


@pytest.fixture
async def conn(db_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    async with studio_state.connect(db_path) as connection:
        await studio_state.ensure_schema(connection)
        await connection.execute(
            "CREATE TABLE items (id TEXT PRIMARY KEY, status TEXT NOT NULL, "
            "attempt INTEGER NOT NULL DEFAULT 0, note TEXT, updated_at REAL)"
        )
        yield connection


async def _fetch_all(conn: aiosqlite.Connection, sql: str, *params: object) -> list[dict[str, Any]]:
    cursor = await conn.execute(sql, params)
    rows = await cursor.fetchall()
    await cursor.close()
    return [dict(row) for row in rows]


FetchAll = Callable[..., Awaitable[list[dict[str, Any]]]]


@pytest.fixture
def fetch_all() -> FetchAll:
    """``await fetch_all(conn, sql, *params)`` -> rows as dicts."""
    return _fetch_all
