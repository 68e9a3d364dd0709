"""The engine lock beside a database: a lock file that cannot be made names the database."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio_scheduler_core import DatabaseUnavailable
from studio_scheduler_core._engine.lock import EngineLock


def test_a_lock_file_that_cannot_be_created_names_the_database() -> None:
    lock = EngineLock("/proc/forbidden.db")
    with pytest.raises(DatabaseUnavailable) as caught:
        lock.acquire()
    assert caught.value.path == "/proc/forbidden.db"
    assert "/proc/forbidden.db cannot be written" in str(caught.value)
    assert not lock.held


def test_the_lock_is_taken_and_released(tmp_path: Path) -> None:
    lock = EngineLock(tmp_path / "state.db")
    lock.acquire()
    assert lock.held
    assert Path(lock.path).read_text().strip().isdigit()
    lock.release()
    assert not lock.held
