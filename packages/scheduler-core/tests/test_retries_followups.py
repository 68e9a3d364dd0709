"""Retries of a follow-up: only under its overlay's own ``retry`` (engine, injected clock,
real child processes)."""

from __future__ import annotations

from typing import Any

import pytest

from studio_scheduler_core import ScheduleValidationError
from studio_scheduler_core.testing import FLAKY, fire_due, runs_at_depth
from studio_state import fetch_all

FAIL = "import sys\nsys.exit(3)\n"


async def test_a_follow_up_with_its_own_retry_is_re_run_per_its_policy(
    make_engine, clock, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock)
    flaky = h.script("flaky.py", FLAKY)
    created = await engine.service.create(
        h.command_schedule(
            h.script("fail.py", FAIL),
            on_fail={
                "command_args": [flaky, str(tmp_path / "count"), "2"],
                "retry": {"max_attempts": 3, "backoff_sec": 5},
            },
        )
    )
    assert created.on_fail["retry"]["backoff_factor"] == 2  # validated, defaults filled
    await fire_due(engine, clock, float(created.next_fire_at))
    [top] = await runs_at_depth(engine.conn, created.id, 0)
    assert top.status == "failed"  # the schedule has no retry: the top-level run is not
    first, planned = await runs_at_depth(engine.conn, created.id, 1)
    assert first.status == "failed" and first.chain_parent_id == top.id
    assert (planned.status, planned.status_reason_code) == (
        "retry_wait",
        "run.retry.scheduled",
    )
    assert (planned.retry_of, planned.attempt) == (first.id, 2)
    assert planned.chain_parent_id == top.id
    assert planned.queued_at == first.ended_at + 5

    await fire_due(engine, clock, planned.queued_at)
    runs = await runs_at_depth(engine.conn, created.id, 1)
    assert [(r.status, r.attempt) for r in runs] == [("failed", None), ("completed", 2)]
    assert runs[1].trigger_context["chain_from"] == top.id
    assert list(runs[1].action_args)[1:] == [flaky, str(tmp_path / "count"), "2"]
    assert (tmp_path / "count").read_text() == "2"


async def test_a_follow_up_without_its_own_retry_is_never_retried(
    make_engine, clock, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock)
    fail = h.script("fail.py", FAIL)
    created = await engine.service.create(
        h.command_schedule(
            fail,
            retry={"max_attempts": 2, "backoff_sec": 5},
            on_fail={"command_args": [fail]},
        )
    )
    await fire_due(engine, clock, float(created.next_fire_at))
    _, planned = await runs_at_depth(engine.conn, created.id, 0)
    await fire_due(engine, clock, planned.queued_at)
    await fire_due(engine, clock, planned.queued_at + 30)
    tops = await runs_at_depth(engine.conn, created.id, 0)
    assert [(r.status, r.attempt) for r in tops[:2]] == [("failed", None), ("failed", 2)]
    [follow_up] = await runs_at_depth(engine.conn, created.id, 1)
    assert follow_up.status == "failed" and follow_up.chain_parent_id == tops[1].id
    assert (
        await fetch_all(
            engine.conn, "SELECT id FROM schedule_runs WHERE retry_of = ?", (follow_up.id,)
        )
        == []
    )


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"max_attempts": 0}, "on_fail.retry.max_attempts"),
        ({"max_attempts": 11}, "on_fail.retry.max_attempts"),
        ({"backoff_sec": 5}, "on_fail.retry.max_attempts"),
        ({"max_attempts": 2, "jitter": 1}, "on_fail.retry.jitter"),
        ("3", "on_fail.retry"),
    ],
)
async def test_a_follow_up_retry_is_validated_like_the_schedules(
    service, h, conn, retry: Any, field: str
) -> None:
    ok = h.script("ok.py", "pass\n")
    with pytest.raises(ScheduleValidationError) as caught:
        await service.create(h.command_schedule(ok, on_fail={"retry": retry}))
    assert caught.value.field == field
    assert await fetch_all(conn, "SELECT id FROM schedules") == []
