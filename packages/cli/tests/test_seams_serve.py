"""Issue 32's seams between ``studio serve`` and the other commands, through real processes.

One real ``studio serve`` (a subprocess on a free loopback port, its own SQLite database)
runs the children; every other command is the real ``studio`` console script too. Covered:
the logs of a run that has printed nothing (a quiet child, ``false``) are empty, not "another
node keeps them"; ``--follow`` waits for a quiet child's output and its end; the server says
where the dashboard, the API docs and the metrics are; a second server on the same database is
refused with one line.
"""

from __future__ import annotations

import os
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
ALLOWLIST = "false,python3,sleep"


class Served:
    """A real ``studio serve`` subprocess and everything it printed so far."""

    def __init__(self, root: Path) -> None:
        self.db = root / "state.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = base_env(root)
        self.env.update(
            PATH=BIN + os.pathsep + self.env.get("PATH", ""),
            LIONAGI_STUDIO_DB=str(self.db),
            LIONAGI_STUDIO_TICK_SECONDS="1",
            LIONAGI_SCHEDULER_COMMAND_ALLOWLIST=ALLOWLIST,
        )
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [*STUDIO, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env,
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

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


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = Served(tmp_path_factory.mktemp("seams-serve"))
    try:
        wait_for(server.up, timeout=60, what="studio serve answering /api/health")
        yield server
    finally:
        server.stop()
    assert not any("Traceback" in line for line in server.lines), server.lines


@pytest.fixture
def cli(studio: Studio, served: Served) -> Studio:
    studio.db = served.db
    studio.env.update(
        PATH=served.env["PATH"],
        LIONAGI_STUDIO_DB=str(served.db),
        LIONAGI_STUDIO_URL=served.url,
        LIONAGI_SCHEDULER_COMMAND_ALLOWLIST=ALLOWLIST,
    )
    return studio


def _queue(cli: Studio, *argv: str) -> str:
    queued = cli.run("run", "command", "--json", "--", *argv).json()
    return str(queued["id"])


def _running(cli: Studio, run_id: str) -> dict[str, Any]:
    def started() -> dict[str, Any] | None:
        run: dict[str, Any] = cli.ok_json("schedule", "run", run_id)
        return run if run["status"] == "running" and run.get("child_pid") else None

    return wait_for(started, timeout=30, interval=0.1, what=f"run {run_id} running")


def test_serve_says_where_the_dashboard_the_api_docs_and_the_metrics_are(served: Served) -> None:
    def banner() -> list[str]:
        return [line for line in served.lines if "dashboard" in line]

    lines = wait_for(banner, timeout=30, what="the startup banner")
    assert len(lines) == 1, served.lines
    for path in ("/", "/docs", "/metrics"):
        url = served.url + path
        assert url in lines[0].split(), lines[0]
        assert httpx.get(url, timeout=10).status_code == 200, url  # every URL it names answers


def test_logs_of_a_quiet_running_child_are_empty(cli: Studio, served: Served) -> None:
    run_id = _queue(cli, "sleep", "30")
    _running(cli, run_id)
    shown = cli.run("schedule", "logs", run_id)
    assert (shown.stdout, shown.stderr) == ("", "")
    api = httpx.get(f"{served.url}/api/schedules/runs/{run_id}/log", timeout=10)
    assert (api.status_code, api.text) == (200, "")  # what the CLI says agrees with the API
    cli.run("schedule", "cancel", run_id)


def test_logs_of_false_are_empty_and_follow_ends_with_the_run(cli: Studio) -> None:
    waited = cli.run("run", "command", "--wait", "--", "false", expect=1)
    run_id = waited.stderr.split("queued run ", 1)[1].split(";", 1)[0]
    shown = cli.run("schedule", "logs", run_id)
    assert (shown.stdout, shown.stderr) == ("", "")
    followed = cli.run("schedule", "logs", run_id, "--follow")
    assert followed.stdout == ""
    assert followed.stderr.strip() == f"run {run_id} failed (run.failed.exit_nonzero)"


def test_follow_waits_for_a_quiet_childs_output_and_its_end(cli: Studio) -> None:
    code = "import time; time.sleep(2); print('late line', flush=True); time.sleep(1)"
    run_id = _queue(cli, "python3", "-c", code)
    _running(cli, run_id)
    started = time.monotonic()
    followed = cli.run("schedule", "logs", run_id, "--follow")
    assert followed.stdout == "late line\n"
    assert followed.stderr.strip() == f"run {run_id} completed (run.completed.ok)"
    assert time.monotonic() - started > 0.5  # it waited for the output instead of giving up


def test_a_second_server_on_the_database_is_refused_with_one_line(
    cli: Studio, served: Served
) -> None:
    refused = cli.run("serve", "--host", "127.0.0.1", "--port", str(free_port()), expect=1)
    assert refused.stdout == ""
    line = refused.error_line  # exactly one stderr line: no uvicorn "ERROR:" beside it
    assert "another scheduler engine" in line and str(served.db) in line
