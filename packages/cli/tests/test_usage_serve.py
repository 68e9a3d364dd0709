"""``studio usage report`` (direct, with a real invocation row) and ``studio serve``."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx
from conftest import STUDIO, Studio

from studio_state.testing import free_port


def seed_invocation(studio: Studio, invocation_id: str = "abcdefabcdef") -> str:
    """Migrate the database through the CLI, then add one running invocation."""
    studio.run("schedule", "list")
    now = time.time()
    with sqlite3.connect(studio.db) as conn:
        conn.execute(
            "INSERT INTO invocations (id, skill, status, started_at, created_at, updated_at) "
            "VALUES (?, 'command', 'running', ?, ?, ?)",
            (invocation_id, now, now, now),
        )
    return invocation_id


def sessions(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT invocation_id, status, input_tokens, output_tokens, total_cost_usd "
            "FROM sessions ORDER BY created_at"
        ).fetchall()


def test_usage_report_writes_a_session(studio: Studio) -> None:
    invocation = seed_invocation(studio)
    env = {"LIONAGI_INVOCATION_ID": invocation}
    result = studio.run(
        "usage", "report", "--input-tokens", "10", "--output-tokens", "5", "--cost-usd", "0.01",
        env=env,
    )  # fmt: skip
    assert result.stdout.startswith(f"Recorded usage for invocation {invocation}: session ")
    document = studio.ok_json("usage", "report", "--status", "failed", env=env)
    assert document["invocation_id"] == invocation and len(document["session_id"]) == 12
    assert sessions(studio.db) == [
        (invocation, "completed", 10, 5, 0.01),
        (invocation, "failed", None, None, None),
    ]


def test_usage_report_errors(studio: Studio, tmp_path: Path) -> None:
    invocation = seed_invocation(studio)
    no_id = studio.fail("usage", "report")
    assert "LIONAGI_INVOCATION_ID is not set" in no_id.error_line
    no_db = studio.fail(
        "usage", "report", env={"LIONAGI_INVOCATION_ID": invocation, "LIONAGI_STUDIO_DB": None}
    )
    assert "LIONAGI_STUDIO_DB is not set" in no_db.error_line
    assert not (studio.home / ".lionagi").exists(), "must not fall back to the default database"
    missing = studio.fail(
        "usage",
        "report",
        env={"LIONAGI_INVOCATION_ID": invocation, "LIONAGI_STUDIO_DB": str(tmp_path / "x.db")},
    )
    assert "Studio database not found" in missing.error_line
    unknown = studio.fail("usage", "report", env={"LIONAGI_INVOCATION_ID": "ffffffffffff"})
    assert "invocation_id" in unknown.error_line and "ffffffffffff" in unknown.error_line
    bad_status = studio.fail(
        "usage", "report", "--status", "great", env={"LIONAGI_INVOCATION_ID": invocation}
    )
    assert "status" in bad_status.error_line
    negative = studio.run(
        "usage", "report", "--input-tokens", "-1", env={"LIONAGI_INVOCATION_ID": invocation},
        expect=2,
    )  # fmt: skip
    assert "--input-tokens" in negative.error_line
    assert sessions(studio.db) == []


def test_serve_starts_the_api_and_stops_on_sigint(studio: Studio) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*STUDIO, "serve", "--host", "127.0.0.1", "--port", str(port), "--db", str(studio.db)],
        env={**studio.env, "LIONAGI_STUDIO_TICK_SECONDS": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert health is not None and health.status_code == 200, proc.poll()
        assert health.json()["status"] == "ok"
        assert studio.db.is_file()
    finally:
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert "Traceback" not in output


def test_serve_refuses_bad_settings_with_one_line(studio: Studio) -> None:
    exposed = studio.fail("serve", "--host", "0.0.0.0", "--port", str(free_port()))
    assert "LIONAGI_STUDIO_AUTH_TOKEN" in exposed.error_line
    bad_port = studio.fail("serve", env={"LIONAGI_STUDIO_PORT": "eighty"})
    assert "LIONAGI_STUDIO_PORT" in bad_port.error_line
    assert "--port" in studio.run("serve", "--port", "70000", expect=2).error_line
