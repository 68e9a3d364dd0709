"""An ``at`` schedule that already fired is not enabled again with its passed instant:
``studio schedule enable`` refuses it (exit 1, one line naming ``at``) until ``studio schedule
update --at`` gives it a new instant. The fire is real: a served Studio on the same database."""

from __future__ import annotations

import os
import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import Studio

from studio_api import StudioSettings
from studio_api.testing import serve_studio
from studio_state.testing import wait_for


def _once(db: Path) -> tuple[int, str | None, int]:
    conn = sqlite3.connect(db)
    try:
        enabled, reason, sid = conn.execute(
            "SELECT enabled, disabled_reason, id FROM schedules WHERE name = 'once'"
        ).fetchone()
        runs = conn.execute("SELECT count(*) FROM schedule_runs WHERE schedule_id = ?", (sid,))
        return int(enabled), reason, int(runs.fetchone()[0])
    finally:
        conn.close()


def test_a_fired_at_needs_a_new_instant_to_be_enabled(studio: Studio) -> None:
    studio.env["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"] = "python3"
    soon = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0).isoformat()
    studio.run("schedule", "create", "command", "once", "--at", soon, "--", "python3", "-c", "1")
    settings = StudioSettings.from_env(
        {}, db=studio.db, port=0, tick_seconds=1, command_allowlist="python3"
    )
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + saved
    try:
        with serve_studio(settings):
            wait_for(lambda: _once(studio.db) == (0, "schedule.disabled.once", 1), timeout=30)
    finally:
        os.environ["PATH"] = saved

    refused = studio.run("schedule", "enable", "once", expect=1)
    (line,) = refused.stderr.splitlines()
    assert f"at: '{soon}' has passed" in line and "set a new future 'at'" in line
    assert _once(studio.db) == (0, "schedule.disabled.once", 1)

    later = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0).isoformat()
    studio.run("schedule", "update", "once", "--at", later)
    shown = studio.ok_json("schedule", "enable", "once", "--json")
    assert (shown["enabled"], shown["at"]) == (True, later)
    assert shown["next_fire_at"] == datetime.fromisoformat(later).timestamp()
