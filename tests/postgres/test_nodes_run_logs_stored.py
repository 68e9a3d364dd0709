"""Logs that outlive their node: a finished run's log is stored in the database when it ends.

Two real ``studio serve`` processes share one throwaway PostgreSQL database, each with a
run-log directory of its own. Node A runs two ad-hoc runs to their end (one prints more than
the run-log bound) and starts a third that keeps running; then node A is killed (``kill -9``)
and its run-log directory removed. Node B serves the finished runs' logs (whole, tail, and
the event stream with ``event: end``) from the database, the CLI prints them from the
database alone, the running run answers 409 naming node A, and a retention pass archives the
stored log with its run and deletes both. A copy that did not land at the run's end is made by
the node's periodic sweep of its run-log directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from studio_api import StudioSettings
from studio_api.testing import ServeProcess, StudioServer
from studio_scheduler_core._recovery.archive import manifests_in, read_archive
from studio_scheduler_core._recovery.retention import retention_pass
from studio_state import connect
from studio_state.testing import db_rows, free_port, wait_for

BOUND = 4096
"""``LIONAGI_STUDIO_RUN_LOG_BYTES`` of the nodes: small, so one run outgrows it."""
DAY = 86400.0


def serve(name: str, dsn: str, home: Path) -> ServeProcess:
    """One ``studio serve`` node with its own home and run-log directory (bounded small)."""
    return ServeProcess.node(name, dsn, home, env={"LIONAGI_STUDIO_RUN_LOG_BYTES": str(BOUND)})


@pytest.fixture
def serving() -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for node in reversed(started):
        node.stop()


def _start(node: ServeProcess, tmp_path: Path, script: str) -> str:
    body = {
        "action_kind": "command",
        "action_command": "sh",
        "action_command_args": ["-c", script],
        "action_cwd": str(tmp_path),
    }
    answer = httpx.post(f"{node.url}/api/runs", json=body)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["run_id"])


def _status(node: ServeProcess, run_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{node.url}/api/schedules/runs/{run_id}").json())


def _stored(dsn: str, run_id: str) -> list[dict[str, Any]]:
    return db_rows(
        dsn, "SELECT content, bytes, dropped, node_id FROM run_logs WHERE run_id = ?", (run_id,)
    )


def _cli_logs(dsn: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "studio_cli", "schedule", "logs", *args, "--db", dsn],
        env={**os.environ, "HOME": str(home), "LIONAGI_STUDIO_RUN_LOG_DIR": str(home / "runs")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def _retention(dsn: str, runs_dir: Path, archive: Path) -> Any:
    async with connect(dsn) as conn:
        return await retention_pass(
            conn,
            now=time.time() + 31 * DAY,
            retention_days=30,
            runs_dir=runs_dir,
            archive_dir=archive,
            log_bytes=BOUND,
        )


def test_a_dead_nodes_finished_runs_logs_are_served_from_the_database(
    pg_dsn: str, tmp_path: Path, serving: list[ServeProcess]
) -> None:
    node_a = serve("node-a", pg_dsn, tmp_path / "a")
    serving.append(node_a)
    wait_for(lambda: (node_a.health() or {}).get("leader"), timeout=30)
    small = _start(node_a, tmp_path, "echo first line; echo second line")
    big = _start(node_a, tmp_path, "i=0; while [ $i -lt 1000 ]; do echo line $i; i=$((i+1)); done")
    for run_id in (small, big):
        wait_for(lambda run_id=run_id: _status(node_a, run_id)["status"] == "completed")
    running = _start(node_a, tmp_path, "echo started; exec sleep 600")
    wait_for(lambda: _status(node_a, running)["status"] == "running")
    # Node B starts only now, so node A ran (and claimed) all three.
    ids = (small, big, running)
    node_b = serve("node-b", pg_dsn, tmp_path / "b")
    serving.append(node_b)
    ran_by = db_rows(pg_dsn, "SELECT node_id FROM schedule_runs WHERE id IN (?, ?, ?)", ids)
    assert {r["node_id"] for r in ran_by} == {"node-a"}

    # Stored by node A when each run ended: bounded as the file is, marker line included.
    wait_for(lambda: _stored(pg_dsn, small) and _stored(pg_dsn, big))
    (row,) = _stored(pg_dsn, small)
    assert bytes(row["content"]) == b"first line\nsecond line\n"
    assert (row["bytes"], row["dropped"], row["node_id"]) == (23, 0, "node-a")
    (row,) = _stored(pg_dsn, big)
    content = bytes(row["content"])
    assert content == (node_a.runs / f"{big}.log").read_bytes()
    assert len(content) <= BOUND and row["bytes"] == len(content)
    assert b"bytes dropped ...]\n" in content and row["dropped"] > 0
    assert content.startswith(b"line 0\n") and content.endswith(b"line 999\n")
    assert not _stored(pg_dsn, running)

    node_a.kill()
    shutil.rmtree(node_a.runs)

    # A running run's live output is on its node only: gone, so 409 naming it. (Node B may
    # already have failed it ``node_lost``: with no stored log the answer is the same.)
    assert _status(node_b, running)["status"] in {"running", "failed"}
    live = httpx.get(f"{node_b.url}/api/schedules/runs/{running}/log")
    assert live.status_code == 409 and "node-a" in live.json()["detail"]
    live_stream = httpx.get(f"{node_b.url}/api/schedules/runs/{running}/log/stream")
    assert live_stream.status_code == 409 and "node-a" in live_stream.json()["detail"]
    refused = _cli_logs(pg_dsn, tmp_path / "elsewhere", running)
    assert refused.returncode == 1 and "node-a" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1

    log = httpx.get(f"{node_b.url}/api/schedules/runs/{small}/log")
    assert log.status_code == 200, log.text
    assert log.text == "first line\nsecond line\n"
    tail = httpx.get(f"{node_b.url}/api/schedules/runs/{small}/log", params={"tail": 12})
    assert tail.status_code == 200 and tail.text == "second line\n"
    whole = httpx.get(f"{node_b.url}/api/schedules/runs/{big}/log")
    assert whole.status_code == 200 and whole.text.encode() == content
    with httpx.stream("GET", f"{node_b.url}/api/schedules/runs/{small}/log/stream") as stream:
        assert stream.status_code == 200
        text = "".join(stream.iter_text())
    assert text.startswith("data: first line\n\ndata: second line\n\n"), text
    end = text.split("event: end\ndata: ", 1)[1].strip()
    assert json.loads(end) == {"status": "completed", "reason_code": "run.completed.ok"}

    # The CLI on a machine with neither file nor a reachable node: the database alone.
    shown = _cli_logs(pg_dsn, tmp_path / "elsewhere", small)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "first line\nsecond line\n"
    followed = _cli_logs(pg_dsn, tmp_path / "elsewhere", big, "--follow")
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.encode() == content and "completed" in followed.stderr

    # Retention takes the stored log with its run, into the archive first.
    archive = tmp_path / "archive"
    report = asyncio.run(_retention(pg_dsn, node_b.runs, archive))
    assert report.archive_error is None and report.runs >= 2
    assert not _stored(pg_dsn, small) and not _stored(pg_dsn, big)
    archived = {
        line["row"]["run_id"]: line["row"]
        for manifest in manifests_in(archive)
        for line in read_archive(archive / json.loads(manifest.read_text())["file"])
        if line["kind"] == "run_log"
    }
    assert archived[small]["content"] == "first line\nsecond line\n"
    assert archived[big]["content"].encode() == content


def test_a_log_whose_copy_did_not_land_is_stored_by_the_nodes_sweep(
    pg_dsn: str, tmp_path: Path
) -> None:
    port = free_port()
    settings = StudioSettings.from_env(
        {},
        db=pg_dsn,
        port=port,
        node_id="node-a",
        run_log_dir=tmp_path / "runs",
        tick_seconds=0.2,
        reaper_interval_seconds=0.5,
        command_allowlist=("sh",),
    )
    server = StudioServer(settings)
    server.start()
    try:
        body = {
            "action_kind": "command",
            "action_command": "sh",
            "action_command_args": ["-c", "echo kept"],
            "action_cwd": str(tmp_path),
        }
        answer = httpx.post(f"{server.base_url}/api/runs", json=body)
        assert answer.status_code == 202, answer.text
        run_id = str(answer.json()["run_id"])
        wait_for(lambda: _stored(pg_dsn, run_id))
        # As if the copy at the run's end had failed (the database unreachable a moment).
        with psycopg.connect(pg_dsn, autocommit=True) as db:
            db.execute("DELETE FROM run_logs WHERE run_id = %s", (run_id,))
        assert not _stored(pg_dsn, run_id)
        (row,) = wait_for(lambda: _stored(pg_dsn, run_id), timeout=30)
        assert bytes(row["content"]) == b"kept\n" and row["node_id"] == "node-a"
    finally:
        server.stop()
