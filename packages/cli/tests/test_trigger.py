"""``studio schedule trigger`` through a real served Studio (uvicorn + engine, 1 s tick).

The server is studio-api's own test helper (``studio_api.testing.serve_studio``) over a temp
database; the CLI creates schedules on that database directly while the server runs, then
fires them through HTTP, as an operator would.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import Studio

from studio_api import StudioSettings
from studio_api.testing import serve_studio
from studio_state.testing import free_port, wait_for

if TYPE_CHECKING:
    from studio_scheduler_core import Schedule

BIN = str(Path(sys.executable).parent)


def _settings(db: Path, **extra: object) -> StudioSettings:
    return StudioSettings.from_env(
        {},
        db=db,
        port=0,
        tick_seconds=1,
        timezone="UTC",
        command_allowlist="python3,studio",
        **extra,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One server for the module (its children find this env's python3 and studio first)."""
    root = tmp_path_factory.mktemp("served")
    db = root / "state.db"
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = BIN + os.pathsep + saved
    try:
        with serve_studio(_settings(db)) as url:
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
        LIONAGI_SCHEDULER_COMMAND_ALLOWLIST="python3,studio",
    )
    return studio


def python_schedule(cli: Studio, name: str, code: str, **fields: object) -> Schedule:
    """A daily ``python3 -c CODE`` schedule, seeded with the real service."""
    return cli.seed(name, interval_sec=86400, action_command_args=["-c", code], **fields)


def test_trigger_without_wait_prints_the_run(cli: Studio) -> None:
    # created through the CLI, on the database the running server uses
    created = cli.create(
        "nowait", "--interval", "1d", "--command", "python3", "--command-arg", "-c",
        "--command-arg", "pass",
    )  # fmt: skip
    result = cli.run("schedule", "trigger", "nowait")
    prefix = f"Triggered schedule {created['id']} (nowait): run "
    assert result.stdout.startswith(prefix)
    run_id = result.stdout.strip()[len(prefix) :]
    assert len(run_id) == 12
    document = cli.ok_json("schedule", "trigger", str(created["id"]))
    assert document["schedule_id"] == created["id"] and len(document["run_id"]) == 12
    assert document["run_id"] != run_id


def test_trigger_wait_on_a_completing_run_exits_0(cli: Studio) -> None:
    created = python_schedule(cli, "good", "import time; time.sleep(0.3)")
    result = cli.run("schedule", "trigger", "good", "--wait")
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"Triggered schedule {created.id} (good): run ")
    run_id = lines[0].rsplit(" ", 1)[1]
    assert lines[1].startswith(f"Run {run_id} completed (exit 0) in ")
    assert f"run {run_id}:" in result.stderr  # the status line, on stderr (not a terminal)
    # the run is now visible to the direct-database read commands, as a table and as JSON
    runs = cli.run("schedule", "runs", "good").stdout
    assert run_id in runs and "completed" in runs
    listed = cli.ok_json("schedule", "runs", "good", "--status", "completed")
    assert [r["id"] for r in listed["runs"]] == [run_id] and listed["total"] == 1
    shown = cli.ok_json("schedule", "run", run_id)
    assert shown["status"] == "completed" and shown["exit_code"] == 0
    assert shown["chain_children"] == []
    table = cli.run("schedule", "run", run_id).stdout
    assert "status" in table and "completed" in table and "exit_code" in table


def test_trigger_wait_on_a_failing_run_exits_1(cli: Studio) -> None:
    python_schedule(cli, "bad", "import sys; sys.exit(3)")
    result = cli.run("schedule", "trigger", "bad", "--wait", expect=1)
    run_id = result.stdout.splitlines()[0].rsplit(" ", 1)[1]
    assert result.stdout.splitlines()[1].startswith(f"Run {run_id} failed (exit 3) in ")
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error == [f"error: run {run_id} ended failed [run.failed.exit_nonzero]"]
    document = cli.run("schedule", "trigger", "bad", "--wait", "--json", expect=1)
    run = document.json()
    assert run["status"] == "failed" and run["exit_code"] == 3


def test_trigger_wait_follows_an_on_fail_chain_parent(cli: Studio) -> None:
    python_schedule(
        cli,
        "chained",
        "import sys; sys.exit(1)",
        on_fail={"command": "python3", "command_args": ["-c", "pass"]},
    )
    result = cli.run("schedule", "trigger", "chained", "--wait", expect=1)
    run_id = result.stdout.splitlines()[0].rsplit(" ", 1)[1]
    shown = cli.ok_json("schedule", "run", run_id)
    assert [child["status"] for child in shown["chain_children"]] == ["completed"]
    assert "follow-up runs" in cli.run("schedule", "run", run_id).stdout


def test_usage_report_from_inside_a_scheduled_child(cli: Studio) -> None:
    report = ["usage", "report", "--input-tokens", "120", "--output-tokens", "30"]
    created = cli.seed(
        "reporter", action_command="studio", action_command_args=[*report, "--cost-usd", "0.25"]
    )
    result = cli.run("schedule", "trigger", "reporter", "--wait", "--json")
    run = result.json()
    assert run["status"] == "completed", run
    with sqlite3.connect(cli.db) as conn:
        rows = conn.execute(
            "SELECT s.input_tokens, s.output_tokens, s.total_cost_usd, s.status FROM sessions s "
            "JOIN schedule_runs r ON r.invocation_id = s.invocation_id WHERE r.schedule_id = ?",
            (created.id,),
        ).fetchall()
    assert rows == [(120, 30, 0.25, "completed")]


def test_trigger_unknown_schedule_and_refusal(cli: Studio) -> None:
    missing = cli.fail("schedule", "trigger", "no-such-schedule")
    assert missing.error_line.startswith("error: schedule not found: no-such-schedule")
    python_schedule(cli, "single", "pass", max_runs=1)
    cli.run("schedule", "trigger", "single", "--wait")
    refused = cli.fail("schedule", "trigger", "single")
    assert refused.error_line.startswith("error: trigger refused")


def test_trigger_with_no_server_says_where_it_looked(studio: Studio) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = studio.fail("schedule", "trigger", "x", env={"LIONAGI_STUDIO_URL": url})
    line = result.error_line
    assert f"cannot reach Studio at {url}" in line
    assert "LIONAGI_STUDIO_URL" in line and "studio serve" in line
    flagged = studio.fail("schedule", "trigger", "x", "--url", url + "/api/")
    assert f"at {url} (from --url)" in flagged.error_line
    bad = studio.fail("schedule", "trigger", "x", "--url", "localhost")
    assert "is not a URL" in bad.error_line
    assert (
        "--timeout applies only"
        in studio.run("schedule", "trigger", "x", "--timeout", "5", expect=2).error_line
    )


def test_trigger_against_a_server_with_a_token(studio: Studio, tmp_path: Path) -> None:
    db = tmp_path / "secured.db"
    with serve_studio(_settings(db, auth_token="s3cret-token")) as url:
        studio.db = db
        studio.env.update(LIONAGI_STUDIO_URL=url, LIONAGI_STUDIO_DB=str(db))
        python_schedule(studio, "guarded", "pass")
        refused = studio.fail("schedule", "trigger", "guarded")
        assert "refused the request (401" in refused.error_line
        assert "LIONAGI_STUDIO_AUTH_TOKEN" in refused.error_line
        studio.env["LIONAGI_STUDIO_AUTH_TOKEN"] = "s3cret-token"
        assert studio.run("schedule", "trigger", "guarded", "--wait").code == 0


def test_schedule_runs_shows_a_retrys_attempt(cli: Studio, served: tuple[str, Path]) -> None:
    # fails every time: the first attempt, then its one retry (attempt 2) a second later
    created = python_schedule(
        cli, "retried", "import sys; sys.exit(4)", retry={"max_attempts": 2, "backoff_sec": 1}
    )
    cli.run("schedule", "trigger", "retried")

    def both_failed() -> list[dict[str, Any]] | None:
        runs: list[dict[str, Any]] = cli.ok_json("schedule", "runs", "retried")["runs"]
        return runs if [r["status"] for r in runs] == ["failed", "failed"] else None

    retry, first = wait_for(both_failed, timeout=30, what="the run and its retry failed")
    assert (retry["retry_of"], retry["attempt"]) == (first["id"], 2)
    assert first["attempt"] is None
    # the JSON field is the API's own: GET /api/schedules/{id}/runs says the same
    with urllib.request.urlopen(f"{served[0]}/api/schedules/{created.id}/runs") as answer:
        api_runs = json.load(answer)["runs"]
    assert [(r["id"], r["attempt"]) for r in api_runs] == [(retry["id"], 2), (first["id"], None)]
    # the table: an ATTEMPT column, 2 on the retry's row, "-" on the first attempt's
    lines = cli.run("schedule", "runs", "retried").stdout.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("RUN "))
    at = header.index("ATTEMPT")

    def attempt_cell(run_id: str) -> str:
        row = next(line for line in lines if line.lstrip().startswith(run_id))
        return row[at : at + len("ATTEMPT")].strip()

    assert (attempt_cell(retry["id"]), attempt_cell(first["id"])) == ("2", "-")
