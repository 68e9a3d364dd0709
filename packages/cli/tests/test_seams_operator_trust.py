"""Issue 37 through real processes: ``studio token``, ``studio db``, the bulk purge, and a
backup taken while a served Studio fires, then opened by a fresh ``studio serve``."""

from __future__ import annotations

import getpass
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import STUDIO, Studio, base_env

from studio_state.testing import free_port, wait_for

BIN = str(Path(sys.executable).parent)
ACTOR = f"cli:{getpass.getuser()}"


class Served:
    """A real ``studio serve`` subprocess on ``db``."""

    def __init__(self, root: Path, db: Path) -> None:
        self.db = db
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = base_env(root)
        env.update(
            PATH=BIN + os.pathsep + env.get("PATH", ""),
            LIONAGI_STUDIO_DB=str(db),
            LIONAGI_STUDIO_TICK_SECONDS="1",
            LIONAGI_SCHEDULER_COMMAND_ALLOWLIST="python3,sleep,true",
        )
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [*STUDIO, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env=env,
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        wait_for(self.up, timeout=60, what="studio serve answering /api/health")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def up(self) -> bool:
        assert self.proc.poll() is None, "\n".join(self.lines)
        try:
            return httpx.get(f"{self.url}/api/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        assert not any("Traceback" in line for line in self.lines), self.lines


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Served]]:
    started: list[Served] = []
    try:
        yield started
    finally:
        for server in reversed(started):
            server.stop()


def _rows(db: Path, sql: str, *params: Any) -> list[sqlite3.Row]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return list(conn.execute(sql, params))
    finally:
        conn.close()


def test_tokens_are_created_listed_used_and_revoked(
    studio: Studio, tmp_path: Path, servers: list[Served]
) -> None:
    created = studio.ok_json("token", "create", "ci-bot", "--role", "operate", "--expires", "90d")
    token = created["token"]
    assert created["role"] == "operate" and token.startswith("sst_")
    assert created["expires_at"] > time.time() + 89 * 86400
    text = studio.run("token", "create", "viewer", "--role", "read")
    assert text.stdout.count("sst_") == 1
    # the database keeps no token, only salted digests
    stored = _rows(studio.db, "SELECT * FROM api_tokens")
    assert len(stored) == 2 and all(token not in str(tuple(row)) for row in stored)

    listed = studio.ok_json("token", "list")
    assert [(t["name"], t["role"], t["state"]) for t in listed] == [
        ("ci-bot", "operate", "live"),
        ("viewer", "read", "live"),
    ]
    table = studio.run("token", "list").stdout
    assert "ci-bot" in table and "LAST USED" in table and "sst_" not in table

    taken = studio.fail("token", "create", "ci-bot", "--role", "read")
    assert "ci-bot" in taken.error_line
    assert (
        "--expires"
        in studio.fail("token", "create", "x", "--role", "read", "--expires", "soon").error_line
    )
    assert "name" in studio.fail("token", "create", "bad name", "--role", "read").error_line
    assert "auth-token" in studio.fail("token", "create", "auth-token", "--role", "read").error_line

    served = Served(tmp_path, studio.db)
    servers.append(served)
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{served.url}/api/schedules").status_code == 401
    assert httpx.get(f"{served.url}/api/schedules", headers=headers).status_code == 200
    refused = httpx.post(f"{served.url}/api/schedules", json={}, headers=headers)
    assert refused.status_code == 403 and refused.json()["required_role"] == "admin"
    used = {t["name"]: t for t in studio.ok_json("token", "list")}
    assert used["ci-bot"]["last_used_at"] is not None

    studio.run("token", "revoke", "ci-bot")
    assert httpx.get(f"{served.url}/api/schedules", headers=headers).status_code == 401
    assert "ci-bot" in studio.fail("token", "revoke", "ci-bot").error_line
    assert [t["name"] for t in studio.ok_json("token", "list")] == ["viewer"]
    assert {t["state"] for t in studio.ok_json("token", "list", "--all")} == {"live", "revoked"}

    audit = _rows(
        studio.db,
        "SELECT reason_code, actor FROM status_transitions WHERE entity_type = 'token' "
        "ORDER BY rowid",
    )
    assert [(r["reason_code"], r["actor"]) for r in audit] == [
        ("token.created", ACTOR),
        ("token.created", ACTOR),
        ("token.revoked", ACTOR),
    ]


def test_vacuum_and_checkpoint_are_audited_and_busy_is_one_line(studio: Studio) -> None:
    vacuumed = studio.ok_json("db", "vacuum")
    assert vacuumed["bytes_after"] > 0
    checkpointed = studio.ok_json("db", "checkpoint")
    assert checkpointed["action"] == "checkpoint"
    audit = _rows(
        studio.db,
        "SELECT reason_code, actor FROM status_transitions WHERE entity_type = 'maintenance' "
        "ORDER BY rowid",
    )
    assert [(r["reason_code"], r["actor"]) for r in audit] == [
        ("maintenance.vacuum", ACTOR),
        ("maintenance.checkpoint", ACTOR),
    ]
    blocker = sqlite3.connect(studio.db, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        busy = studio.fail("db", "vacuum")
        assert "busy" in busy.error_line or "locked" in busy.error_line
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_backup_refuses_what_it_cannot_do(studio: Studio, tmp_path: Path) -> None:
    existing = tmp_path / "exists.db"
    existing.write_bytes(b"")
    assert "exists" in studio.fail("db", "backup", str(existing)).error_line
    assert "does not exist" in studio.fail("db", "backup", str(tmp_path / "no" / "x.db")).error_line
    postgres = studio.run(
        "db",
        "backup",
        str(tmp_path / "x"),
        "--db",
        "postgresql://u:secret@127.0.0.1/studio",
        expect=2,
    )
    assert "pg_dump" in postgres.stdout and "secret" not in postgres.stdout


def test_backup_of_a_corrupt_database_exits_1(studio: Studio, tmp_path: Path) -> None:
    broken = tmp_path / "broken.db"
    conn = sqlite3.connect(broken)
    conn.execute("CREATE TABLE t (x INTEGER PRIMARY KEY, y TEXT)")
    conn.execute("CREATE INDEX t_y ON t(y)")
    conn.executemany("INSERT INTO t (y) VALUES (?)", [(f"row {i}" * 20,) for i in range(2000)])
    conn.commit()
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 't_y'").fetchone()[0]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with broken.open("r+b") as fh:  # scribble over the index's root page
        fh.seek((root - 1) * page + 8)
        fh.write(b"\xff" * 64)
    failed = studio.run("db", "backup", str(tmp_path / "copy.db"), "--db", str(broken), expect=1)
    assert "integrity_check" in failed.error_line


def test_bulk_purge_says_what_it_would_remove_and_removes_it(studio: Studio) -> None:
    ids = [
        studio.ok_json("dispatch", "enqueue", "--kind", "k", "--to", f"d{i}")["id"]
        for i in range(4)
    ]
    conn = sqlite3.connect(studio.db)
    conn.execute(
        "UPDATE dispatch_outbox SET status = 'dead_letter', updated_at = 1000 WHERE id IN (?, ?)",
        ids[:2],
    )
    conn.execute(
        "UPDATE dispatch_outbox SET status = 'dead_letter', updated_at = ? WHERE id = ?",
        (time.time(), ids[2]),
    )
    conn.execute(
        "UPDATE dispatch_outbox SET status = 'delivering', next_attempt_at = ? WHERE id = ?",
        (time.time() + 300, ids[3]),
    )
    conn.commit()
    conn.close()
    dry = studio.run(
        "dispatch", "purge", "--status", "dead_letter", "--before", "2000-01-01T00:00Z", "--dry-run"
    )
    assert "Would remove 2 dead_letter dispatches" in dry.stdout
    assert len(_rows(studio.db, "SELECT id FROM dispatch_outbox")) == 4
    done = studio.ok_json(
        "dispatch", "purge", "--status", "dead_letter", "--before", "2000-01-01T00:00Z", "--yes"
    )
    assert done["removed"] == 2
    assert {r["id"] for r in _rows(studio.db, "SELECT id FROM dispatch_outbox")} == set(ids[2:])
    audit = _rows(
        studio.db,
        "SELECT entity_id, actor FROM status_transitions "
        "WHERE reason_code = 'dispatch.purged.operator'",
    )
    assert {(r["entity_id"], r["actor"]) for r in audit} == {(ids[0], ACTOR), (ids[1], ACTOR)}
    assert (
        "delivering" in studio.run("dispatch", "purge", "--status", "delivering", expect=2).stderr
    )
    assert "--status" in studio.fail("dispatch", "purge", "--dry-run").error_line
    assert (
        "not both" in studio.fail("dispatch", "purge", ids[2], "--status", "dead_letter").error_line
    )
    assert (
        "--before"
        in studio.fail("dispatch", "purge", "--status", "acked", "--before", "soon").error_line
    )


def test_a_backup_taken_while_fires_run_is_served_by_a_fresh_studio(
    studio: Studio, tmp_path: Path, servers: list[Served]
) -> None:
    live = Served(tmp_path, studio.db)
    servers.append(live)
    studio.env["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"] = "python3,sleep,true"
    for i in range(4):
        studio.ok_json(
            "schedule",
            "create",
            f"busy-{i}",
            "--interval",
            "1",
            "--command",
            "python3",
            "--command-arg",
            "-c",
            "--command-arg",
            "print('x' * 100)",
        )
    stop = threading.Event()
    posted: list[int] = []

    def load() -> None:
        with httpx.Client(base_url=live.url, timeout=30) as client:
            while not stop.is_set():
                answer = client.post(
                    "/api/runs", json={"action_kind": "command", "action_command": "true"}
                )
                posted.append(answer.status_code)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()

    def fired() -> bool:
        return len(_rows(studio.db, "SELECT id FROM schedule_runs WHERE status = 'completed'")) >= 8

    try:
        wait_for(fired, timeout=60, what="the schedules firing")
        copies = []
        for n in range(3):  # several copies, each while the fires and the load go on
            dest = tmp_path / f"backup-{n}.db"
            made = studio.ok_json("db", "backup", str(dest))
            assert made["integrity"] == "ok"
            copies.append(dest)
    finally:
        stop.set()
        loader.join(timeout=30)
    assert posted and all(code in (201, 202) for code in posted), set(posted)
    live_runs = len(_rows(studio.db, "SELECT id FROM schedule_runs"))

    copy = copies[-1]
    fresh_root = tmp_path / "fresh"
    fresh_root.mkdir()
    fresh = Served(fresh_root, copy)
    servers.append(fresh)
    with httpx.Client(base_url=fresh.url, timeout=30) as client:
        schedules = client.get("/api/schedules").json()["schedules"]
        assert {s["name"] for s in schedules} == {f"busy-{i}" for i in range(4)}
        runs = client.get(f"/api/schedules/{schedules[0]['id']}/runs")
        assert runs.status_code == 200, runs.text
        assert runs.json()["runs"], runs.text
    copied_runs = len(_rows(copy, "SELECT id FROM schedule_runs"))
    assert 8 <= copied_runs <= live_runs + 1000
