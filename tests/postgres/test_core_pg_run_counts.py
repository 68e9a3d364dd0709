"""scheduler-core's tests/test_run_counts.py on PostgreSQL (see core_pg.py)."""

from __future__ import annotations

from studio_state.testing import load_beside

_core = load_beside(__file__, "core_pg.py", "studio_core_pg")
globals().update(
    _core.core_tests(
        "test_run_counts",
        {
            _core.PLAN: ("test_the_adhoc_run_list_reads_its_order_from_an_index",),
        },
    )
)
db_target = _core.db_target
