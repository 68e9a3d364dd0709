"""Test support for the scheduler: command-action scripts, schedule bodies, row readers, and
ScheduleSet documents with their plan and apply.

Tests of the scheduler (and of the packages above it) take these by import; the scheduler's
own suite also gets a :class:`SchedulerTestKit` bound to the test's ``tmp_path`` from its
``h`` fixture. The generic helpers (waiting, ``/proc`` checks, free ports, the environment
cleaner) are in :mod:`studio_state.testing`.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, Unpack

import aiosqlite

from studio_state import ManualClock, Transition, fetch_all, fetch_one
from studio_state.testing import eventually, group_has_live_member

from ._engine.engine import SchedulerEngine
from ._records.codec import run_record, schedule_record
from ._records.run import Run
from ._records.schedule import Schedule
from ._records.schedule_input import ScheduleInput
from ._schedules.sets.apply import ScheduleSetApplied, apply_schedule_plan
from ._schedules.sets.plan import plan_schedule_sets
from ._schedules.sets.records import ScheduleSetPlan
from ._schedules.sets.resolve import validate_schedule_sets
from ._settings import SchedulerSettings

__all__ = [
    "BLOCKER",
    "ENV_DUMP",
    "FLAKY",
    "PY",
    "SET_HEADER",
    "T0",
    "SchedulerTestKit",
    "apply_set_files",
    "command_schedule",
    "fire_due",
    "member_document",
    "numbered_set",
    "plan_set_files",
    "runs_at_depth",
    "run_reasons",
    "runs_of",
    "sample_set",
    "schedule_row",
    "set_document",
    "set_member",
    "transitions_of",
    "write_file",
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


def command_schedule(path: str, *args: str, **fields: Unpack[ScheduleInput]) -> ScheduleInput:
    """Create data for an interval schedule running ``python3 path args…`` (``fields`` win)."""
    data: ScheduleInput = {
        "name": f"cmd-{Path(path).stem}",
        "trigger_type": "interval",
        "interval_sec": 60,
        "action_kind": "command",
        "action_command": PY,
        "action_command_args": [path, *args],
    }
    data.update(fields)
    return data


async def runs_of(conn: aiosqlite.Connection, schedule_id: str) -> list[Run]:
    """The schedule's runs, oldest first."""
    rows = await fetch_all(
        conn,
        "SELECT * FROM schedule_runs WHERE schedule_id = ? ORDER BY created_at, rowid",
        (schedule_id,),
    )
    return [run_record(row) for row in rows]


async def run_reasons(conn: aiosqlite.Connection, schedule_id: str) -> list[tuple[str, str | None]]:
    """``(status, status_reason_code)`` of the schedule's runs, oldest first."""
    return [(r.status, r.status_reason_code) for r in await runs_of(conn, schedule_id)]


async def runs_at_depth(conn: aiosqlite.Connection, schedule_id: str, depth: int) -> list[Run]:
    """The schedule's runs at one chain depth (0: top-level, 1: their follow-ups), oldest
    first."""
    rows = await fetch_all(
        conn,
        "SELECT * FROM schedule_runs WHERE schedule_id = ? AND chain_depth = ? "
        "ORDER BY created_at, rowid",
        (schedule_id, depth),
    )
    return [run_record(row) for row in rows]


async def fire_due(engine: SchedulerEngine, clock: ManualClock, at: float) -> None:
    """Set the manual ``clock`` to ``at``, run one tick and wait until what it started ended."""
    clock.set(at)
    await engine.tick_once()
    await engine.wait_idle()


def _json(value: object) -> object:
    """A JSON column's value decoded (PostgreSQL's driver may have decoded it already)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


async def transitions_of(conn: aiosqlite.Connection, entity_id: str) -> list[Transition]:
    """The status transitions of one entity, oldest first (``evidence_refs`` and ``metadata``
    decoded)."""
    rows = await fetch_all(
        conn,
        "SELECT entity_type, entity_id, status, reason_code, created_at, previous_status, "
        "reason_summary, evidence_refs, actor, metadata FROM status_transitions "
        "WHERE entity_id = ? ORDER BY created_at, rowid",
        (entity_id,),
    )
    return [
        Transition(
            **{
                **row,
                "evidence_refs": _json(row["evidence_refs"]),
                "metadata": _json(row["metadata"]),
            }
        )
        for row in rows
    ]


async def schedule_row(conn: aiosqlite.Connection, schedule_id: str) -> Schedule:
    """The schedule as stored, read straight from its row (it must exist)."""
    row = await fetch_one(conn, "SELECT * FROM schedules WHERE id = ?", (schedule_id,))
    assert row is not None, schedule_id
    return schedule_record(row)


# -- ScheduleSet documents ------------------------------------------------------------------

SET_HEADER = "apiVersion: studio/v1\nkind: ScheduleSet\n"
"""The first two lines of every ScheduleSet document."""


def set_document(owner: str, members: Mapping[str, str]) -> str:
    """A document of ``owner`` whose members are given as YAML flow mappings (``{...}``)."""
    lines = [f"{SET_HEADER}metadata: {{name: {owner}}}", "schedules:"]
    lines += [f"  {name}: {body}" for name, body in members.items()]
    if not members:
        lines[-1] = "schedules: {}"
    return "\n".join(lines) + "\n"


def set_member(
    every: str = "5m", *, argv: Sequence[str] = (PY, "-c", "pass"), extra: str = ""
) -> str:
    """A member as a flow mapping: ``every`` as its trigger, running ``argv`` (``extra``: more
    keys, written as ``", key: value"``)."""
    return f"{{trigger: {{every: {every}}}, command: {{argv: {json.dumps(list(argv))}}}{extra}}}"


def member_document(body: str, owner: str = "team-a", member: str = "job") -> str:
    """A document with the one member ``member`` whose block YAML body is ``body``."""
    indented = "".join(f"    {line}\n" for line in body.strip("\n").splitlines())
    return f"{SET_HEADER}metadata: {{name: {owner}}}\nschedules:\n  {member}:\n{indented}"


def sample_set(
    owner: str = "team-a",
    *,
    argv: Sequence[str] = ("sh", "-c", "true"),
    cwd: str | None = None,
) -> str:
    """A two-member document: ``nightly`` (cron ``0 3 * * *`` in Europe/Paris, with a retry)
    and ``hourly`` (every hour), both running ``argv`` (in ``cwd`` when given)."""
    where = "" if cwd is None else f", cwd: {cwd}"
    command = f"{{argv: {json.dumps(list(argv))}{where}}}"
    return (
        f"{SET_HEADER}metadata: {{name: {owner}}}\nschedules:\n"
        "  nightly:\n"
        '    trigger:\n      cron: {expression: "0 3 * * *", timezone: Europe/Paris}\n'
        f"    command: {command}\n"
        "    retry: {max_attempts: 2, backoff_sec: 90s}\n"
        "  hourly:\n"
        "    trigger: {every: 1h}\n"
        f"    command: {command}\n"
    )


def numbered_set(
    owner: str,
    count: int,
    *,
    every: str | None = None,
    argv: Sequence[str] = ("true",),
    form: Literal["yaml", "json"] = "yaml",
) -> str:
    """A document of ``count`` members ``job-00000``… running ``argv``, every ``every``
    (default: member ``i`` every ``60 + i`` seconds), as YAML (one flow mapping a line) or
    JSON."""
    cadence = [every or f"{60 + i}s" for i in range(count)]
    if form == "json":
        members = {
            f"job-{i:05d}": {"trigger": {"every": cadence[i]}, "command": {"argv": list(argv)}}
            for i in range(count)
        }
        document = {"apiVersion": "studio/v1", "kind": "ScheduleSet"}
        return json.dumps({**document, "metadata": {"name": owner}, "schedules": members})
    return set_document(
        owner, {f"job-{i:05d}": set_member(cadence[i], argv=argv) for i in range(count)}
    )


def write_file(folder: Path, name: str, text: str) -> Path:
    """Write ``text`` as ``folder/name`` (the folder made if missing); return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


async def plan_set_files(
    conn: aiosqlite.Connection,
    paths: Sequence[Path | str],
    *,
    settings: SchedulerSettings,
    now: float,
    adopt: bool = False,
    prune: bool = False,
    force: bool = False,
) -> ScheduleSetPlan:
    """Validate the documents in ``paths`` (they must be valid) and plan them on ``conn``."""
    report = validate_schedule_sets(list(paths), settings=settings, now=now)
    assert report.ok, [str(p) for p in report.problems]
    return await plan_schedule_sets(
        conn, report.owners, report.members, adopt=adopt, prune=prune, force=force
    )


async def apply_set_files(
    conn: aiosqlite.Connection,
    paths: Sequence[Path | str],
    *,
    settings: SchedulerSettings,
    clock: ManualClock,
    adopt: bool = False,
    prune: bool = False,
    force: bool = False,
) -> tuple[ScheduleSetPlan, ScheduleSetApplied]:
    """Plan the documents in ``paths`` at ``clock``'s time and apply the plan; both."""
    plan = await plan_set_files(
        conn, paths, settings=settings, now=clock(), adopt=adopt, prune=prune, force=force
    )
    applied = await apply_schedule_plan(conn, plan, timezone=settings.timezone, clock=clock)
    return plan, applied


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
