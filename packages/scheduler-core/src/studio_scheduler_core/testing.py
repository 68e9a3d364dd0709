"""Test support for the scheduler: command-action scripts, schedule bodies, row readers.

Tests of the scheduler (and of the packages above it) take these by import; the scheduler's
own suite also gets a :class:`SchedulerTestKit` bound to the test's ``tmp_path`` from its
``h`` fixture. The generic helpers (waiting, ``/proc`` checks, free ports, the environment
cleaner) are in :mod:`studio_state.testing`.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import aiosqlite

from studio_state import ManualClock, fetch_all, fetch_one
from studio_state.testing import eventually, group_has_live_member

from ._engine.engine import SchedulerEngine

__all__ = [
    "BLOCKER",
    "ENV_DUMP",
    "FLAKY",
    "PY",
    "T0",
    "SchedulerTestKit",
    "command_schedule",
    "fire_due",
    "runs_at_depth",
    "run_reasons",
    "runs_of",
    "schedule_row",
    "transitions_of",
    "write_script",
]

PY = Path(sys.executable).name
"""The bare name of this interpreter (python3…), allow-listed for command actions."""

T0 = 1_700_000_000.0
"""The epoch second the tests' manual clocks start at."""

BLOCKER = """
import os, sys, time
flag = sys.argv[1]
code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
until = time.time() + 60
while not os.path.exists(flag) and time.time() < until:
    time.sleep(0.01)
sys.exit(code)
"""
"""A command action that waits until the file ``argv[1]`` exists, then exits ``argv[2]``."""

ENV_DUMP = """
import json, os, sys
keys = ("LIONAGI_INVOCATION_ID", "LIONAGI_STUDIO_DB")
with open(sys.argv[1], "a") as out:
    out.write(json.dumps({k: os.environ.get(k) for k in keys} | {"cwd": os.getcwd()}) + "\\n")
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""
"""A command action that appends its Studio variables and cwd as a JSON line to ``argv[1]``."""


FLAKY = """
import pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
sys.exit(0 if n >= int(sys.argv[2]) else 3)
"""
"""A command action that fails (exit 3) until it has run ``argv[2]`` times, counting its runs
in the file ``argv[1]``; then it exits 0."""


def write_script(directory: Path, name: str, body: str) -> str:
    """Write a small Python script for a command action; return its absolute path."""
    path = directory / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return str(path)


def command_schedule(path: str, *args: str, **fields: Any) -> dict[str, Any]:
    """Create data for an interval schedule running ``python3 path args…`` (``fields`` win)."""
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


async def runs_of(conn: aiosqlite.Connection, schedule_id: str) -> list[dict[str, Any]]:
    """The schedule's runs, oldest first."""
    return await fetch_all(
        conn,
        "SELECT * FROM schedule_runs WHERE schedule_id = ? ORDER BY created_at, rowid",
        (schedule_id,),
    )


async def run_reasons(conn: aiosqlite.Connection, schedule_id: str) -> list[tuple[str, str]]:
    """``(status, status_reason_code)`` of the schedule's runs, oldest first."""
    return [(r["status"], r["status_reason_code"]) for r in await runs_of(conn, schedule_id)]


async def runs_at_depth(
    conn: aiosqlite.Connection, schedule_id: str, depth: int
) -> list[dict[str, Any]]:
    """The schedule's runs at one chain depth (0: top-level, 1: their follow-ups), oldest
    first."""
    return await fetch_all(
        conn,
        "SELECT * FROM schedule_runs WHERE schedule_id = ? AND chain_depth = ? "
        "ORDER BY created_at, rowid",
        (schedule_id, depth),
    )


async def fire_due(engine: SchedulerEngine, clock: ManualClock, at: float) -> None:
    """Set the manual ``clock`` to ``at``, run one tick and wait until what it started ended."""
    clock.set(at)
    await engine.tick_once()
    await engine.wait_idle()


async def transitions_of(conn: aiosqlite.Connection, entity_id: str) -> list[dict[str, Any]]:
    """The status transitions of one entity, oldest first."""
    return await fetch_all(
        conn,
        "SELECT * FROM status_transitions WHERE entity_id = ? ORDER BY created_at, rowid",
        (entity_id,),
    )


async def schedule_row(conn: aiosqlite.Connection, schedule_id: str) -> dict[str, Any]:
    """The ``schedules`` row (it must exist)."""
    row = await fetch_one(conn, "SELECT * FROM schedules WHERE id = ?", (schedule_id,))
    assert row is not None, schedule_id
    return row


class SchedulerTestKit:
    """The helpers above with scripts written into one test's directory.

    ``blocker`` and ``env_dump`` are the paths of :data:`BLOCKER` and :data:`ENV_DUMP`,
    written there when the kit is made.
    """

    PY = PY
    T0 = T0
    eventually = staticmethod(eventually)
    group_has_live_member = staticmethod(group_has_live_member)
    command_schedule = staticmethod(command_schedule)
    fire_due = staticmethod(fire_due)
    runs_at_depth = staticmethod(runs_at_depth)
    runs_of = staticmethod(runs_of)
    run_reasons = staticmethod(run_reasons)
    transitions_of = staticmethod(transitions_of)
    schedule_row = staticmethod(schedule_row)

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.blocker = self.script("blocker.py", BLOCKER)
        self.env_dump = self.script("env_dump.py", ENV_DUMP)

    def script(self, name: str, body: str) -> str:
        """Write ``body`` as ``name`` in the test's directory; return its absolute path."""
        return write_script(self.directory, name, body)
