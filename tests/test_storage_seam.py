"""Guards the storage seam: SQL in scheduler-core, studio-api and studio-cli lives only in the
modules docs/architecture.md names ("The storage seam").

Every string literal of every source module (docstrings and other bare string statements
aside) is searched for SQL: a data statement (``SELECT``, ``INSERT INTO``, ``UPDATE … SET``,
``DELETE FROM``, or a table of the schema named after ``FROM``/``JOIN``/``INTO``/``UPDATE``), a
``PRAGMA``, or transaction control. A module outside the allowed list that holds any of these,
or an allowed module that holds a kind it is not allowed, fails the test: move the statement
into the concern's store module and call it from there.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

STATEMENT = "statement"
PRAGMA = "pragma"
TRANSACTION = "transaction"

SCANNED = {
    "scheduler-core": "studio_scheduler_core",
    "studio-api": "studio_api",
    "cli": "studio_cli",
}

# Path (relative to the package's import directory) → the kinds of SQL it may hold. A
# subpackage's ``store.py`` may hold every kind (it is the seam).
ALLOWED: dict[str, dict[str, frozenset[str]]] = {
    "scheduler-core": {
        # migrations: the schema of every table Studio needs, each migration's SQLite and
        # PostgreSQL text side by side, and the migrating itself
        "_schema/__init__.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v01_tables.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v02_v07_indexes.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v08_policies.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v09_v14_nodes.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v15_run_logs.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v16_health_counters.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v17_at_rate_limit.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v18_schedule_sets.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v19_health_backfill.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v20_pruned_totals.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        "_schema/v21_spend_total.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        # the one guarded terminal write of runs and invocations
        "_records/terminal.py": frozenset({STATEMENT}),
        # the database file's write probe
        "_fire/dbfile.py": frozenset({PRAGMA}),
        # retention: batch purges and the WAL checkpoint on its own sqlite3 connection
        "_recovery/retention.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
        # what each retention walk picks, snapshots for its archive and deletes
        "_recovery/retention_rows.py": frozenset({STATEMENT}),
        # test support reads rows as stored, to assert what a test wrote
        "testing.py": frozenset({STATEMENT}),
        # a savepoint per write inside the grouped terminal-write transaction
        "_fire/grouped.py": frozenset({TRANSACTION}),
    },
    "studio-api": {
        # connection settings of the API's own connections (no data statements)
        "_app.py": frozenset({PRAGMA}),
        "_reads.py": frozenset({PRAGMA}),
        "_storage.py": frozenset({PRAGMA, TRANSACTION}),
        # maintenance of the SQLite file itself: VACUUM, the WAL checkpoint, and the
        # integrity check (and table count) of a backup copy on its own connection, and the
        # audit row of each action in its own short transaction
        "_maintenance.py": frozenset({STATEMENT, PRAGMA, TRANSACTION}),
    },
    "cli": {},
}

_KEYWORDS = {
    STATEMENT: re.compile(r"\bSELECT\s|\bINSERT\s+INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"),
    PRAGMA: re.compile(r"\bPRAGMA\s+\w+|\bpragma_\w+\("),
    TRANSACTION: re.compile(
        r"^\s*(BEGIN(\s+IMMEDIATE|\s+EXCLUSIVE)?|COMMIT|ROLLBACK(\s+TO\s+\w+)?"
        r"|SAVEPOINT\s+\w+|RELEASE\s+\w+)\s*$"
    ),
}


def _tables(root: Path) -> re.Pattern[str]:
    names: set[str] = set()
    for path in (root / "packages").glob("*/src/*/**/*.py"):
        names.update(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", path.read_text()))
    assert {"schedules", "schedule_runs", "dispatch_outbox", "status_transitions"} <= names
    return re.compile(rf"\b(?:FROM|JOIN|INTO|UPDATE)\s+(?:{'|'.join(sorted(names))})\b")


def _literals(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of each string literal that is not a bare string statement; an
    f-string yields its literal parts joined with a space where a value goes."""
    bare = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    parts_of_fstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = " ".join(
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "x"
                for v in node.values
            )
            parts_of_fstrings.update(id(v) for v in node.values)
            yield node.lineno, text
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in bare
            and id(node) not in parts_of_fstrings
        ):
            yield node.lineno, node.value


def sql_kinds(source: str, tables: re.Pattern[str]) -> dict[str, list[int]]:
    """The kinds of SQL the module's literals hold, with the lines they are on."""
    found: dict[str, list[int]] = {}
    for line, text in _literals(ast.parse(source)):
        for kind, pattern in _KEYWORDS.items():
            if pattern.search(text) or (kind == STATEMENT and tables.search(text)):
                found.setdefault(kind, []).append(line)
    for lines in found.values():
        lines.sort()
    return found


def _allowed(folder: str, relative: str) -> frozenset[str]:
    if relative.endswith("/store.py"):
        return frozenset({STATEMENT, PRAGMA, TRANSACTION})
    return ALLOWED[folder].get(relative, frozenset())


def test_the_detector_finds_sql_and_ignores_prose(repo_root: Path) -> None:
    tables = _tables(repo_root)
    source = '''
"""Reads rows: SELECT id FROM schedules is prose in a docstring."""
A = "SELECT id FROM schedules WHERE id = ?"
B = f"UPDATE schedule_runs SET status = ? WHERE {where}"
C = "FROM dispatch_outbox WHERE status = 'pending'"
D = "PRAGMA user_version"
E = "BEGIN IMMEDIATE"
F = ("DELETE", "/api/dispatch/{id}")
G = "update the schedule, then select a run"
def f():
    """DELETE FROM sessions, in prose."""
'''
    assert sql_kinds(source, tables) == {
        STATEMENT: [3, 4, 5],
        PRAGMA: [6],
        TRANSACTION: [7],
    }


@pytest.mark.parametrize("folder", sorted(SCANNED))
def test_sql_lives_only_in_the_storage_seam(repo_root: Path, folder: str) -> None:
    tables = _tables(repo_root)
    src = repo_root / "packages" / folder / "src" / SCANNED[folder]
    offenders = []
    for path in sorted(src.rglob("*.py")):
        relative = path.relative_to(src).as_posix()
        found = sql_kinds(path.read_text(), tables)
        extra = sorted(set(found) - _allowed(folder, relative))
        offenders += [f"{relative}:{found[kind][0]}: {kind}" for kind in extra]
    assert offenders == [], f"SQL outside the storage seam of {folder}: {offenders}"


def test_every_allowed_module_exists(repo_root: Path) -> None:
    for folder, modules in ALLOWED.items():
        src = repo_root / "packages" / folder / "src" / SCANNED[folder]
        for relative in modules:
            assert (src / relative).is_file(), f"{folder}: {relative}"
