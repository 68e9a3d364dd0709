"""The real ``studio`` CLI names its user in the audit trail: ``cli:<os user>``.

Commands that change the database directly (create, update, backfill, disable, enable, run
enqueue, cancel, delete) record ``cli:<user>`` on their ``status_transitions`` rows. A manual
fire goes through the served Studio, so its row names the server's principal (``api`` for a
Studio without tokens) — never a name of Studio's own.
"""

from __future__ import annotations

import getpass
import os
import sqlite3
import sys
import time
from pathlib import Path

from conftest import Studio

from studio_api import StudioSettings
from studio_api.testing import serve_studio
from studio_scheduler_core._recovery.retention_rows import STUDIO_ACTORS
from studio_state.testing import wait_for

ACTOR = f"cli:{getpass.getuser()}"
BIN = str(Path(sys.executable).parent)


def _rows(db: Path) -> list[tuple[str, str, str, str | None]]:
    conn = sqlite3.connect(db)
    try:
        return list(
            conn.execute(
                "SELECT entity_type, entity_id, reason_code, actor FROM status_transitions "
                "ORDER BY created_at, rowid"
            )
        )
    finally:
        conn.close()


def _status(db: Path, run_id: str) -> str | None:
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT status FROM schedule_runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


def test_cli_changes_carry_the_os_user(studio: Studio, tmp_path: Path) -> None:
    db = tmp_path / "served.db"
    settings = StudioSettings.from_env(
        {}, db=db, port=0, tick_seconds=1, timezone="UTC", command_allowlist="python3"
    )
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = BIN + os.pathsep + saved
    try:
        with serve_studio(settings) as url:
            studio.db = db
            studio.env.update(
                LIONAGI_STUDIO_DB=str(db),
                LIONAGI_STUDIO_URL=url,
                LIONAGI_SCHEDULER_COMMAND_ALLOWLIST="python3",
            )
            sleep = ["--command-arg", "-c", "--command-arg", "import time; time.sleep(60)"]
            created = studio.create("nightly", "--interval", "1h", "--command", "python3", *sleep)
            sid = str(created["id"])
            studio.run("schedule", "update", "nightly", "--interval", "30m")
            now = int(time.time())
            studio.run(
                "schedule", "backfill", "nightly", "--from", str(now - 5400), "--to", str(now - 1)
            )
            fired = studio.ok_json("schedule", "trigger", "nightly")
            run_id = str(fired["run_id"])
            studio.run("schedule", "cancel", run_id)
            assert _status(db, run_id) == "cancelled"
            studio.run("schedule", "disable", "nightly", "--reason", "window")
            studio.run("schedule", "enable", "nightly")
            queued = studio.run(
                "run", "command", "--json", "--", "python3", "-c", "import time; time.sleep(60)"
            )
            adhoc_id = str(queued.json()["id"])
            studio.run("run", "cancel", adhoc_id)
            wait_for(lambda: _status(db, adhoc_id) == "cancelled", timeout=30)
            # a backfilled occurrence may be running by now: --force cancels it first
            studio.run("schedule", "delete", "nightly", "--yes", "--force")
    finally:
        os.environ["PATH"] = saved

    rows = _rows(db)
    mine = {(kind, ident, code) for kind, ident, code, actor in rows if actor == ACTOR}
    assert ("schedule", sid, "schedule.created") in mine
    assert ("schedule", sid, "schedule.updated.operator") in mine
    assert ("schedule", sid, "schedule.disabled.manual") in mine
    assert ("schedule", sid, "schedule.enabled.manual") in mine
    assert ("schedule", sid, "schedule.deleted.manual") in mine
    assert ("schedule_run", run_id, "run.cancelled.operator") in mine
    assert ("schedule_run", adhoc_id, "run.queued.enqueued") in mine
    assert ("schedule_run", adhoc_id, "run.cancelled.operator") in mine
    cancels = [r for r in rows if r[2] == "run.cancelled.operator"]
    assert cancels and all(r[3] == ACTOR for r in cancels)  # force-delete's cancels too
    backfilled = [r for r in rows if r[2] == "schedule.backfill.queued"]
    assert len(backfilled) >= 2 and all(r[3] == ACTOR for r in backfilled)
    # the manual fire went through the server: its principal (no tokens: "api"), not Studio
    fire = [r for r in rows if r[1] == run_id and r[2] == "schedule.fired.manual"]
    assert fire and all(r[3] == "api" for r in fire)
    assert "api" not in STUDIO_ACTORS and ACTOR not in STUDIO_ACTORS
