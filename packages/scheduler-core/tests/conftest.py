"""Shared fixtures: real SQLite files in tmp_path, a manual clock, engines that clean up."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from studio_launcher.testing import write_fake_li
from studio_scheduler_core import (
    SchedulerEngine,
    SchedulerSettings,
    ScheduleService,
    ensure_schema,
)
from studio_state import ManualClock, connect, fetch_all, fetch_one

GITHUB_SERVER_MODULE = "studio_scheduler_core_test_github_server"


def _load_github_server() -> Any:
    # tests/ is not a package (importlib import mode), so the fake GitHub module is loaded by
    # path once here; test modules take it from sys.modules.
    if GITHUB_SERVER_MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            GITHUB_SERVER_MODULE, Path(__file__).with_name("github_server.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[GITHUB_SERVER_MODULE] = module
        spec.loader.exec_module(module)
    return sys.modules[GITHUB_SERVER_MODULE]


github = _load_github_server().github  # the loopback fake GitHub fixture, for every test

PY = Path(sys.executable).name
"""The bare name of this interpreter (python3…), allow-listed for command actions."""

T0 = 1_700_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def fake_li(tmp_path: Path) -> Path:
    return write_fake_li(tmp_path / "bin")


@pytest.fixture
def child_env(tmp_path: Path) -> dict[str, str]:
    import os

    return {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


@pytest.fixture
def settings(fake_li: Path, child_env: dict[str, str]) -> SchedulerSettings:
    return SchedulerSettings(
        tick_seconds=30.0,
        command_allowlist=(PY, "sh", "true"),
        li_executable=str(fake_li),
        child_env=child_env,
        invocation_deadline_seconds=60.0,
    )


@pytest.fixture
async def conn(db_path: Path) -> AsyncIterator[Any]:
    async with connect(db_path) as c:
        await ensure_schema(c)
        yield c


@pytest.fixture
def service(conn: Any, settings: SchedulerSettings, clock: ManualClock) -> ScheduleService:
    return ScheduleService(conn, settings=settings, clock=clock)


EngineFactory = Callable[..., Awaitable[SchedulerEngine]]


@pytest.fixture
async def make_engine(db_path: Path, settings: SchedulerSettings) -> AsyncIterator[EngineFactory]:
    engines: list[SchedulerEngine] = []

    async def factory(
        *, clock: Any = None, loop: bool = False, start: bool = True, **overrides: Any
    ) -> SchedulerEngine:
        values = {**settings.__dict__, **overrides}
        engine = SchedulerEngine(
            db_path,
            settings=SchedulerSettings(**values),
            **({"clock": clock} if clock is not None else {}),
        )
        engines.append(engine)
        if start:
            await engine.start(loop=loop)
        return engine

    yield factory
    for engine in engines:
        await engine.stop()


def script(tmp_path: Path, name: str, body: str) -> str:
    """Write a small Python script for a command action; return its absolute path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return str(path)


def command_schedule(path: str, *args: str, **fields: Any) -> dict[str, Any]:
    """Create data for an interval schedule running ``python3 path args…``."""
    data: dict[str, Any] = {
        "name": fields.pop("name", f"cmd-{Path(path).stem}"),
        "trigger_type": "interval",
        "interval_sec": 60,
        "action_kind": "command",
        "action_command": PY,
        "action_command_args": [path, *args],
    }
    data.update(fields)
    return data


async def runs_of(conn: Any, schedule_id: str) -> list[dict[str, Any]]:
    return await fetch_all(
        conn,
        "SELECT * FROM schedule_runs WHERE schedule_id = ? ORDER BY created_at, rowid",
        (schedule_id,),
    )


async def transitions_of(conn: Any, entity_id: str) -> list[dict[str, Any]]:
    return await fetch_all(
        conn,
        "SELECT * FROM status_transitions WHERE entity_id = ? ORDER BY created_at, rowid",
        (entity_id,),
    )


async def schedule_row(conn: Any, schedule_id: str) -> dict[str, Any]:
    row = await fetch_one(conn, "SELECT * FROM schedules WHERE id = ?", (schedule_id,))
    assert row is not None
    return row


BLOCKER = """
import os, sys, time
flag = sys.argv[1]
code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
until = time.time() + 60
while not os.path.exists(flag) and time.time() < until:
    time.sleep(0.01)
sys.exit(code)
"""

ENV_DUMP = """
import json, os, sys
keys = ("LIONAGI_INVOCATION_ID", "LIONAGI_STUDIO_DB")
with open(sys.argv[1], "a") as out:
    out.write(json.dumps({k: os.environ.get(k) for k in keys} | {"cwd": os.getcwd()}) + "\\n")
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""


async def eventually(predicate: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Poll an async predicate until it holds (a generous liveness bound, not a timing)."""
    import asyncio
    import time

    until = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > until:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def group_has_live_member(pgid: int) -> bool:
    """Whether any non-zombie process is in process group ``pgid`` (reads /proc)."""
    import os

    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


@pytest.fixture
def h(tmp_path: Path) -> Any:
    """Helpers for tests (pytest's importlib mode cannot import conftest as a module)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        PY=PY,
        T0=T0,
        blocker=script(tmp_path, "blocker.py", BLOCKER),
        env_dump=script(tmp_path, "env_dump.py", ENV_DUMP),
        eventually=eventually,
        group_has_live_member=group_has_live_member,
        script=lambda name, body: script(tmp_path, name, body),
        command_schedule=command_schedule,
        runs_of=runs_of,
        transitions_of=transitions_of,
        schedule_row=schedule_row,
    )
