"""Backends without a PostgreSQL server: paths vs URLs, connect_sync, the missing extra."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import studio_state
from studio_state import Migration, backend_of, connect_sync, is_postgres


def test_is_postgres_only_for_postgres_urls(tmp_path: Path) -> None:
    assert is_postgres("postgresql://studio@db.example/studio")
    assert is_postgres("postgres://studio@db.example/studio")
    assert not is_postgres("studio.db")
    assert not is_postgres(":memory:")
    assert not is_postgres(tmp_path / "postgresql")
    assert not is_postgres("sqlite:///postgresql://")


def test_connect_sync_on_a_path_is_a_configured_sqlite_connection(tmp_path: Path) -> None:
    db = connect_sync(tmp_path / "sub" / "s.db", synchronous="normal")
    try:
        assert isinstance(db, sqlite3.Connection)
        assert backend_of(db) == "sqlite"
        assert db.isolation_level is None
        assert db.execute("PRAGMA journal_mode").fetchone() == {"journal_mode": "wal"}
        assert db.execute("PRAGMA synchronous").fetchone() == {"synchronous": 1}
        assert db.execute("PRAGMA foreign_keys").fetchone() == {"foreign_keys": 1}
    finally:
        db.close()


def test_connect_sync_refuses_a_bad_synchronous_before_the_file_exists(tmp_path: Path) -> None:
    with pytest.raises(studio_state.InvalidSetting, match="synchronous"):
        connect_sync(tmp_path / "x.db", synchronous="off")
    assert not (tmp_path / "x.db").exists()


async def test_backend_of_sqlite_connections(conn: object) -> None:
    assert backend_of(conn) == "sqlite"
    with pytest.raises(studio_state.InvalidSetting, match="got str"):
        backend_of("studio.db")


async def test_migrate_on_sqlite_runs_the_sqlite_text(conn: object) -> None:
    steps = (Migration(1, "t", "CREATE TABLE t (a REAL);", postgres="this is not run"),)
    assert await studio_state.migrate(conn, "pkg", steps) == [1]  # type: ignore[arg-type]
    assert Migration(2, "d", "SELECT 1").postgres is None


_WITHOUT_PSYCOPG = """
import asyncio, sys
sys.modules["psycopg"] = None  # as if studio-state[postgres] were not installed
import studio_state
url = "postgresql://u@127.0.0.1:1/db"
for attempt in (lambda: asyncio.run(studio_state.open_connection(url)),
                lambda: studio_state.connect_sync(url)):
    try:
        attempt()
    except studio_state.InvalidSetting as exc:
        print(exc)
"""


def test_a_url_without_psycopg_names_the_extra() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PSYCOPG],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    assert all("pip install 'studio-state[postgres]'" in line for line in lines)


def test_import_studio_state_does_not_import_psycopg() -> None:
    code = "import sys, studio_state; print('psycopg' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "False"
