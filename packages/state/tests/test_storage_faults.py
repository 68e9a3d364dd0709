"""Storage faults are told by SQLite's result code, never by the message's words."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from studio_state import storage_fault_of


def _refused_write(path: Path) -> sqlite3.Error:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.Error) as caught:
            db.execute("INSERT INTO t VALUES (1)")
    finally:
        db.close()
    return caught.value


def test_a_read_only_database_is_told_by_its_result_code(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    error = _refused_write(path)
    assert getattr(error, "sqlite_errorname", "").startswith("SQLITE_READONLY")
    assert storage_fault_of(error) == "readonly"
    # Raised from it (a wrapper of ours): the same answer.
    try:
        raise RuntimeError("wrapped") from error
    except RuntimeError as wrapped:
        assert storage_fault_of(wrapped) == "readonly"


def test_a_file_that_is_not_a_database_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"not a database at all, but long enough to have a header" * 100)
    db = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.DatabaseError) as caught:
            db.execute("SELECT * FROM sqlite_master")
    finally:
        db.close()
    assert storage_fault_of(caught.value) == "corrupt"


def test_message_words_without_a_code_are_not_a_fault() -> None:
    """An error that only says "disk full" or "readonly database" in its text (raised by a
    wrapper, or translated) carries no code: nothing is guessed from the words."""
    for text in ("database or disk is full", "attempt to write a readonly database", "disk I/O"):
        assert storage_fault_of(sqlite3.OperationalError(text)) is None


def test_other_coded_errors_are_not_faults(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "a.db")
    try:
        with pytest.raises(sqlite3.OperationalError) as caught:
            db.execute("SELECT * FROM missing")
    finally:
        db.close()
    assert storage_fault_of(caught.value) is None
