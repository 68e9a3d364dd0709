"""A full disk that also holds SQLite's temporary files (one disk for everything): a write
inside a savepoint whose statement journal cannot be written makes SQLite roll the whole
transaction back by itself, so the grouped terminal writes' ``ROLLBACK TO`` fails with "no
such savepoint". That error is the disk-full fault (retried until it lands), not a bug that
gives the terminal writes of every run in the group up and leaves them ``running``.
Mounting needs root: CI runs as root, elsewhere this test skips saying so.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from studio_scheduler_core import storage_fault
from studio_scheduler_core._fire.grouped import WriteGroup
from studio_state import connect
from studio_state.testing import fill_disk, mounted_tmpfs


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path, "4m") as mount:
        yield mount


def _rewrite_rows(db: sqlite3.Connection) -> int:
    # Enough changed pages that the savepoint's statement journal leaves memory for a file.
    return db.execute("UPDATE t SET x = ? WHERE id <= 150", (b"b" * 600,)).rowcount


async def test_a_savepoint_rolled_back_by_sqlite_on_a_full_disk_is_the_disk_full_fault(
    tmpfs: Path,
) -> None:
    async with connect(tmpfs / "state.db") as conn:
        await conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, x BLOB)")
        await conn.executemany("INSERT INTO t (x) VALUES (?)", [(b"a" * 500,)] * 200)
        # SQLite's temporary files on the same disk (process-wide: put back below).
        await conn.execute(f"PRAGMA temp_store_directory = '{tmpfs}'")
        try:
            group = WriteGroup(conn)
            filler = fill_disk(tmpfs, check=False)
            with pytest.raises(sqlite3.Error) as failed:
                await group.run(_rewrite_rows)
            assert "no such savepoint" in str(failed.value)  # what the caller sees
            assert storage_fault(failed.value) == "disk full"
            assert not conn.in_transaction  # nothing left open on the connection
            filler.unlink()
            assert await group.run(_rewrite_rows) == 150  # and it lands once space is back
        finally:
            await conn.execute("PRAGMA temp_store_directory = ''")
