from __future__ import annotations

import pytest

from studio_scheduler_core import ScheduleValidationError


async def test_run_lists_refuse_an_unknown_status_naming_the_field(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    created = await engine.service.create(h.command_schedule(h.script("ok.py", "pass\n")))
    runs, total = await engine.service.list_runs(created.id, status="completed")
    assert (runs, total) == ([], 0)
    with pytest.raises(ScheduleValidationError) as schedule_error:
        await engine.service.list_runs(created.id, status="lost")
    with pytest.raises(ScheduleValidationError) as adhoc_error:
        await engine.runs.list(status="lost")
    for error in (schedule_error.value, adhoc_error.value):
        assert error.field == "status" and "queued" in str(error)
