"""Shared helpers: run the real ``studio`` console script in a subprocess, isolated env.

Every invocation gets HOME set to the test's tmp_path (so the default database never touches
the real home), no inherited LIONAGI_* / STUDIO_* variables, UTC as the scheduler zone, and a
temp database unless the test says otherwise. Every result is checked for a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from studio_state.testing import clean_environment  # noqa: F401  (autouse fixture)

if TYPE_CHECKING:
    from studio_scheduler_core import Schedule

# The test modules import these helpers by name (``from conftest import Studio``). Under
# pytest's importlib import mode (how `hatch test` runs) this file is not importable as
# ``conftest``; pytest loads it before the test modules beside it, so register it here.
sys.modules.setdefault("conftest", sys.modules[__name__])


def _studio_command() -> list[str]:
    """The installed ``studio`` console script beside this interpreter (else ``-m``)."""
    bindir = Path(sys.executable).parent
    script = shutil.which("studio", path=str(bindir))
    if script:
        return [script]
    return [sys.executable, "-m", "studio_cli"]


STUDIO = _studio_command()
COMMAND_TIMEOUT = 60


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    args: Sequence[str]

    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def error_line(self) -> str:
        """The single ``error: …`` line of a failed command."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
        assert lines[0].startswith("error: "), lines[0]
        return lines[0]


def base_env(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LIONAGI_", "STUDIO_", "GITHUB_")) and key != "COLUMNS"
    }
    env.update(
        HOME=str(home),
        LIONAGI_SCHEDULER_TZ="UTC",
        PYTHONUNBUFFERED="1",
    )
    return env


@dataclass
class Call:
    """One invocation for :meth:`Studio.run_many` with its own ``run`` options."""

    args: Sequence[str]
    options: dict[str, Any]


class Studio:
    """Runs ``studio …`` against one temp database."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.workdir = tmp_path / "work"
        self.workdir.mkdir()
        self.db = tmp_path / "state.db"
        self.env = base_env(self.home)
        self.env["LIONAGI_STUDIO_DB"] = str(self.db)
        # read commands refuse a missing database: start from the empty one `serve` leaves
        asyncio.run(_migrate(self.db))

    def run(
        self,
        *args: str,
        input: str | None = None,
        env: Mapping[str, str | None] | None = None,
        cwd: Path | None = None,
        expect: int | None = 0,
    ) -> Result:
        full_env = dict(self.env)
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        proc = subprocess.run(
            [*STUDIO, *args],
            input=input,
            capture_output=True,
            text=True,
            env=full_env,
            cwd=cwd or self.workdir,
            timeout=COMMAND_TIMEOUT,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        result = Result(proc.returncode, proc.stdout, proc.stderr, args)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stdout, proc.stdout
        if expect is not None:
            assert proc.returncode == expect, (
                f"studio {' '.join(args)} exited {proc.returncode}, expected {expect}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return result

    def run_many(
        self, calls: Sequence[Sequence[str] | Call], *, expect: int | None = 0
    ) -> list[Result]:
        """Run independent invocations side by side; results in the order given.

        A call is the argument list, or ``Call(args, kwargs)`` for per-call ``run`` options
        (``input``, ``env``, ``cwd``, ``expect``).
        """
        with ThreadPoolExecutor(max_workers=3) as pool:
            futures = []
            for call in calls:
                if isinstance(call, Call):
                    options = {"expect": expect, **call.options}
                    futures.append(pool.submit(self.run, *call.args, **options))
                else:
                    futures.append(pool.submit(self.run, *call, expect=expect))
            return [future.result() for future in futures]

    def ok_json(self, *args: str, **kwargs: Any) -> Any:
        result = self.run(*args, "--json", **kwargs)
        return result.json()

    def fail(self, *args: str, code: int = 1, **kwargs: Any) -> Result:
        result = self.run(*args, expect=code, **kwargs)
        assert result.stdout == "", result.stdout
        if code == 1:
            _ = result.error_line
        return result

    def schedule_names(self) -> list[str]:
        """Names of the schedules in the database (read with the test's own connection)."""
        conn = sqlite3.connect(self.db)
        try:
            return [row[0] for row in conn.execute("SELECT name FROM schedules ORDER BY name")]
        finally:
            conn.close()

    def create(self, name: str, *flags: str) -> dict[str, Any]:
        """Create a schedule through the CLI (interval 1h + a command unless flags given)."""
        args = list(flags) or ["--interval", "1h", "--command", "python3", "--command-arg", "ok"]
        created: dict[str, Any] = self.ok_json("schedule", "create", name, *args)
        return created

    def seed(self, name: str, **fields: Any) -> Schedule:
        """Create a schedule in-process with the real ScheduleService (fast test data).

        Used where the command under test is not ``create`` itself; default: every hour,
        ``python3 ok`` in the work directory.
        """
        data: dict[str, Any] = {
            "name": name,
            "trigger_type": "interval",
            "interval_sec": 3600,
            "action_kind": "command",
            "action_command": "python3",
            "action_command_args": ["ok"],
            "action_cwd": str(self.workdir),
            **fields,
        }
        return asyncio.run(_seed(self.db, data))


async def _migrate(db: Path) -> None:
    from studio_scheduler_core import ensure_schema
    from studio_state import connect

    async with connect(db) as conn:
        await ensure_schema(conn)


async def _seed(db: Path, data: dict[str, Any]) -> Schedule:
    from studio_scheduler_core import SchedulerSettings, ScheduleService, ensure_schema
    from studio_state import connect

    settings = SchedulerSettings(timezone="UTC", command_allowlist=("python3", "studio"))
    async with connect(db) as conn:
        await ensure_schema(conn)
        return await ScheduleService(conn, settings=settings).create(data)


@pytest.fixture
def studio(tmp_path: Path) -> Studio:
    return Studio(tmp_path)
