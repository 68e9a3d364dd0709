"""The fires of one evaluation pass commit in ONE occurrence transaction, each under its own
claim: a lost claim or a refused setup costs only that fire. A terminal write with nothing to
notify or retry is one trip."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from studio_scheduler_core import Schedule
from studio_scheduler_core._fire.commit import commit
from studio_scheduler_core._fire.env import FireEnv, Prepared
from studio_scheduler_core._fire.finish import finish
from studio_scheduler_core._fire.occurrence import ScheduleClaim
from studio_scheduler_core._fire.pipeline import commit_fires, stage_fire
from studio_scheduler_core._fire.prepare import prepare
from studio_state import connect, fetch_all, fetch_one

OK = "import sys\nsys.exit(0)\n"


class _Transactions:
    """The statements of one connection, grouped by write transaction (SQLite's own trace)."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, statement: str) -> None:
        self.statements.append(statement.strip())

    def groups(self) -> list[list[str]]:
        groups: list[list[str]] = []
        current: list[str] | None = None
        for statement in self.statements:
            if statement.upper().startswith("BEGIN"):
                current = []
            elif statement.upper() in ("COMMIT", "ROLLBACK"):
                if current is not None:
                    groups.append(current)
                current = None
            elif current is not None:
                current.append(statement)
        return groups


def _claims(group: list[str]) -> int:
    """The schedule claims in a transaction (the trace may repeat an INSERT's text)."""
    return sum(s.startswith("UPDATE schedules SET") for s in group)


@pytest.mark.sqlite_only("counts statements with sqlite3's trace callback")
async def test_the_fires_of_one_pass_commit_in_one_transaction_with_a_setup_refusal(
    make_engine: Any, clock: Any, h: Any, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, max_scheduled_concurrent=8)
    ok = h.script("ok.py", OK)
    gone = tmp_path / "gone"
    gone.mkdir()
    first = await engine.service.create(h.command_schedule(ok, name="a"))
    refused = await engine.service.create(
        h.command_schedule(ok, name="refused", action_cwd=str(gone), notify={"deliver_to": "pg"})
    )
    rest = [await engine.service.create(h.command_schedule(ok, name=n)) for n in ("b", "c")]
    gone.rmdir()
    schedules = [first, refused, *rest]
    trace = _Transactions()
    await engine.conn.set_trace_callback(trace)
    clock.set(max(s.next_fire_at for s in schedules))
    counts = await engine.tick_once()
    await engine.conn.set_trace_callback(None)
    await engine.wait_idle()

    with_fires = [g for g in trace.groups() if _claims(g)]
    assert [_claims(g) for g in with_fires] == [4]  # one transaction claims the 4 fires
    # The refused fire's notification is enqueued in that same transaction.
    assert any(s.startswith("INSERT INTO dispatch_outbox") for s in with_fires[0])
    assert counts["schedules"] == {"fire": 4}
    for schedule in schedules:
        runs = await h.runs_of(engine.conn, schedule.id)
        assert len(runs) == 1, schedule.name  # fired once: the next pass finds none due
        row = await h.schedule_row(engine.conn, schedule.id)
        assert row.next_fire_at == schedule.next_fire_at + 60
        want = (
            ("failed", "run.failed.missing_cwd")
            if schedule is refused
            else ("completed", "run.completed.ok")
        )
        assert (runs[0].status, runs[0].status_reason_code) == want
        steps = [t.status for t in await h.transitions_of(engine.conn, runs[0].id)]
        assert steps == (["running", "failed"] if schedule is refused else ["running", "completed"])
    (refusal,) = await h.runs_of(engine.conn, refused.id)
    dispatches = await fetch_all(engine.conn, "SELECT dedup_key FROM dispatch_outbox")
    assert dispatches == [{"dedup_key": f"run:{refusal.id}:run.failed"}]
    await engine.tick_once()
    await engine.wait_idle()
    for schedule in schedules:
        assert len(await h.runs_of(engine.conn, schedule.id)) == 1


async def test_a_lost_claim_in_a_batch_writes_nothing_of_that_fire_and_starts_no_child(
    make_engine: Any, clock: Any, h: Any, db_target: str
) -> None:
    engine = await make_engine(clock=clock, max_scheduled_concurrent=8)
    out = h.directory / "out"
    out.mkdir()
    touch = h.script("touch.py", "import pathlib, sys\npathlib.Path(sys.argv[1]).touch()\n")
    schedules = [
        await engine.service.create(h.command_schedule(touch, str(out / n), name=n))
        for n in ("a", "b", "c")
    ]
    run = engine._started()
    clock.set(max(s.next_fire_at for s in schedules))
    now = clock()
    staged = []
    for schedule in schedules:
        decision = await run.admission.admit(schedule, now=now, path="scheduled")
        assert decision.outcome == "fire"

        def claim(s: Schedule = schedule) -> ScheduleClaim:
            return ScheduleClaim(
                "occurrence", s.id, due_at=s.next_fire_at, next_fire_at=s.next_fire_at + 60
            )

        staged.append(
            stage_fire(
                run.env,
                schedule,
                {"scheduled": True, "due_at": schedule.next_fire_at},
                kind="scheduled",
                claim=claim,
                reservation=decision.reservation,
            )
        )
    assert run.admission.in_flight(schedules[1].id) == 1
    # Another writer (an operator's edit through the API's own connection) moves b's cadence
    # between its admission and the shared commit: b's claim is lost.
    moved = schedules[1].next_fire_at + 7
    async with connect(db_target) as other:
        await other.execute(
            "UPDATE schedules SET next_fire_at = ? WHERE id = ?", (moved, schedules[1].id)
        )
        await other.commit()

    fired = await commit_fires(run.env, staged, run.runner.start)

    assert [f is not None for f in fired] == [True, False, True]
    assert run.admission.in_flight(schedules[1].id) == 0  # its reservation is released
    assert schedules[1].id not in {r.schedule_id for r in run.admission.slots.values()}
    await engine.wait_idle()
    assert sorted(p.name for p in out.iterdir()) == ["a", "c"]  # no child for b
    assert await h.runs_of(engine.conn, schedules[1].id) == []
    lost = await h.schedule_row(engine.conn, schedules[1].id)
    assert (lost.next_fire_at, lost.last_fired_at) == (moved, None)
    invocation = staged[1].prepared.invocation_id
    found = await fetch_one(engine.conn, "SELECT 1 FROM invocations WHERE id = ?", (invocation,))
    assert found is None
    for index in (0, 2):
        (row,) = await h.runs_of(engine.conn, schedules[index].id)
        assert (row.status, row.status_reason_code) == ("completed", "run.completed.ok")
        assert row.trigger_context["due_at"] == schedules[index].next_fire_at
        steps = [t.status for t in await h.transitions_of(engine.conn, row.id)]
        assert steps == ["running", "completed"]
        sched = await h.schedule_row(engine.conn, schedules[index].id)
        assert sched.next_fire_at == schedules[index].next_fire_at + 60
    assert run.env.committed == {}
    assert run.admission.slots == {}


async def _committed(env: FireEnv, created: Schedule) -> Prepared:
    """A scheduled fire of ``created`` committed ``running`` (no child started)."""
    fire = prepare(env, created, {"scheduled": True}, kind="scheduled")
    claim = ScheduleClaim(
        "occurrence",
        created.id,
        due_at=created.next_fire_at,
        next_fire_at=created.next_fire_at + 60,
    )
    assert await commit(env, fire, claim)
    return fire


async def test_a_terminal_write_with_nothing_to_notify_is_one_trip_and_notifies_otherwise(
    conn: Any, service: Any, settings: Any, clock: Any, h: Any, db_target: str, monkeypatch: Any
) -> None:
    env = FireEnv(conn=conn, settings=settings, clock=clock, db_path=db_target)
    ok = h.script("ok.py", OK)
    quiet = await _committed(env, await service.create(h.command_schedule(ok, name="quiet")))
    loud = await _committed(
        env,
        await service.create(
            h.command_schedule(ok, name="loud", notify={"deliver_to": "pg", "on": ["completed"]})
        ),
    )
    hops = 0
    original = aiosqlite.Connection._execute

    async def counting(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counting)
    ended = {"status": "completed", "reason_code": "run.completed.ok", "summary": "exit code 0"}
    assert await finish(env, quiet, **ended, exit_code=0, error_detail=None)
    assert hops == 1  # BEGIN IMMEDIATE, evidence read, both updates, transitions, COMMIT
    assert await finish(env, loud, **ended, exit_code=0, error_detail=None)
    monkeypatch.undo()
    for fire in (quiet, loud):
        row = await fetch_one(
            conn, "SELECT status, exit_code FROM schedule_runs WHERE id = ?", (fire.run_id,)
        )
        assert row == {"status": "completed", "exit_code": 0}
        invocation = await fetch_one(
            conn, "SELECT status FROM invocations WHERE id = ?", (fire.invocation_id,)
        )
        assert invocation == {"status": "completed"}
        steps = [t.status for t in await h.transitions_of(conn, fire.run_id)]
        assert steps == ["running", "completed"]
    dispatches = await fetch_all(conn, "SELECT dedup_key FROM dispatch_outbox")
    assert dispatches == [{"dedup_key": f"run:{loud.run_id}:run.completed"}]
    # A second terminal write of an ended run wins nothing and writes nothing.
    assert not await finish(env, quiet, **ended, exit_code=0, error_detail=None)
    assert len(await h.transitions_of(conn, quiet.run_id)) == 2


@pytest.mark.sqlite_only("counts statements with sqlite3's trace callback")
async def test_terminal_writes_of_one_loop_turn_share_a_transaction_each_in_its_savepoint(
    conn: Any, service: Any, settings: Any, clock: Any, h: Any, db_target: str
) -> None:
    env = FireEnv(conn=conn, settings=settings, clock=clock, db_path=db_target)
    ok = h.script("ok.py", OK)
    fires = [
        await _committed(env, await service.create(h.command_schedule(ok, name=n)))
        for n in ("a", "b", "c")
    ]
    trace = _Transactions()
    await conn.set_trace_callback(trace)
    released: list[str] = []
    ended = {"status": "completed", "reason_code": "run.completed.ok", "summary": "exit code 0"}
    won = await asyncio.gather(
        *(
            finish(
                env,
                fire,
                **ended,
                exit_code=0,
                error_detail=None,
                on_commit=lambda run_id=fire.run_id: released.append(run_id),
            )
            for fire in fires
        ),
        env.grouped().run(_raises_after_a_write),
        return_exceptions=True,
    )
    await conn.set_trace_callback(None)
    assert won[:3] == [True, True, True]
    assert isinstance(won[3], RuntimeError)  # its own write rolled back, the others kept
    assert sorted(released) == sorted(f.run_id for f in fires)
    terminal = [g for g in trace.groups() if any(s.startswith("UPDATE schedule_runs") for s in g)]
    assert len(terminal) == 1  # the three ends in one transaction
    updates = [s for s in terminal[0] if s.startswith("UPDATE schedule_runs")]
    assert all(any(f.run_id in s for s in updates) for f in fires)
    for fire in fires:
        steps = [t.status for t in await h.transitions_of(conn, fire.run_id)]
        assert steps == ["running", "completed"]
        assert fire.run_id not in env.committed
    assert await fetch_all(conn, "SELECT id FROM schedules WHERE name = 'rolled back'") == []


def _raises_after_a_write(db: sqlite3.Connection) -> None:
    db.execute("UPDATE schedules SET name = 'rolled back' WHERE name = 'a'")
    raise RuntimeError("after its write")
