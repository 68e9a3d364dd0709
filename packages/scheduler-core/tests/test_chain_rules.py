"""Follow-ups that do what they say: no inherited continuations, kind-checked overlay keys,
nesting capped at creation, and the budget gate before each follow-up."""

from __future__ import annotations

from typing import Any

import pytest

from studio_scheduler_core import MAX_CHAIN_DEPTH, Schedule, ScheduleValidationError
from studio_state import fetch_value


def _agent(prompt: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": fields.pop("name", "chain"),
        "trigger_type": "interval",
        "interval_sec": 60,
        "action_kind": "agent",
        "action_model": "gpt-x",
        "action_prompt": prompt,
        **fields,
    }


async def _fire(engine: Any, clock: Any, created: Schedule) -> None:
    clock.set(created.next_fire_at)
    await engine.tick_once()
    await engine.wait_idle()


async def test_on_success_prompt_runs_once_not_to_the_depth_cap(make_engine, clock, h) -> None:
    """The reported bug: the follow-up inherited on_success and the chain ran 11 times."""
    engine = await make_engine(clock=clock)
    created = await engine.service.create(
        _agent(
            "summarise usage=completed:10:10:0.40",
            budget_usd=1.0,
            on_success={"prompt": "post the summary usage=completed:10:10:0.40"},
        )
    )
    await _fire(engine, clock, created)
    runs = await h.runs_of(engine.conn, created.id)
    assert [(r.chain_depth, r.status) for r in runs] == [(0, "completed"), (1, "completed")]
    assert list(runs[1].action_args)[-1] == "post the summary usage=completed:10:10:0.40"
    row = await h.schedule_row(engine.conn, created.id)
    assert row.enabled is True  # spent $0.80 of $1.00: nothing overspent, nothing disabled


async def test_failing_command_follow_up_runs_once(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    fail = h.script("fail.py", "import sys\nsys.exit(3)\n")
    created = await engine.service.create(
        h.command_schedule(fail, on_fail={"command_args": [fail, "retry"]})
    )
    await _fire(engine, clock, created)
    runs = await h.runs_of(engine.conn, created.id)
    assert [(r.chain_depth, r.status) for r in runs] == [(0, "failed"), (1, "failed")]


async def test_budget_gate_stops_the_chain_with_a_skipped_run(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(
        _agent(
            "expensive usage=completed:10:10:1.50",
            budget_usd=1.0,
            on_success={"prompt": "post", "on_success": {"prompt": "again"}},
        )
    )
    await _fire(engine, clock, created)
    runs = await h.runs_of(engine.conn, created.id)
    assert [(r.chain_depth, r.status) for r in runs] == [(0, "completed"), (1, "skipped")]
    skipped = runs[1]
    assert skipped.status_reason_code == "run.skipped.budget"
    assert skipped.chain_parent_id == runs[0].id
    assert skipped.child_pid is None and skipped.invocation_id is None
    assert "budget_usd=1.0" in skipped.status_reason_summary
    assert skipped.trigger_context["chain_from"] == runs[0].id
    transitions = await h.transitions_of(engine.conn, skipped.id)
    assert [(t.status, t.reason_code) for t in transitions] == [("skipped", "run.skipped.budget")]


async def test_budget_gate_checks_tokens_before_a_failure_follow_up(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(
        _agent("boom exit=2 usage=failed:600:600", budget_tokens=1000, on_fail={"prompt": "x"})
    )
    await _fire(engine, clock, created)
    runs = await h.runs_of(engine.conn, created.id)
    assert [(r.status, r.status_reason_code) for r in runs][1] == (
        "skipped",
        "run.skipped.budget",
    )


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"on_success": {"prompt": "post the summary"}}, "on_success.prompt"),
        ({"on_fail": {"model": "gpt-x"}}, "on_fail.model"),
        ({"on_fail": {"agent": "reviewer"}}, "on_fail.agent"),
        ({"on_success": {"playbook": "p"}}, "on_success.playbook"),
        (
            {"on_success": {"command_args": ["x"], "on_fail": {"flow_yaml": "a: 1"}}},
            "on_success.on_fail.flow_yaml",
        ),
    ],
)
async def test_keys_a_command_follow_up_cannot_use_are_refused(
    service, conn, h, data: dict[str, Any], field: str
) -> None:
    with pytest.raises(ScheduleValidationError) as info:
        await service.create(h.command_schedule("/bin/x", **data))
    assert info.value.field == field, str(info.value)
    assert "cannot use" in info.value.message
    assert await fetch_value(conn, "SELECT COUNT(*) FROM schedules") == 0


async def test_resulting_kind_is_the_kind_after_every_overlay_on_the_path(service, h) -> None:
    # agent schedule → command follow-up → its on_success: command_args fit, a prompt does not
    to_command = {"kind": "command", "command": h.PY, "command_args": ["x.py"]}
    with pytest.raises(ScheduleValidationError) as info:
        await service.create(_agent("p", on_success={**to_command, "on_success": {"prompt": "no"}}))
    assert info.value.field == "on_success.on_success.prompt"
    with pytest.raises(ScheduleValidationError) as info:
        await service.create(_agent("p", on_fail={"command_args": ["x"]}))
    assert info.value.field == "on_fail.command_args"
    created = await service.create(
        _agent("p", on_success={**to_command, "on_success": {"command_args": ["y.py"]}})
    )
    assert created.on_success["on_success"] == {"command_args": ["y.py"]}
    # a null only clears an inherited column and is accepted on any kind
    cleared = await service.create(
        _agent("p", name="c2", on_success={**to_command, "prompt": None})
    )
    assert cleared.on_success["prompt"] is None


async def test_nesting_deeper_than_the_cap_is_refused_at_creation(service, h) -> None:
    def nested(levels: int) -> dict[str, Any]:
        overlay: dict[str, Any] = {"prompt": "leaf"}
        for _ in range(levels - 1):
            overlay = {"prompt": "x", "on_success": overlay}
        return overlay

    created = await service.create(_agent("p", on_success=nested(MAX_CHAIN_DEPTH)))
    assert created.id
    with pytest.raises(ScheduleValidationError) as info:
        await service.create(_agent("p", name="deep", on_success=nested(MAX_CHAIN_DEPTH + 1)))
    assert info.value.field == ".".join(["on_success"] * (MAX_CHAIN_DEPTH + 1))
