"""A run's log asked of a node that did not run it: fetched from the node that did.

Two real Studio apps (uvicorn on loopback, each with its engine) share one throwaway
PostgreSQL database; the first leads and runs the ad-hoc run, whose output is only in its own
run-log directory. The second node answers the log and its event stream by fetching them from
the first, and answers 409 naming the first once that node is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from studio_api import StudioSettings
from studio_api.testing import StudioServer
from studio_state.testing import db_rows, free_port, wait_for


def _node(pg_dsn: str, tmp_path: Path, name: str, *, with_url: bool = True) -> StudioServer:
    port = free_port()
    settings = StudioSettings.from_env(
        {},
        db=pg_dsn,
        port=port,
        node_id=name,
        node_url=f"http://127.0.0.1:{port}" if with_url else None,
        run_log_dir=tmp_path / name,
        tick_seconds=0.5,
        command_allowlist=("sh",),
    )
    server = StudioServer(settings)
    server.start()
    return server


@pytest.fixture
def nodes() -> Iterator[list[StudioServer]]:
    started: list[StudioServer] = []
    yield started
    for server in reversed(started):
        server.stop()


def _cli(dsn: str, logs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "studio_cli", *args, "--db", dsn],
        env={**os.environ, "LIONAGI_STUDIO_RUN_LOG_DIR": str(logs)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _ran(url: str, tmp_path: Path) -> str:
    body = {
        "action_kind": "command",
        "action_command": "sh",
        "action_command_args": ["-c", "echo first line; echo second line"],
        "action_cwd": str(tmp_path),
    }
    answer = httpx.post(f"{url}/api/runs", json=body)
    assert answer.status_code == 202, answer.text
    run_id = str(answer.json()["run_id"])
    wait_for(
        lambda: httpx.get(f"{url}/api/schedules/runs/{run_id}").json()["status"] == "completed"
    )
    return run_id


def test_a_node_serves_the_log_of_a_run_another_node_ran(
    pg_dsn: str, tmp_path: Path, nodes: list[StudioServer]
) -> None:
    leader = _node(pg_dsn, tmp_path, "node-a")
    nodes.append(leader)
    wait_for(lambda: httpx.get(f"{leader.base_url}/api/health").json()["leader"])
    # node-a runs it before node-b starts: a run queued on one node wakes every node
    # (LISTEN/NOTIFY), and any of them may claim it.
    run_id = _ran(leader.base_url, tmp_path)
    other = _node(pg_dsn, tmp_path, "node-b")
    nodes.append(other)
    assert httpx.get(f"{other.base_url}/api/health").json()["leader"] is False

    assert (tmp_path / "node-a" / f"{run_id}.log").is_file()
    assert not (tmp_path / "node-b" / f"{run_id}.log").exists()

    local = httpx.get(f"{leader.base_url}/api/schedules/runs/{run_id}/log")
    proxied = httpx.get(f"{other.base_url}/api/schedules/runs/{run_id}/log")
    assert proxied.status_code == 200, proxied.text
    assert proxied.text == local.text == "first line\nsecond line\n"
    tail = httpx.get(f"{other.base_url}/api/schedules/runs/{run_id}/log", params={"tail": 12})
    assert tail.text == "second line\n"
    bad = httpx.get(f"{other.base_url}/api/schedules/runs/{run_id}/log", params={"tail": -1})
    assert bad.status_code == 422  # refused by the asked node, nothing forwarded

    with httpx.stream("GET", f"{other.base_url}/api/schedules/runs/{run_id}/log/stream") as stream:
        assert stream.status_code == 200
        text = "".join(stream.iter_text())
    assert "data: first line" in text and "data: second line" in text
    assert "event: end" in text and '"completed"' in text

    # The CLI on another machine (its own run-log directory) asks the node that ran it.
    shown = _cli(pg_dsn, tmp_path / "elsewhere", "schedule", "logs", run_id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "first line\nsecond line\n"
    followed = _cli(pg_dsn, tmp_path / "elsewhere", "schedule", "logs", run_id, "--follow")
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == "first line\nsecond line\n" and "completed" in followed.stderr

    # node-a stored the finished run's log in the database when the run ended: once node-a
    # is gone, node-b and the CLI read it there (test_nodes_run_logs_stored.py has the rest:
    # a kill -9, a running run's 409, retention).
    wait_for(lambda: db_rows(pg_dsn, "SELECT 1 FROM run_logs WHERE run_id = ?", (run_id,)))
    leader.stop()
    nodes.remove(leader)
    stored = _cli(pg_dsn, tmp_path / "elsewhere", "schedule", "logs", run_id)
    assert stored.returncode == 0, stored.stderr
    assert stored.stdout == "first line\nsecond line\n"
    gone = httpx.get(f"{other.base_url}/api/schedules/runs/{run_id}/log")
    assert gone.status_code == 200 and gone.text == "first line\nsecond line\n"


def test_a_node_without_a_url_is_named_in_the_refusal(
    pg_dsn: str, tmp_path: Path, nodes: list[StudioServer]
) -> None:
    leader = _node(pg_dsn, tmp_path, "node-a", with_url=False)
    nodes.append(leader)
    wait_for(lambda: httpx.get(f"{leader.base_url}/api/health").json()["leader"])
    # A run still running: its live output is on node-a only (a finished run's log would be
    # read from the database).
    body = {
        "action_kind": "command",
        "action_command": "sh",
        "action_command_args": ["-c", "echo first line; exec sleep 600"],
        "action_cwd": str(tmp_path),
    }
    started = httpx.post(f"{leader.base_url}/api/runs", json=body)
    assert started.status_code == 202, started.text
    run_id = str(started.json()["run_id"])
    log_file = tmp_path / "node-a" / f"{run_id}.log"
    wait_for(lambda: log_file.is_file() and log_file.read_bytes() == b"first line\n")
    other = _node(pg_dsn, tmp_path, "node-b")  # after node-a claimed it (see above)
    nodes.append(other)
    answer = httpx.get(f"{other.base_url}/api/schedules/runs/{run_id}/log")
    assert answer.status_code == 409
    detail = answer.json()["detail"]
    assert "node-a" in detail and "LIONAGI_STUDIO_NODE_URL" in detail
    cli = _cli(pg_dsn, tmp_path / "elsewhere", "schedule", "logs", run_id)
    assert cli.returncode == 1 and "LIONAGI_STUDIO_NODE_URL" in cli.stderr
    row = httpx.get(f"{leader.base_url}/api/schedules/runs/{run_id}/log")
    assert row.status_code == 200 and row.text.startswith("first line")
