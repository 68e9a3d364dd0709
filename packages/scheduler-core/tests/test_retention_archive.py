"""Retention archives before it deletes: each batch's rows go to a verified gzip'd JSON Lines
file with a manifest first; a failed archive (full or read-only file system) deletes nothing
and the next pass, once the disk has room, archives and deletes. Separate windows for runs,
delivered/acked dispatches, dead letters and audit rows; audit rows outlive their run."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from studio_outbox import deliver_due_dispatches, enqueue_dispatch
from studio_scheduler_core import EVENTS_LOGGER, Run
from studio_scheduler_core._recovery.archive import (
    manifests_in,
    read_archive,
    verify_manifest,
)
from studio_scheduler_core._recovery.retention import retention_pass
from studio_scheduler_core._recovery.retention_batch import guarded_delete
from studio_scheduler_core._recovery.retention_rows import walks
from studio_state import (
    fetch_all,
    fetch_value,
    is_postgres,
    record_transition,
    run_sync,
    run_write_transaction,
    write_transaction,
)
from studio_state.testing import fill_disk, mounted_tmpfs

DAY = 86400.0
WINDOWS = {
    "retention_days": 30,
    "dispatch_retention_days": 7,
    "dead_letter_retention_days": 30,
    "audit_retention_days": 365,
}


async def _deliver(conn: Any, db_target: str, **options: Any) -> None:
    """A delivery pass: the outbox's own on SQLite, its PostgreSQL pass on PostgreSQL."""
    if not is_postgres(db_target):
        await deliver_due_dispatches(conn, **options)
        return
    import psycopg

    from studio_outbox import postgres

    async with await psycopg.AsyncConnection.connect(db_target, autocommit=True) as pg:
        await postgres.deliver_due_dispatches(pg, **options)


async def _count(conn: Any, table: str, where: str = "1 = 1", params: tuple[Any, ...] = ()) -> int:
    return int(await fetch_value(conn, f"SELECT COUNT(*) FROM {table} WHERE {where}", params))


async def _dispatches(conn: Any, db_target: str, clock: Any) -> tuple[str, str]:
    """One delivered dispatch and one dead letter, both ended at the clock's time."""
    delivered = await enqueue_dispatch(conn, kind="k", deliver_to="ok", clock=clock)
    await _deliver(conn, db_target, notify_template=["true"], clock=clock)
    dead = await enqueue_dispatch(conn, kind="k", deliver_to="no", max_attempts=1, clock=clock)
    await _deliver(conn, db_target, notify_template=["false"], clock=clock)
    rows = await fetch_all(conn, "SELECT id, status FROM dispatch_outbox ORDER BY created_at")
    assert {r["id"]: r["status"] for r in rows} == {delivered: "delivered", dead: "dead_letter"}
    return delivered, dead


async def _old_run(engine: Any, clock: Any, h: Any) -> Run:
    """A completed run (fired at the clock's time) with an operator's row on its history."""
    ok = h.script("ok.py", "print('ok')\n")
    schedule = await engine.service.create(h.command_schedule(ok, name="old"))
    clock.set(float(schedule.next_fire_at))
    await engine.tick_once()
    await engine.wait_idle()
    run = (await h.runs_of(engine.conn, schedule.id))[0]
    assert run.status == "completed"
    async with write_transaction(engine.conn):
        await record_transition(
            engine.conn,
            entity_type="schedule_run",
            entity_id=run.id,
            previous_status="completed",
            status="completed",
            reason_code="run.noted.operator",
            actor="ops-token",
            now=clock(),
        )
    return run


def _archived(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every row of every archive in ``directory``, by kind (each manifest verified first)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for manifest in manifests_in(directory):
        assert verify_manifest(manifest) is None, manifest
        data = json.loads(manifest.read_text())
        for record in read_archive(directory / data["file"]):
            rows.setdefault(record["kind"], []).append(record["row"])
    return rows


async def test_each_kind_goes_by_its_own_window_archived_first(
    make_engine: Any, clock: Any, h: Any, db_target: str, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, retention_days=0)  # the reaper deletes nothing
    conn = engine.conn
    run = await _old_run(engine, clock, h)
    ended = clock()
    delivered, dead = await _dispatches(conn, db_target, clock)
    async with write_transaction(conn):  # an operator's row with no entity: it goes by age
        await record_transition(
            conn,
            entity_type="maintenance",
            entity_id="m1",
            status="done",
            reason_code="maintenance.vacuum",
            actor="ops-token",
            now=ended,
        )
    runs_dir = tmp_path / "logs"
    runs_dir.mkdir()
    (runs_dir / f"{run.id}.log").write_text("x" * 100 + "the end\n")
    archive = tmp_path / "archive"

    # 8 days on: only the delivered dispatch is past its window
    report = await retention_pass(
        conn, now=ended + 8 * DAY, runs_dir=runs_dir, archive_dir=archive, log_bytes=50, **WINDOWS
    )
    assert (report.runs, report.dispatches, report.audit_rows) == (0, 1, 0)
    assert report.archive_error is None and len(report.archives) == 1
    assert await _count(conn, "dispatch_outbox", "id = ?", (delivered,)) == 0
    assert await _count(conn, "dispatch_outbox", "id = ?", (dead,)) == 1
    rows = _archived(archive)
    assert [r["id"] for r in rows["dispatch"]] == [delivered]
    assert {r["entity_id"] for r in rows["status_transition"]} == {delivered}
    assert await _count(conn, "status_transitions", "entity_id = ?", (delivered,)) == 0

    # 31 days on: the run and the dead letter go; the operator's row on the run stays
    report = await retention_pass(
        conn, now=ended + 31 * DAY, runs_dir=runs_dir, archive_dir=archive, log_bytes=50, **WINDOWS
    )
    assert (report.runs, report.dispatches, report.audit_rows) == (1, 1, 0)
    assert report.log_files == 1 and not (runs_dir / f"{run.id}.log").exists()
    assert await _count(conn, "schedule_runs", "id = ?", (run.id,)) == 0
    assert await _count(conn, "invocations", "schedule_run_id = ?", (run.id,)) == 0
    left = await fetch_all(
        conn, "SELECT actor FROM status_transitions WHERE entity_id = ?", (run.id,)
    )
    assert [r["actor"] for r in left] == ["ops-token"]
    rows = _archived(archive)
    assert [r["id"] for r in rows["schedule_run"]] == [run.id]
    assert [r["id"] for r in rows["invocation"]] == [run.invocation_id]
    run_history = [r for r in rows["status_transition"] if r["entity_id"] == run.id]
    assert "ops-token" in {r["actor"] for r in run_history} and len(run_history) >= 2
    assert any(r["entity_id"] == run.invocation_id for r in rows["status_transition"])
    (log,) = rows["run_log"]  # bounded as the run log is: its last 50 bytes
    assert log["run_id"] == run.id and log["truncated"] and log["bytes"] == 108
    assert log["content"].endswith("the end\n") and len(log["content"]) == 50
    assert [r["id"] for r in rows["dispatch"]] == [delivered, dead]

    # a year on: the operator's row outlived its run by the audit window, and goes too
    report = await retention_pass(
        conn, now=ended + 400 * DAY, runs_dir=runs_dir, archive_dir=archive, **WINDOWS
    )
    assert report.audit_rows == 2 and report.archive_error is None
    assert await _count(conn, "status_transitions", "actor = 'ops-token'") == 0
    audit_manifest = json.loads((archive / report.archives[0]).read_text())
    assert audit_manifest["kind"] == "audit" and audit_manifest["counts"] == {
        "status_transition": 2
    }
    # the schedule still exists: its history is not an audit row that outlived anything
    assert await _count(conn, "status_transitions", "entity_type = 'schedule'") >= 1
    assert len(manifests_in(archive)) == 4
    assert len(list(archive.glob("*.jsonl.gz"))) == 4


async def test_a_window_of_zero_keeps_that_kind_forever(
    conn: Any, clock: Any, db_target: str, tmp_path: Path
) -> None:
    delivered, dead = await _dispatches(conn, db_target, clock)
    report = await retention_pass(
        conn,
        now=clock() + 10_000 * DAY,
        retention_days=30,
        runs_dir=tmp_path,
        dispatch_retention_days=0,
        dead_letter_retention_days=30,
    )
    assert report.dispatches == 1
    assert await _count(conn, "dispatch_outbox", "id = ?", (delivered,)) == 1
    assert await _count(conn, "dispatch_outbox", "id = ?", (dead,)) == 0


async def test_a_row_written_after_the_archive_keeps_its_entity(
    conn: Any, clock: Any, db_target: str
) -> None:
    delivered, dead = await _dispatches(conn, db_target, clock)
    now = clock() + 40 * DAY
    (walk,) = walks(now, runs_days=0, done_days=30, dead_days=30, audit_days=0)
    archived = await run_sync(conn, lambda db: walk.snapshot(db, [delivered, dead]))
    # an operator touches the dead letter between the archive and the delete
    async with write_transaction(conn):
        await record_transition(
            conn,
            entity_type="dispatch",
            entity_id=dead,
            status="dead_letter",
            reason_code="dispatch.noted.operator",
            actor="ops-token",
            now=clock(),
        )
    ids, _ = await run_write_transaction(conn, guarded_delete(walk, archived, time.perf_counter))
    assert ids == [delivered]
    assert await _count(conn, "dispatch_outbox", "id = ?", (dead,)) == 1


# -- a failed archive deletes nothing -------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path, "64k") as mount:
        yield mount


class _Events(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "studio_event", None) == "retention_archive_failed":
            self.seen.append(dict(getattr(record, "studio_fields", {})))


@pytest.fixture
def failures() -> Iterator[_Events]:
    handler = _Events()
    events = logging.getLogger(EVENTS_LOGGER)
    level = events.level
    events.setLevel(logging.DEBUG)
    events.addHandler(handler)
    try:
        yield handler
    finally:
        events.removeHandler(handler)
        events.setLevel(level)


async def test_a_full_disk_deletes_nothing_until_space_returns(
    conn: Any, clock: Any, db_target: str, small_tmpfs: Path, tmp_path: Path, failures: _Events
) -> None:
    delivered, dead = await _dispatches(conn, db_target, clock)
    archive = small_tmpfs / "archive"
    archive.mkdir()
    filler = fill_disk(small_tmpfs)
    now = clock() + 40 * DAY
    report = await retention_pass(conn, now=now, runs_dir=tmp_path, archive_dir=archive, **WINDOWS)
    assert report.archive_error is not None and not report.done
    assert str(archive) in report.archive_error
    assert "No space left on device" in report.archive_error
    assert (report.dispatches, report.archives) == (0, [])
    assert await _count(conn, "dispatch_outbox") == 2
    assert list(archive.iterdir()) == []  # nothing half-written left behind
    assert failures.seen == [{"archive_dir": str(archive), "error": report.archive_error}]

    filler.unlink()  # space returns: the next pass archives and deletes
    report = await retention_pass(conn, now=now, runs_dir=tmp_path, archive_dir=archive, **WINDOWS)
    assert report.archive_error is None and report.done
    assert report.dispatches == 2 and await _count(conn, "dispatch_outbox") == 0
    assert sorted(r["id"] for r in _archived(archive)["dispatch"]) == sorted([delivered, dead])
    assert len(failures.seen) == 1


async def test_a_read_only_archive_dir_deletes_nothing(
    conn: Any, clock: Any, db_target: str, small_tmpfs: Path, tmp_path: Path, failures: _Events
) -> None:
    await _dispatches(conn, db_target, clock)
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    now = clock() + 40 * DAY
    report = await retention_pass(
        conn, now=now, runs_dir=tmp_path, archive_dir=small_tmpfs, **WINDOWS
    )
    assert report.archive_error is not None
    assert str(small_tmpfs) in report.archive_error
    assert "Read-only file system" in report.archive_error
    assert report.dispatches == 0 and await _count(conn, "dispatch_outbox") == 2
    assert [f["archive_dir"] for f in failures.seen] == [str(small_tmpfs)]

    subprocess.run(["mount", "-o", "remount,rw", str(small_tmpfs)], check=True)
    report = await retention_pass(
        conn, now=now, runs_dir=tmp_path, archive_dir=small_tmpfs, **WINDOWS
    )
    assert report.archive_error is None and report.dispatches == 2
    assert await _count(conn, "dispatch_outbox") == 0
