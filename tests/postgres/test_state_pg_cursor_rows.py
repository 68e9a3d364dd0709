"""sqlite3 behaviours the outbox's plain-``sqlite3`` front-end relies on, on PostgreSQL."""

from __future__ import annotations

import studio_state
from studio_state._pg_sql import without_index_hints


def test_a_cursor_row_factory_of_none_gives_tuples(pg_dsn: str) -> None:
    conn = studio_state.connect_sync(pg_dsn)
    try:
        assert conn.execute("SELECT 1 AS a, 'x' AS b").fetchall() == [{"a": 1, "b": "x"}]
        cursor = conn.cursor()
        cursor.row_factory = None
        cursor.execute("SELECT ? AS a, ? AS b", (2, "y"))
        assert cursor.fetchall() == [(2, "y")]
        assert [column[0] for column in cursor.description] == ["a", "b"]
        assert conn.execute("SELECT 3 AS c").fetchone() == {"c": 3}  # the connection's stays
    finally:
        conn.close()


def test_index_hints_are_dropped_outside_literals(pg_dsn: str) -> None:
    assert (
        without_index_hints("SELECT n FROM t INDEXED BY idx_t_n WHERE n > ?")
        == "SELECT n FROM t WHERE n > ?"
    )
    assert without_index_hints("SELECT n FROM t NOT INDEXED") == "SELECT n FROM t"
    kept = "SELECT 'a INDEXED BY b' AS s"
    assert without_index_hints(kept) == kept
    conn = studio_state.connect_sync(pg_dsn)
    try:
        conn.execute("CREATE TABLE t (n INTEGER)")
        conn.execute("CREATE INDEX idx_t_n ON t(n)")
        conn.execute("INSERT INTO t VALUES (1), (5)")
        rows = conn.execute("SELECT n FROM t INDEXED BY idx_t_n WHERE n > ?", (2,)).fetchall()
        assert rows == [{"n": 5}]
    finally:
        conn.close()
