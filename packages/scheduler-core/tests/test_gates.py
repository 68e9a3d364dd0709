"""Admission (DESIGN §5.3): gate order, each refusal's rows and reason codes, manual fires."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import FireRefused, ScheduleNotFound, report_usage
from studio_state import fetch_all, fetch_value


def _blocking(h: Any, flag: Path, **fields: Any) -> dict[str, Any]:
    return h.command_schedule(h.blocker, str(flag), **fields)


async def _tick_at(engine, clock, when: float) -> dict[str, Any]:
    clock.set(when)
    return await engine.tick_once()


async def _add_spend(conn, schedule_id: str, cost: float, clock) -> None:
    run = (
        await fetch_all(
            conn,
            "SELECT invocation_id FROM schedule_runs WHERE schedule_id = ? "
            "AND invocation_id IS NOT NULL",
            (schedule_id,),
        )
    )[0]
    await report_usage(conn, invocation_id=run["invocation_id"], cost_usd=cost, clock=clock)


async def test_overlap_skip_writes_a_skipped_row_and_advances(
    make_engine, clock, h, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "release"
    created = await engine.service.create(_blocking(h, flag))
    due = created.next_fire_at
    await _tick_at(engine, clock, due)
    await _tick_at(engine, clock, due + 60)
    assert await h.run_reasons(engine.conn, created.id) == [
        ("running", "schedule.fired.due"),
        ("skipped", "schedule.skipped.overlap"),
    ]
    row = await h.schedule_row(engine.conn, created.id)
    assert row.next_fire_at == due + 120
    flag.touch()
    await engine.wait_idle()
    assert (await h.run_reasons(engine.conn, created.id))[0] == ("completed", "run.completed.ok")


async def test_overlap_allow_fires_again(make_engine, clock, h, tmp_path: Path) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "release"
    created = await engine.service.create(_blocking(h, flag, overlap_policy="allow"))
    due = created.next_fire_at
    await _tick_at(engine, clock, due)
    await _tick_at(engine, clock, due + 60)
    assert [r[0] for r in await h.run_reasons(engine.conn, created.id)] == ["running", "running"]
    flag.touch()
    await engine.wait_idle()


async def _one_slot_and_waiting(
    make_engine, clock, h, flag: Path, *, count: int
) -> tuple[Any, dict[str, Any], list[dict[str, Any]], float]:
    """An engine with one global slot, a blocking schedule to hold it, and ``count`` blocking
    schedules due one second later; returns them and when all are due."""
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1)
    holder = await engine.service.create(_blocking(h, flag, name="holder"))
    clock.advance(1)  # due one second after the holder
    waiting = [
        await engine.service.create(_blocking(h, flag, name=f"waiting-{i}")) for i in range(count)
    ]
    due = max(float(s.next_fire_at) for s in [holder, *waiting])
    return engine, holder, waiting, due


async def _capacity_deferral_counts(conn) -> list[int]:
    """The ``deferral_count`` of every capacity deferral record, in the order written."""
    rows = await fetch_all(
        conn,
        "SELECT metadata FROM status_transitions WHERE reason_code = "
        "'schedule.deferred.capacity' ORDER BY created_at, rowid",
    )
    return [json.loads(t["metadata"])["deferral_count"] for t in rows]


async def test_capacity_defers_and_records_on_1st_11th_21st(
    make_engine, clock, h, tmp_path: Path
) -> None:
    flag = tmp_path / "release"
    engine, holder, (waiting,), due = await _one_slot_and_waiting(
        make_engine, clock, h, flag, count=1
    )
    for i in range(25):
        await _tick_at(engine, clock, due + i * 1.0)  # one full pass a second counts
    reasons = await h.run_reasons(engine.conn, waiting.id)
    holder_reasons = await h.run_reasons(engine.conn, holder.id)
    assert holder_reasons == [("running", "schedule.fired.due")]
    assert reasons == [("skipped", "schedule.deferred.capacity")] * 3
    assert await _capacity_deferral_counts(engine.conn) == [1, 11, 21]
    # deferral leaves the occurrence due: it fires once the slot frees
    row = await h.schedule_row(engine.conn, waiting.id)
    assert row.next_fire_at == waiting.next_fire_at
    assert engine.health()["due_backlog"] == 1
    flag.touch()
    await engine.wait_idle()
    await _tick_at(engine, clock, due + 26)
    reasons = await h.run_reasons(engine.conn, waiting.id)
    assert reasons[-1][1] == "schedule.fired.due"
    await engine.wait_idle()


async def test_with_every_slot_taken_a_schedule_is_counted_deferred_once_a_second(
    make_engine, clock, h, tmp_path: Path
) -> None:
    # Wake-ups between full passes (a child ending, a write) only refill freed slots: they
    # stop at the first capacity deferral and count nothing, so 45 wake-ups in 11 s count
    # 12 deferrals (one full pass a second), recorded on the 1st and the 11th.
    flag = tmp_path / "release"
    engine, _, waiting, due = await _one_slot_and_waiting(make_engine, clock, h, flag, count=3)
    for i in range(45):
        await _tick_at(engine, clock, due + i * 0.25)
    for schedule in waiting:
        assert (
            await h.run_reasons(engine.conn, schedule.id)
            == [("skipped", "schedule.deferred.capacity")] * 2
        )
    assert sorted(await _capacity_deferral_counts(engine.conn)) == [1, 1, 1, 11, 11, 11]
    # a freed slot is filled by the next wake-up, refill or not
    flag.touch()
    await engine.wait_idle()
    await _tick_at(engine, clock, due + 11.25)
    fired = [
        s.id
        for s in waiting
        if (await h.run_reasons(engine.conn, s.id))[-1][1] == "schedule.fired.due"
    ]
    assert len(fired) == 1
    flag.unlink()
    await engine.wait_idle()


async def test_budget_exhausted_skips_and_disables(make_engine, clock, h, tmp_path: Path) -> None:
    engine = await make_engine(clock=clock)
    path = h.script("ok.py", "pass\n")
    created = await engine.service.create(h.command_schedule(path, budget_usd=1.0))
    due = created.next_fire_at
    await _tick_at(engine, clock, due)
    await engine.wait_idle()
    await _add_spend(engine.conn, created.id, 1.25, clock)
    await _tick_at(engine, clock, due + 60)
    assert await h.run_reasons(engine.conn, created.id) == [
        ("completed", "run.completed.ok"),
        ("skipped", "schedule.budget.exhausted"),
    ]
    row = await h.schedule_row(engine.conn, created.id)
    assert row.enabled is False and row.disabled_reason == "schedule.budget.exhausted"
    steps = [t.reason_code for t in await h.transitions_of(engine.conn, created.id)]
    assert steps == ["schedule.created", "schedule.budget.exhausted"]


async def test_budget_tokens_count_input_and_output(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(
        {
            "name": "tok",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "agent",
            "action_model": "m",
            "action_prompt": "go usage=completed:60:40",
            "budget_tokens": 100,
        }
    )
    await _tick_at(engine, clock, created.next_fire_at)
    await engine.wait_idle()
    await _tick_at(engine, clock, created.next_fire_at + 60)
    assert (await h.run_reasons(engine.conn, created.id))[-1] == (
        "skipped",
        "schedule.budget.exhausted",
    )


async def test_budget_overshoot_is_bounded_by_one_fire(
    make_engine, clock, h, tmp_path: Path
) -> None:
    """overlap=allow: a budgeted schedule never has two fires' usage outstanding at once."""
    engine = await make_engine(clock=clock)
    created = await engine.service.create(
        {
            "name": "spend",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "agent",
            "action_model": "m",
            "action_prompt": "go usage=completed:1:1:0.6 sleep=0.3",
            "overlap_policy": "allow",
            "budget_usd": 1.0,
        }
    )
    due = created.next_fire_at
    for i in range(12):
        await _tick_at(engine, clock, due + i * 60)
        if i % 3 == 2:
            await engine.wait_idle()
    await engine.wait_idle()
    for i in range(12, 15):
        await _tick_at(engine, clock, due + i * 60)
        await engine.wait_idle()
    spent = await fetch_value(engine.conn, "SELECT SUM(total_cost_usd) FROM sessions")
    fired = [r for r in await h.run_reasons(engine.conn, created.id) if r[0] == "completed"]
    assert len(fired) == 2  # 0.6 (under) -> 1.2 (over by less than one fire's cost) -> stop
    assert spent == pytest.approx(1.2)
    assert spent - 1.0 < 0.6
    reasons = [r[1] for r in await h.run_reasons(engine.conn, created.id)]
    assert "schedule.deferred.budget_pending" in reasons
    assert reasons[-1] == "schedule.budget.exhausted"
    assert (await h.schedule_row(engine.conn, created.id)).enabled is False


async def test_max_runs_counts_top_level_terminal_runs_not_chain_children(
    make_engine, clock, h
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(
        h.command_schedule(
            ok,
            max_runs=2,
            on_success={"command_args": [ok, "child"], "on_success": None},
        )
    )
    due = created.next_fire_at
    for i in range(4):
        await _tick_at(engine, clock, due + i * 60)
        await engine.wait_idle()
    runs = await h.runs_of(engine.conn, created.id)
    assert [(r.chain_depth, r.status) for r in runs] == [
        (0, "completed"),
        (1, "completed"),
        (0, "completed"),
        (1, "completed"),
    ]
    row = await h.schedule_row(engine.conn, created.id)
    assert row.enabled is False and row.disabled_reason == "schedule.disabled.max_runs"


async def test_max_runs_counts_in_process_claims(make_engine, clock, h, tmp_path: Path) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "release"
    created = await engine.service.create(_blocking(h, flag, overlap_policy="allow", max_runs=1))
    due = created.next_fire_at
    await _tick_at(engine, clock, due)
    await _tick_at(engine, clock, due + 60)
    assert await h.run_reasons(engine.conn, created.id) == [("running", "schedule.fired.due")]
    steps = [t.reason_code for t in await h.transitions_of(engine.conn, created.id)]
    assert steps == ["schedule.created", "schedule.disabled.max_runs"]
    flag.touch()
    await engine.wait_idle()


@pytest.mark.parametrize(
    ("overlap", "budget", "max_runs", "cap_full", "expected"),
    [
        ("skip", True, True, True, "schedule.skipped.overlap"),
        ("allow", True, True, True, "schedule.deferred.budget_pending"),
        ("allow", False, True, True, "schedule.disabled.max_runs"),
        ("allow", False, False, True, "schedule.deferred.capacity"),
    ],
)
async def test_gate_order(
    make_engine, clock, h, tmp_path: Path, overlap, budget, max_runs, cap_full, expected
) -> None:
    """With several gates failing at once, the first in ADR order decides."""
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1)
    flag = tmp_path / "release"
    fields: dict[str, Any] = {"overlap_policy": overlap}
    if budget:
        fields["budget_usd"] = 5.0
    if max_runs:
        fields["max_runs"] = 1
    created = await engine.service.create(_blocking(h, flag, **fields))
    due = created.next_fire_at
    await _tick_at(engine, clock, due)  # in flight: overlap, budget pending, claim, slot all held
    await _tick_at(engine, clock, due + 60)
    runs = await h.run_reasons(engine.conn, created.id)
    steps = [t.reason_code for t in await h.transitions_of(engine.conn, created.id)]
    assert expected in [r[1] for r in runs] + steps
    flag.touch()
    await engine.wait_idle()


async def test_manual_fire_paths(make_engine, clock, h, tmp_path: Path) -> None:
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1)
    flag = tmp_path / "release"
    created = await engine.service.create(_blocking(h, flag))
    with pytest.raises(ScheduleNotFound):
        await engine.fire_now("000000000000")
    run_id = await engine.fire_now(created.id)
    run = await engine.service.get_run(run_id)
    assert run.status == "running" and run.trigger_context["manual"] is True
    assert run.status_reason_code == "schedule.fired.manual"
    # the cadence is untouched by a manual fire
    assert (await h.schedule_row(engine.conn, created.id)).next_fire_at == created.next_fire_at
    other = await engine.service.create(_blocking(h, flag, name="other"))
    with pytest.raises(FireRefused) as info:
        await engine.fire_now(other.id)
    assert info.value.reason_code == "schedule.deferred.capacity"
    assert await h.runs_of(engine.conn, other.id) == []
    flag.touch()
    await engine.wait_idle()
    assert (await engine.service.get_run(run_id)).status == "completed"


async def test_manual_fire_refused_by_budget_and_max_runs_without_disabling(
    make_engine, clock, h
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(h.command_schedule(ok, budget_usd=0.5, max_runs=5))
    await engine.fire_now(created.id)
    await engine.wait_idle()
    await _add_spend(engine.conn, created.id, 0.5, clock)
    with pytest.raises(FireRefused) as info:
        await engine.fire_now(created.id)
    assert info.value.reason_code == "schedule.budget.exhausted"
    limited = await engine.service.create(h.command_schedule(ok, name="lim", max_runs=1))
    await engine.fire_now(limited.id)
    await engine.wait_idle()
    with pytest.raises(FireRefused) as info:
        await engine.fire_now(limited.id)
    assert info.value.reason_code == "schedule.disabled.max_runs"
    assert (await h.schedule_row(engine.conn, created.id)).enabled is True
    assert len(await h.runs_of(engine.conn, created.id)) == 1


async def test_manual_fire_ignores_overlap(make_engine, clock, h, tmp_path: Path) -> None:
    engine = await make_engine(clock=clock)
    flag = tmp_path / "release"
    created = await engine.service.create(_blocking(h, flag))
    await engine.fire_now(created.id)
    await engine.fire_now(created.id)
    assert len(await h.runs_of(engine.conn, created.id)) == 2
    # ...but an automatic occurrence sees them as overlap
    await _tick_at(engine, clock, created.next_fire_at)
    assert (await h.run_reasons(engine.conn, created.id))[-1][1] == "schedule.skipped.overlap"
    assert engine.limits()["in_flight"] == 2
    flag.touch()
    await engine.wait_idle()
