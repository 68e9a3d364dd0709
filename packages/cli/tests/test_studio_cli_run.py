"""``studio run …``: ad-hoc runs queued on the database, executed by a real ``studio serve``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import STUDIO, Studio, free_port

from studio_launcher import is_same_process

BIN = str(Path(sys.executable).parent)

MARKER = """
import os, sys, time
with open(sys.argv[1], "a") as out:
    out.write(f"{os.getpid()}\\n")
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
"""


@pytest.fixture
def cli(studio: Studio) -> Studio:
    studio.env.update(
        LIONAGI_SCHEDULER_COMMAND_ALLOWLIST="python3",
        PATH=BIN + os.pathsep + studio.env.get("PATH", ""),
    )
    (studio.workdir / "marker.py").write_text(MARKER, encoding="utf-8")
    return studio


def row_of(cli: Studio, run_id: str) -> dict[str, Any]:
    """The run's row, read straight from the database (cheaper than a CLI process per poll)."""
    with sqlite3.connect(cli.db) as conn:
        conn.row_factory = sqlite3.Row
        found = conn.execute("SELECT * FROM schedule_runs WHERE id = ?", (run_id,)).fetchone()
    assert found is not None
    return dict(found)


def until(predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)


@contextmanager
def serving(cli: Studio) -> Iterator[subprocess.Popen[str]]:
    """A real ``studio serve`` (1 s tick) on the test database; SIGINT at the end."""
    port = free_port()
    proc = subprocess.Popen(
        [*STUDIO, "serve", "--host", "127.0.0.1", "--port", str(port), "--db", str(cli.db)],
        env={**cli.env, "LIONAGI_STUDIO_TICK_SECONDS": "1"},
        cwd=cli.workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"studio serve exited {proc.returncode}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        until(healthy)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_run_queues_lists_shows_and_cancels_on_the_database(cli: Studio) -> None:
    run = cli.ok_json("run", "command", "--concurrency-key", "k", "python3", "marker.py", "m")
    assert (run["status"], run["schedule_id"], run["concurrency_key"]) == ("queued", None, "k")
    assert run["action_args"]["action_command_args"] == ["marker.py", "m"]
    assert run["action_args"]["action_cwd"] == str(cli.workdir.resolve())
    human = cli.run("run", "agent", "--model", "m1", "say hi", "--cwd", str(cli.workdir))
    assert human.stdout.startswith("queued run ") and "(agent)" in human.stdout
    page = cli.ok_json("run", "list")
    assert page["total"] == 2 and page["runs"][1]["id"] == run["id"]
    table = cli.run("run", "list", "--status", "queued").stdout
    assert run["id"] in table and "command" in table
    cancelled = cli.run("run", "cancel", run["id"])
    assert cancelled.stdout.strip() == f"cancelled run {run['id']} (was queued)"
    shown = cli.ok_json("run", "show", run["id"])
    assert (shown["status"], shown["status_reason_code"]) == ("cancelled", "run.cancelled.operator")
    assert "already cancelled" in cli.fail("run", "cancel", run["id"]).error_line
    assert "run not found" in cli.fail("run", "show", "000000000000").error_line


def test_run_takes_the_runs_own_timeout_sec(cli: Studio) -> None:
    run = cli.ok_json("run", "command", "--timeout-sec", "120", "python3", "marker.py", "m")
    assert run["action_args"]["timeout_sec"] == 120
    line = cli.fail("run", "command", "--timeout-sec", "0", "python3", "marker.py").error_line
    assert "timeout_sec" in line
    assert cli.ok_json("run", "list")["total"] == 1


def test_run_refusals_are_one_line_and_write_nothing(cli: Studio) -> None:
    results = cli.run_many(
        [
            ["run", "command", "--", "rm", "-rf", "x"],
            ["run", "agent", "--model", "m"],
            ["run", "command", "--concurrency-key", " k", "python3", "x"],
        ],
        expect=1,
    )
    lines = [r.error_line for r in results]
    assert "action_command" in lines[0]
    assert "--prompt (action_prompt)" in lines[1]
    assert "--concurrency-key (concurrency_key)" in lines[2]
    usage = cli.run_many(
        [["run", "agent", "p", "--prompt", "q"], ["run", "command", "python3", "--timeout", "5s"]],
        expect=2,
    )
    assert all(r.stdout == "" for r in usage)
    assert cli.ok_json("run", "list")["total"] == 0


def test_run_wait_and_cancel_through_a_served_studio(cli: Studio) -> None:
    with serving(cli):
        done = cli.run("run", "command", "--wait", "python3", "marker.py", "ok.txt")
        assert " completed (run.completed.ok, exit 0" in done.stdout
        failed = cli.run(
            "run", "command", "--wait", "python3", "marker.py", "f.txt", "0", "3", expect=1
        )
        assert failed.stdout == ""
        last = failed.stderr.strip().splitlines()[-1]
        assert (
            last.startswith("error: ") and "ended failed (run.failed.exit_nonzero, exit 3" in last
        )
        slow = cli.ok_json("run", "command", "python3", "marker.py", "slow.txt", "60")

        def running() -> dict[str, Any] | None:
            row = row_of(cli, slow["id"])
            return row if row["status"] == "running" and row["child_pid"] else None

        row = until(running)
        cancelled = cli.run("run", "cancel", slow["id"])
        assert cancelled.stdout.strip() == f"cancelled run {slow['id']} (was running)"
        assert not is_same_process(row["child_pid"], row["child_started_at"])
        final = cli.ok_json("run", "show", slow["id"])
        assert (final["status"], final["status_reason_code"]) == (
            "cancelled",
            "run.cancelled.operator",
        )
    assert (cli.workdir / "ok.txt").read_text().count("\n") == 1


def test_kill_9_of_studio_serve_then_restart_recovers_without_running_twice(cli: Studio) -> None:
    run = cli.ok_json("run", "command", "python3", "marker.py", "orphan.txt", "120")
    marker = cli.workdir / "orphan.txt"
    with serving(cli) as first:

        def launched() -> dict[str, Any] | None:
            row = row_of(cli, run["id"])
            return row if row["child_pid"] and marker.exists() else None

        row = until(launched)
        first.send_signal(signal.SIGKILL)  # the server dies without any cleanup
        first.wait(timeout=10)
    pid, started = row["child_pid"], row["child_started_at"]
    assert is_same_process(pid, started), "the child must survive its server"
    assert row_of(cli, run["id"])["status"] == "running"
    with serving(cli):

        def recovered() -> dict[str, Any] | None:
            current = row_of(cli, run["id"])
            return current if current["status"] != "running" else None

        after = until(recovered)
        assert (after["status"], after["status_reason_code"]) == (
            "failed",
            "run.failed.daemon_restart",
        )
        assert not is_same_process(pid, started)
        time.sleep(2.5)  # two more ticks: nothing re-runs it
        assert cli.ok_json("run", "show", run["id"])["status"] == "failed"
        assert row_of(cli, run["id"])["lease_attempts"] == 1
    assert marker.read_text().splitlines() == [str(pid)]
