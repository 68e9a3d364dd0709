"""scheduler-core's tests/test_fire_batch.py on PostgreSQL (see core_pg.py)."""

from __future__ import annotations

from studio_state.testing import load_beside

_core = load_beside(__file__, "core_pg.py", "studio_core_pg")
globals().update(
    _core.core_tests(
        "test_fire_batch",
        {
            _core.TRACE: (
                "test_terminal_writes_of_one_loop_turn_share_a_transaction_each_in_its_savepoint",
                "test_the_fires_of_one_pass_commit_in_one_transaction_with_a_setup_refusal",
            ),
        },
    )
)
db_target = _core.db_target
