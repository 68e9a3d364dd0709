"""``studio schedule status`` through the real console script: every exit code, on a
database whose runs a real engine fired (real children)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from conftest import Studio

from studio_scheduler_core import SchedulerEngine, SchedulerSettings
from studio_state import ManualClock, fetch_value


@pytest.fixture
def cli(studio: Studio) -> Studio:
    studio.env["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"] = "sh"
    return studio


def _create(cli: Studio, name: str, script: Path) -> str:
    created = cli.ok_json(
        "schedule",
        "create",
        name,
        "--interval",
        "60",
        "--command",
        "sh",
        "--command-arg",
        str(script),
    )
    return str(created["id"])


def _settings() -> SchedulerSettings:
    return SchedulerSettings(command_allowlist=("sh",), scheduled_on_any_node=False)


def _fire(cli: Studio, *schedule_ids: str, clock: ManualClock | None = None) -> None:
    async def go() -> None:
        engine = SchedulerEngine(
            str(cli.db), settings=_settings(), **({"clock": clock} if clock else {})
        )
        await engine.start(loop=False)
        try:
            for schedule_id in schedule_ids:
                await engine.fire_now(schedule_id)
            await engine.tick_once()
            await engine.wait_idle()
        finally:
            await engine.stop()

    asyncio.run(go())


def _script(cli: Studio, name: str, body: str) -> Path:
    path = cli.workdir / name
    path.write_text(body, encoding="utf-8")
    return path


def test_exit_codes_healthy_failing_never_fired_and_unknown(cli: Studio) -> None:
    ok = _create(cli, "ok", _script(cli, "ok.sh", "exit 0\n"))
    bad = _create(cli, "bad", _script(cli, "bad.sh", "echo it broke >&2\nexit 3\n"))
    _create(cli, "fresh", _script(cli, "fresh.sh", "exit 0\n"))
    _fire(cli, ok, bad)
    healthy = cli.run("schedule", "status", "ok", expect=0)
    assert "health     healthy" in healthy.stdout
    failing = cli.run("schedule", "status", bad, expect=1)
    assert "failing" in failing.stdout and "nonzero_exit" in failing.stdout
    assert "it broke" in failing.stdout
    as_json = cli.run("schedule", "status", "bad", "--json", expect=1).json()
    assert as_json["health"] == "failing" and as_json["last_run"]["exit_code"] == 3
    assert as_json["last_run"]["error_class"] == "nonzero_exit"
    cli.run("schedule", "status", "fresh", expect=2)
    unknown = cli.run("schedule", "status", "nope", expect=4)
    assert unknown.stdout == "" and len(unknown.stderr.strip().splitlines()) == 1
    assert "nope" in unknown.stderr
    listed = cli.run("schedule", "list").stdout
    assert "HEALTH" in listed and "LAST" in listed
    assert "failing" in listed and "never_fired" in listed
    rows = cli.ok_json("schedule", "list")["schedules"]
    assert {r["name"]: r["health"] for r in rows} == {
        "ok": "healthy",
        "bad": "failing",
        "fresh": "never_fired",
    }


def test_overdue_by_the_clock_exits_2(cli: Studio) -> None:
    quiet = _create(cli, "quiet", _script(cli, "q.sh", "exit 0\n"))
    # fired by an engine whose clock stands an hour back: no fire for 3600 s > 360 s
    _fire(cli, quiet, clock=ManualClock(time.time() - 3600))
    overdue = cli.run("schedule", "status", "quiet", expect=2)
    assert "health     overdue" in overdue.stdout


def test_running_exits_3_and_wait_exits_by_the_result(cli: Studio) -> None:
    gate = cli.workdir / "gate"
    slow = _create(
        cli,
        "slow",
        _script(cli, "slow.sh", f"while [ ! -e {gate} ]; do sleep 0.05; done\nexit 5\n"),
    )
    started = threading.Event()
    failure: list[BaseException] = []

    def serve() -> None:
        async def go() -> None:
            engine = SchedulerEngine(str(cli.db), settings=_settings())
            await engine.start(loop=False)
            try:
                await engine.fire_now(slow)
                await engine.tick_once()
                started.set()
                await engine.wait_idle()
            finally:
                await engine.stop()

        try:
            asyncio.run(go())
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)
            started.set()

    worker = threading.Thread(target=serve)
    worker.start()
    try:
        assert started.wait(30)
        deadline = time.monotonic() + 30

        async def running() -> int:
            from studio_state import connect

            async with connect(str(cli.db)) as conn:
                return int(
                    await fetch_value(
                        conn, "SELECT count(*) FROM schedule_runs WHERE status = 'running'"
                    )
                )

        while asyncio.run(running()) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        cli.run("schedule", "status", "slow", expect=3)
        threading.Timer(1.0, gate.touch).start()
        waited = cli.run("schedule", "status", "slow", "--wait", expect=1)
        assert "failing" in waited.stdout
    finally:
        gate.touch()
        worker.join(60)
    assert not failure, failure
