"""scheduler-core's tests/test_adhoc_counts.py on PostgreSQL (see core_pg.py)."""

from __future__ import annotations

from studio_state.testing import load_beside

_core = load_beside(__file__, "core_pg.py", "studio_core_pg")
globals().update(_core.core_tests("test_adhoc_counts"))
db_target = _core.db_target
