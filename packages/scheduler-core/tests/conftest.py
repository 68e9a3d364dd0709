"""Shared fixtures: real databases, a manual clock, engines that clean up.

Every test that opens the database (through ``db_target``, or ``conn``, ``service``,
``settings``, ``make_engine`` built on it) runs once per backend: ``test_x[sqlite]`` on a SQLite
file in ``tmp_path``, ``test_x[postgresql]`` on a fresh database of the session's throwaway
PostgreSQL cluster. ``--db-target`` (default: ``$STUDIO_TEST_DB_TARGET``, else ``sqlite``) picks
which of the two a run selects; the others are deselected, never skipped. hatch.toml's
``scheduler-core`` entry runs the ``sqlite`` params, its ``postgres`` entry the ``postgresql``
ones. ``@pytest.mark.sqlite_only("why")`` keeps a test on SQLite alone (it reads SQLite's query
plan, its file, ...): it gets no ``postgresql`` param.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
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
pg_databases = load_beside(__file__, "pg_databases.py", "studio_scheduler_core_test_pg_databases")

DB_TARGETS = ("sqlite", "postgresql")
HERE = Path(__file__).resolve().parent
SQLITE_ONLY = "sqlite_only(reason): runs on SQLite alone, for the reason given (required)"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db-target",
        choices=DB_TARGETS,
        default=os.environ.get("STUDIO_TEST_DB_TARGET") or "sqlite",
        help="the backend scheduler-core's database tests run on (default: "
        "$STUDIO_TEST_DB_TARGET, else sqlite); the other backend's params are deselected",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Also registered in this package's pyproject.toml; registered here too for runs whose
    # configuration file is the workspace's (the `postgres` entry runs tests of two folders).
    config.addinivalue_line("markers", SQLITE_ONLY)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db_target" not in metafunc.fixturenames:
        return
    targets = list(DB_TARGETS)
    marker = metafunc.definition.get_closest_marker("sqlite_only")
    if marker is not None:
        reason = marker.kwargs.get("reason", marker.args[0] if marker.args else "")
        if not (isinstance(reason, str) and reason.strip()):
            pytest.fail(f"{metafunc.definition.nodeid}: sqlite_only needs a reason", pytrace=False)
        targets = ["sqlite"]
    metafunc.parametrize("db_target", targets, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect this folder's tests of the backend not chosen by ``--db-target``; tests that
    open no database run with the ``sqlite`` selection only (they would repeat themselves)."""
    chosen = config.getoption("db_target")
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        if not item.path.is_relative_to(HERE):
            keep.append(item)
            continue
        callspec = getattr(item, "callspec", None)
        target = callspec.params.get("db_target", "sqlite") if callspec else "sqlite"
        (keep if target == chosen else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def db_target(request: pytest.FixtureRequest, db_path: Path) -> Iterator[str]:
    """The database ``conn`` and ``make_engine`` open: the SQLite file ``db_path`` for the
    ``sqlite`` param, a fresh database's URL of the session's cluster for ``postgresql``."""
    if request.param == "sqlite":
        yield str(db_path)
        return
    with pg_databases.fresh_database(pg_databases.cluster_dsn(request.config)) as url:
        yield url


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
