"""What a fire costs the database at saturation: a refill pass reads only the due rows it can
fill, and the child records of fires started together commit in one NORMAL transaction."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core._engine.evaluation import REFILL_MARGIN
from studio_state import fetch_all

pytestmark = pytest.mark.sqlite_only("counts statements with sqlite3's trace callback")

OK = "import sys\nsys.exit(0)\n"
_DUE_SCAN = re.compile(r"FROM schedules WHERE enabled = 1 AND next_fire_at <= .* LIMIT (\d+)$")


class _Trace:
    """The statements SQLite runs on one connection, in order."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, statement: str) -> None:
        self.statements.append(" ".join(statement.split()))

    def due_scan_limits(self) -> list[int]:
        return [int(m.group(1)) for s in self.statements if (m := _DUE_SCAN.search(s))]


async def _fired(conn: Any, schedules: list[Any]) -> list[str]:
    rows = await fetch_all(conn, "SELECT schedule_id FROM schedule_runs WHERE status = 'running'")
    ids = {s.id for s in schedules}
    return [r["schedule_id"] for r in rows if r["schedule_id"] in ids]


async def test_a_refill_pass_reads_the_due_rows_it_can_fill_not_a_full_batch(
    make_engine: Any, clock: Any, h: Any, tmp_path: Path
) -> None:
    flag = tmp_path / "release"
    engine = await make_engine(clock=clock, max_scheduled_concurrent=1)
    holder = await engine.service.create(h.command_schedule(h.blocker, str(flag), name="holder"))
    clock.advance(1)
    waiting = [
        await engine.service.create(h.command_schedule(h.blocker, str(flag), name=f"w{i}"))
        for i in range(30)
    ]
    due = max(float(s.next_fire_at) for s in [holder, *waiting])
    clock.set(due)
    await engine.tick_once()  # the full pass: the holder fires, the 30 others meet the cap
    assert await _fired(engine.conn, waiting) == []

    trace = _Trace()
    await engine.conn.set_trace_callback(trace)
    clock.set(due + 0.25)  # a wake-up within the second: a refill pass, no slot free
    await engine.tick_once()
    await engine.conn.set_trace_callback(None)
    assert trace.due_scan_limits() == [REFILL_MARGIN]  # not a batch of 1,000 rows

    flag.touch()  # the holder ends: one slot frees
    await engine.wait_idle()
    flag.unlink()
    trace = _Trace()
    await engine.conn.set_trace_callback(trace)
    clock.set(due + 0.5)
    await engine.tick_once()
    await engine.conn.set_trace_callback(None)
    assert trace.due_scan_limits() == [1 + REFILL_MARGIN]
    fired = await _fired(engine.conn, waiting)
    assert fired == [min(s.id for s in waiting)]  # the freed slot filled, in (due, id) order
    flag.touch()
    await engine.wait_idle()


async def test_the_child_records_of_fires_started_together_share_one_normal_transaction(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock, max_scheduled_concurrent=8)
    ok = h.script("ok.py", OK)
    schedules = [await engine.service.create(h.command_schedule(ok, name=n)) for n in "abc"]
    trace = _Trace()
    await engine.conn.set_trace_callback(trace)
    clock.set(max(s.next_fire_at for s in schedules))
    await engine.tick_once()
    await engine.wait_idle()
    await engine.conn.set_trace_callback(None)

    statements = trace.statements
    records = [i for i, s in enumerate(statements) if "SET child_pid" in s]
    assert len(records) == 3
    begin = max(i for i, s in enumerate(statements[: records[0]]) if s.startswith("BEGIN"))
    end = records[0] + statements[records[0] :].index("COMMIT")
    assert all(begin < i < end for i in records)  # one transaction, one trip, one commit
    assert statements[begin - 1] == "PRAGMA synchronous = 1"  # at NORMAL, as alone before
    runs = await fetch_all(
        engine.conn, "SELECT status, child_pid, child_started_at, node_id FROM schedule_runs"
    )
    assert len(runs) == 3
    for run in runs:
        assert run["status"] == "completed"
        assert run["child_pid"] and run["child_started_at"] and run["node_id"]
