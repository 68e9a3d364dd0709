"""Shared fixtures: real SQLite files in tmp_path, a manual clock, engines that clean up."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from studio_launcher.testing import fake_li  # noqa: F401  (fixture)
from studio_scheduler_core import (
    SchedulerEngine,
    SchedulerSettings,
    ScheduleService,
    ensure_schema,
)
from studio_scheduler_core.testing import PY, T0, SchedulerTestKit
from studio_state import ManualClock, connect, is_postgres
from studio_state.testing import clean_environment, load_beside  # noqa: F401  (autouse fixture)

GITHUB_SERVER_MODULE = "studio_scheduler_core_test_github_server"


# tests/ is not a package (importlib import mode): the fake GitHub module is loaded by path once
# here, its `github` fixture (a loopback fake GitHub) serves every test, and test modules take
# the module from sys.modules.
github = load_beside(__file__, "github_server.py", GITHUB_SERVER_MODULE).github


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def db_target(db_path: Path) -> str:
    """The database ``conn`` and ``make_engine`` open: the SQLite file here; the PostgreSQL
    suite (tests/postgres/test_core_pg_*.py) runs these tests on a fresh database's URL."""
    return str(db_path)


@pytest.fixture
def studio_db(db_target: str) -> str:
    """What an engine on ``db_target`` gives its children as ``LIONAGI_STUDIO_DB``."""
    return db_target if is_postgres(db_target) else str(Path(db_target).resolve())


@pytest.fixture
def child_env(tmp_path: Path) -> dict[str, str]:
    import os

    return {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


@pytest.fixture
def settings(
    fake_li: Path, child_env: dict[str, str], db_target: str, tmp_path: Path
) -> SchedulerSettings:
    # Run logs live beside a SQLite file by default; a PostgreSQL database has no file.
    logs = {"run_log_dir": str(tmp_path / "runs")} if is_postgres(db_target) else {}
    return SchedulerSettings(
        **logs,
        tick_seconds=30.0,
        command_allowlist=(PY, "sh", "true"),
        li_executable=str(fake_li),
        child_env=child_env,
        invocation_deadline_seconds=60.0,
        # The leader runs its fires in these tests on both backends (test_any_node.py: the
        # workers of any node do).
        scheduled_on_any_node=False,
    )


@pytest.fixture
async def conn(db_target: str) -> AsyncIterator[Any]:
    async with connect(db_target) as c:
        await ensure_schema(c)
        yield c


@pytest.fixture
def service(conn: Any, settings: SchedulerSettings, clock: ManualClock) -> ScheduleService:
    return ScheduleService(conn, settings=settings, clock=clock)


EngineFactory = Callable[..., Awaitable[SchedulerEngine]]


@pytest.fixture
async def make_engine(db_target: str, settings: SchedulerSettings) -> AsyncIterator[EngineFactory]:
    engines: list[SchedulerEngine] = []

    async def factory(
        *, clock: Any = None, loop: bool = False, start: bool = True, **overrides: Any
    ) -> SchedulerEngine:
        values = {**settings.__dict__, **overrides}
        engine = SchedulerEngine(
            db_target,
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


@pytest.fixture
def h(tmp_path: Path) -> SchedulerTestKit:
    """The scheduler's test helpers, with their scripts written into ``tmp_path``."""
    return SchedulerTestKit(tmp_path)
