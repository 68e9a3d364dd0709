"""scheduler-core's tests/test_recovery.py on PostgreSQL (see core_pg.py)."""

from __future__ import annotations

from studio_state.testing import load_beside

_core = load_beside(__file__, "core_pg.py", "studio_core_pg")
globals().update(
    _core.core_tests(
        "test_recovery",
        {
            _core.FILE: (
                "test_checkpoint_runs_on_its_interval",
                "test_second_engine_is_refused_naming_the_holder",
            ),
        },
    )
)
db_target = _core.db_target
