"""The statement rewriting for PostgreSQL (pure text; no server needed)."""

from __future__ import annotations

import pytest

from studio_state._pg_sql import begin_statement, end_statement, pragma, to_psycopg


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM t WHERE a = ? AND b = ?", "SELECT * FROM t WHERE a = %s AND b = %s"),
        ("SELECT '?' , ?", "SELECT '?' , %s"),
        ("SELECT 'it''s ?', ?", "SELECT 'it''s ?', %s"),
        ('SELECT "odd?col" FROM t WHERE x = ?', 'SELECT "odd?col" FROM t WHERE x = %s'),
        ("SELECT 1 -- why?\n, ?", "SELECT 1 -- why?\n, %s"),
        ("SELECT /* ? */ ?", "SELECT /* ? */ %s"),
        ("SELECT a % 2, ? WHERE b LIKE '10%'", "SELECT a %% 2, %s WHERE b LIKE '10%%'"),
        ("SELECT $$ ? $$, ?", "SELECT $$ ? $$, %s"),
        ("SELECT $f$ ? $f$, ?", "SELECT $f$ ? $f$, %s"),
        ("SELECT a::text, ?", "SELECT a::text, %s"),
        ("SELECT :name, ?", "SELECT :name, %s"),
    ],
)
def test_qmark_placeholders_become_psycopgs_outside_literals(sql: str, expected: str) -> None:
    assert to_psycopg(sql) == expected


def test_named_placeholders_with_a_mapping() -> None:
    named = to_psycopg("SELECT :a, ':b', x::int, :c_1", True)
    assert named == "SELECT %(a)s, ':b', x::int, %(c_1)s"


@pytest.mark.parametrize(
    "sql", ["BEGIN", "BEGIN IMMEDIATE", "begin immediate;", " BEGIN EXCLUSIVE TRANSACTION "]
)
def test_sqlites_begin_forms(sql: str) -> None:
    assert begin_statement(sql)


@pytest.mark.parametrize("sql", ["BEGIN ISOLATION LEVEL SERIALIZABLE", "BEGINNING", "SELECT 1"])
def test_other_statements_are_not_begin(sql: str) -> None:
    assert not begin_statement(sql)


def test_end_statements() -> None:
    assert end_statement("COMMIT") == "COMMIT"
    assert end_statement("end transaction;") == "COMMIT"
    assert end_statement(" ROLLBACK ") == "ROLLBACK"
    assert end_statement("ROLLBACK TO SAVEPOINT s") is None


@pytest.mark.parametrize(
    ("sql", "parsed"),
    [
        ("PRAGMA data_version", ("data_version", None)),
        ("pragma synchronous = NORMAL", ("synchronous", "NORMAL")),
        ("PRAGMA journal_mode=WAL", ("journal_mode", "WAL")),
        ("PRAGMA main.wal_checkpoint(TRUNCATE)", ("wal_checkpoint", "TRUNCATE")),
        ("PRAGMA busy_timeout=5000;", ("busy_timeout", "5000")),
        ("PRAGMA ???", ("", None)),
        ("SELECT 'PRAGMA x'", None),
    ],
)
def test_pragma_statements_are_parsed(sql: str, parsed: tuple[str, str | None] | None) -> None:
    assert pragma(sql) == parsed
