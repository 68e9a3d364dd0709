"""PostgreSQL errors are classified by SQLSTATE and constraint name, never by message text.

The same operations run against the session's cluster (English messages) and against a
cluster whose server speaks German (``lc_messages = de_DE.UTF-8``). The machine has no German
locale installed, so the test compiles one with ``localedef`` into a temporary directory and
starts that cluster with ``LOCPATH`` pointing at it; PostgreSQL's own German translations come
with the server. The answers must be the same: a taken schedule name (the uniqueness
constraint's path, not the pre-check), a dispatch's dedup key, a foreign key, a busy lock.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from studio_api.testing import ServeProcess
from studio_scheduler_core import ScheduleNameTaken
from studio_scheduler_core._schedules.store import insert_schedule
from studio_state import classify_db_error, connect, is_busy_error
from studio_state.testing_pg import build_locale, start_cluster


@pytest.fixture(scope="module")
def german_cluster_dsn() -> Iterator[str]:
    locales = Path(tempfile.mkdtemp(prefix="studio-locale-"))
    try:
        name = build_locale("de_DE", locales)
        cluster = start_cluster(env={"LOCPATH": str(locales)}, settings={"lc_messages": name})
        try:
            yield cluster.dsn
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(locales, ignore_errors=True)


@pytest.fixture(params=["english", "german"])
def server_dsn(request: pytest.FixtureRequest, pg_dsn: str) -> Iterator[str]:
    if request.param == "english":
        yield pg_dsn
        return
    base = request.getfixturevalue("german_cluster_dsn")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("CREATE DATABASE errors_de")
    try:
        yield base.rsplit("/", 1)[0] + "/errors_de"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute("DROP DATABASE errors_de WITH (FORCE)")


def _message(dsn: str, sql: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(sql)
        except psycopg.Error as exc:
            return str(exc.diag.message_primary)
    raise AssertionError(f"{sql} did not fail")


def _schedule(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "command",
        "action_command": "true",
    }


async def _library_answers(dsn: str) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as raw:
        row = raw.execute("SELECT * FROM schedules WHERE name = 'taken'").fetchone()
        required = [
            (str(r["column_name"]), str(r["data_type"]))
            for r in raw.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = 'schedule_runs' AND is_nullable = 'NO' "
                "AND column_default IS NULL AND is_identity = 'NO'"
            )
        ]
    assert row is not None
    async with connect(dsn) as conn:
        # The name's uniqueness constraint itself (the service's pre-check is passed by).
        values = {k: v for k, v in row.items() if k != "rowid"} | {"id": "another-id"}
        await conn.execute("BEGIN")
        try:
            await insert_schedule(conn, values)
        except ScheduleNameTaken as exc:
            answers["name"] = ("ScheduleNameTaken", str(exc))
        finally:
            await conn.execute("ROLLBACK")
        # A foreign key: a run of a schedule that does not exist (every other required
        # column filled).
        values = {"id": "r1", "schedule_id": "no-such-schedule"} | {
            column: 0 if kind in ("integer", "bigint", "double precision", "real") else "{}"
            for column, kind in required
            if column not in ("id", "schedule_id")
        }
        try:
            await conn.execute(
                f"INSERT INTO schedule_runs ({', '.join(values)}) "
                f"VALUES ({', '.join('?' * len(values))})",
                list(values.values()),
            )
        except sqlite3.IntegrityError as exc:
            found = classify_db_error(exc)
            answers["foreign_key"] = (found.kind, found.code, found.constraint)
    return answers


def _busy(dsn: str) -> tuple[bool, str]:
    """A row lock met with NOWAIT: busy, by its SQLSTATE."""
    with (
        psycopg.connect(dsn) as holder,
        psycopg.connect(dsn) as other,
    ):
        holder.execute("SELECT id FROM schedules WHERE name = 'taken' FOR UPDATE")
        try:
            other.execute("SELECT id FROM schedules WHERE name = 'taken' FOR UPDATE NOWAIT")
        except psycopg.Error as exc:
            return is_busy_error(exc), str(exc.sqlstate)
    raise AssertionError("NOWAIT did not fail")


async def test_errors_get_the_same_answers_in_another_language(
    server_dsn: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    german = "german" in request.node.callspec.id
    text = _message(server_dsn, "SELECT 1/0")
    assert (text == "division by zero") is not german, text  # the server speaks German there

    node = ServeProcess.node("node-a", server_dsn, tmp_path / "a")
    try:
        made = httpx.post(f"{node.url}/api/schedules", json=_schedule("taken"))
        assert made.status_code == 201, made.text
        again = httpx.post(f"{node.url}/api/schedules", json=_schedule("taken"))
        assert again.status_code == 409, again.text
        body = {"kind": "k", "deliver_to": "somewhere", "dedup_key": "once"}
        first = httpx.post(f"{node.url}/api/dispatch", json=body)
        second = httpx.post(f"{node.url}/api/dispatch", json=body)
        assert (first.status_code, second.status_code) == (201, 200), second.text
        assert (first.json()["created"], second.json()["created"]) == (True, False)
        assert second.json()["id"] == first.json()["id"]
        answers = await _library_answers(server_dsn)
    finally:
        node.stop()

    assert answers["name"][0] == "ScheduleNameTaken" and "taken" in answers["name"][1]
    kind, code, constraint = answers["foreign_key"]
    assert (kind, code) == ("foreign_key", "23503")
    assert constraint == "schedule_runs_schedule_id_fkey"
    assert _busy(server_dsn) == (True, "55P03")


async def test_a_read_only_server_is_a_storage_fault_by_its_sqlstate(server_dsn: str) -> None:
    """A write refused by a read-only session (what a standby or a server made read-only
    answers) is the storage fault "read-only" by its SQLSTATE, in either language; the
    API names it so (503), not as an internal error."""
    from studio_api._errors import storage_problem
    from studio_scheduler_core._fire.dbfile import storage_fault
    from studio_state import storage_fault_of

    async with connect(server_dsn) as conn:
        await conn.execute("SET default_transaction_read_only = on")
        with pytest.raises(sqlite3.OperationalError) as caught:
            await conn.execute("CREATE TABLE t_readonly (x integer)")
    assert storage_fault_of(caught.value) == "readonly"
    problem = storage_problem(caught.value)
    assert problem is not None and "the database is read-only" in problem
    # the engine's own health (what halts its writes and shows on /api/health) agrees
    assert storage_fault(caught.value) == "read-only database"
    # Not a fault: another refused statement with the same class of error (operational).
    async with connect(server_dsn) as conn:
        with pytest.raises(sqlite3.OperationalError) as other:
            await conn.execute("SELECT * FROM no_such_table")
    assert storage_fault_of(other.value) is None
    assert storage_problem(other.value) is None
    assert storage_fault(other.value) is None
