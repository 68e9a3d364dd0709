"""scheduler-core's own tests, run on PostgreSQL.

Each ``test_core_pg_<module>.py`` here takes the namespace of scheduler-core's
``tests/<module>.py`` (its tests and fixtures, and the fixtures of scheduler-core's conftest)
and overrides one fixture, ``db_target``: the URL of a fresh database of the session's cluster
(``pg_dsn``) instead of a SQLite file. The test bodies are the very same functions, so they
assert the same outcomes on both backends. Tests that read the SQLite file itself (sqlite3,
its pragmas, its path) are left out by name, each with the reason.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pytest

from studio_state.testing import load_beside

CORE_TESTS = Path(__file__).resolve().parents[2] / "packages" / "scheduler-core" / "tests"


PLAN = "reads SQLite's query plan"
TRACE = "counts statements with sqlite3's trace callback"
FILE = "reads the SQLite file or its schema itself"
FUNCTION = "slows a statement down with an SQL function defined through sqlite3"


def core_tests(
    module: str, sqlite_only: Mapping[str, Collection[str]] | None = None
) -> dict[str, Any]:
    """The namespace of scheduler-core's ``tests/<module>.py`` with its conftest's fixtures,
    without the tests in ``sqlite_only`` (why they read SQLite itself → their names)."""
    anchor = CORE_TESTS / "conftest.py"
    conftest = load_beside(anchor, "conftest.py", "studio_core_tests_conftest")
    tests = load_beside(anchor, f"{module}.py", f"studio_core_tests_{module}")
    names = {k: v for k, v in vars(conftest).items() if not k.startswith("__")}
    names.update({k: v for k, v in vars(tests).items() if not k.startswith("__")})
    for left_out in (sqlite_only or {}).values():
        for name in left_out:
            assert callable(names.get(name)), f"{module}.{name} is no test"
            del names[name]
    return names


@pytest.fixture
def db_target(pg_dsn: str) -> str:
    """The database the core tests' ``conn`` and ``make_engine`` open: a fresh PostgreSQL one."""
    return pg_dsn
