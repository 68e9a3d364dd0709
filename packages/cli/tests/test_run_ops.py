"""``studio schedule logs|cancel``, ``delete --force``, ``--timezone``/``--timeout`` and the
failure output of ``--wait``, against a real served Studio and real children."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Studio

from studio_api import StudioSettings
from studio_api.testing import serve_studio

BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("served-ops")
    db = root / "state.db"
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = BIN + os.pathsep + saved
    settings = StudioSettings.from_env(
        {}, db=db, port=0, tick_seconds=1, timezone="UTC", command_allowlist="python3"
    )
    try:
        with serve_studio(settings) as url:
            yield url, db
    finally:
        os.environ["PATH"] = saved


@pytest.fixture
def cli(studio: Studio, served: tuple[str, Path]) -> Studio:
    url, db = served
    studio.db = db
    studio.env.update(
        LIONAGI_STUDIO_DB=str(db),
        LIONAGI_STUDIO_URL=url,
        LIONAGI_SCHEDULER_COMMAND_ALLOWLIST="python3",
        LIONAGI_SCHEDULER_TZ="UTC",
    )
    return studio


def _python(cli: Studio, name: str, code: str, **fields: Any) -> dict[str, Any]:
    return cli.seed(name, interval_sec=86400, action_command_args=["-c", code], **fields)


def _trigger(cli: Studio, name: str) -> str:
    return str(cli.ok_json("schedule", "trigger", name)["run_id"])


def _wait_status(cli: Studio, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        run: dict[str, Any] = cli.ok_json("schedule", "run", run_id)
        if run["status"] in statuses and (run["status"] != "running" or run["child_pid"]):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


def test_trigger_wait_prints_the_reason_and_the_log_tail_of_a_failed_run(cli: Studio) -> None:
    _python(cli, "noisy", "import sys; print('partial-output'); sys.exit('boom-at-the-end')")
    result = cli.run("schedule", "trigger", "noisy", "--wait", expect=1)
    assert "reason: the child exited with code 1" in result.stderr
    assert "partial-output" in result.stderr and "boom-at-the-end" in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "[run.failed.exit_nonzero]" in errors[0]


def test_logs_prints_and_follows_a_running_child(cli: Studio) -> None:
    _python(cli, "talker", "import time; print('one', flush=True); time.sleep(1.5); print('two')")
    run_id = _trigger(cli, "talker")
    _wait_status(cli, run_id, "running", "completed")
    followed = cli.run("schedule", "logs", run_id, "--follow")
    assert followed.stdout == "one\ntwo\n"
    assert f"run {run_id} completed" in followed.stderr
    assert cli.run("schedule", "logs", run_id).stdout == "one\ntwo\n"
    assert cli.run("schedule", "logs", run_id, "--tail", "4").stdout == "two\n"
    missing = cli.fail("schedule", "logs", "nosuchrun1")
    assert missing.error_line == "error: run not found: nosuchrun1"
    cli.fail("schedule", "logs", run_id, "--tail", "-1", code=2)


def test_cancel_stops_a_scheduled_run_and_refuses_a_finished_one(cli: Studio) -> None:
    _python(cli, "sleeper", "import time; time.sleep(120)")
    run_id = _trigger(cli, "sleeper")
    pid = int(_wait_status(cli, run_id, "running")["child_pid"])
    result = cli.run("schedule", "cancel", run_id)
    assert result.stdout.strip() == f"cancelled run {run_id} (was running)"
    run = cli.ok_json("schedule", "run", run_id)
    assert (run["status"], run["status_reason_code"]) == ("cancelled", "run.cancelled.operator")
    deadline = time.monotonic() + 15
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    again = cli.fail("schedule", "cancel", run_id)
    assert "already cancelled" in again.error_line
    # `studio run cancel` finds scheduled runs too
    other = _trigger(cli, "sleeper")
    _wait_status(cli, other, "running")
    assert "cancelled run" in cli.run("run", "cancel", other).stdout


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_delete_with_a_running_run_needs_force(cli: Studio) -> None:
    _python(cli, "busy", "import time; time.sleep(120)")
    run_id = _trigger(cli, "busy")
    _wait_status(cli, run_id, "running")
    refused = cli.fail("schedule", "delete", "busy", "--yes")
    assert "running run" in refused.error_line and run_id in refused.error_line
    assert "busy" in cli.schedule_names()
    cli.run("schedule", "delete", "busy", "--yes", "--force")
    assert "busy" not in cli.schedule_names()


def test_timezone_and_timeout_flags_and_the_preview_agrees_with_the_server(
    cli: Studio, served: tuple[str, Path]
) -> None:
    bad = cli.fail(
        "schedule", "create", "tzbad", "--cron", "0 9 * * *", "--timezone", "Mars/Base",
        "--command", "python3", "--command-arg", "-c", "--command-arg", "pass",
    )  # fmt: skip
    assert "timezone" in bad.error_line
    zero = cli.fail(
        "schedule", "create", "tzero", "--cron", "0 9 * * *", "--timeout", "0",
        "--command", "python3", "--command-arg", "-c", "--command-arg", "pass",
    )  # fmt: skip
    assert "timeout_sec" in zero.error_line
    created = cli.create(
        "tokyo", "--cron", "0 9 * * *", "--timezone", "Asia/Tokyo", "--timeout", "15m",
        "--command", "python3", "--command-arg", "-c", "--command-arg", "pass",
    )  # fmt: skip
    assert (created["timezone"], created["timeout_sec"]) == ("Asia/Tokyo", 900)
    url, _db = served
    api = httpx.get(f"{url}/api/schedules/{created['id']}/preview", params={"n": 3}).json()
    assert api["timezone"] == "Asia/Tokyo"
    assert api["fire_times"][0]["local"].endswith("09:00:00+09:00")
    # asking the server, and without it (the stored zone, read through the server's settings)
    for env in ({}, {"LIONAGI_STUDIO_URL": "http://127.0.0.1:9"}):
        local = json.loads(
            cli.run("schedule", "preview", "tokyo", "-n", "3", "--json", env=env).stdout
        )
        assert local["timezone"] == "Asia/Tokyo"
        assert [t["at"] for t in local["fire_times"]] == [t["at"] for t in api["fire_times"]]
        assert [t["local"] for t in local["fire_times"]] == [t["local"] for t in api["fire_times"]]
    cleared = cli.ok_json("schedule", "update", "tokyo", "--clear", "timezone")
    assert cleared["timezone"] is None
