"""scheduler-core's tests/test_loop.py on PostgreSQL (see core_pg.py)."""

from __future__ import annotations

from studio_state.testing import load_beside

_core = load_beside(__file__, "core_pg.py", "studio_core_pg")
globals().update(
    _core.core_tests(
        "test_loop",
        {
            _core.PLAN: ("test_an_idle_tick_with_10000_schedules_reads_no_non_due_row",),
        },
    )
)
db_target = _core.db_target
