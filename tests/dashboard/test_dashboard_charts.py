"""The pictures' geometry and the edit form's PATCH body, as pure functions (no browser)."""

from __future__ import annotations

from dataclasses import dataclass

from studio_api._dashboard._charts import (
    MIN_BAR,
    STRIP_RUNS,
    activity_chart,
    health_counts,
    run_strip,
)
from studio_api._dashboard._edit import form_values, patch_body


def _run(n: int, status: str, took: float | None) -> dict[str, object]:
    start = 1_000.0 + n * 100
    return {
        "id": f"run{n:02d}",
        "status": status,
        "fired_at": None if took is None else start,
        "ended_at": None if took is None else start + took,
    }


def test_strip_draws_the_newest_runs_oldest_first_on_the_longest_ones_scale() -> None:
    newest_first = [_run(n, "completed" if n % 2 else "failed", float(n + 1)) for n in range(60)][
        ::-1
    ]
    strip = run_strip(newest_first, now=99_999.0)
    assert len(strip.bars) == STRIP_RUNS
    # the 50 newest (runs 10..59), oldest on the left
    assert [b.run_id for b in strip.bars] == [f"run{n:02d}" for n in range(10, 60)]
    assert [b.href for b in strip.bars][:2] == ["/runs/run10", "/runs/run11"]
    xs = [b.x for b in strip.bars]
    assert xs == sorted(xs) and len(set(xs)) == STRIP_RUNS
    # the longest run (60 s) fills the bar room; the scale says so
    assert strip.scale_seconds == 60.0
    assert strip.scale_label == "tallest bar = 1 min 00 s"
    tallest = strip.bars[-1]
    assert tallest.height == strip.bar_room and tallest.y == 0
    half = next(b for b in strip.bars if b.seconds == 30.0)
    assert half.height == strip.bar_room / 2
    assert {b.glyph for b in strip.bars if b.status == "failed"} == {"✗"}
    assert {b.tone for b in strip.bars if b.status == "completed"} == {"good"}
    assert "ended 1970-01-01T" in tallest.title and "took 1 min 00 s" in tallest.title


def test_strip_of_runs_that_never_started_or_still_run() -> None:
    queued = _run(1, "queued", None)
    running = {"id": "live", "status": "running", "fired_at": 500.0, "ended_at": None}
    strip = run_strip([running, queued], now=510.0)
    assert [b.run_id for b in strip.bars] == ["run01", "live"]
    assert strip.bars[0].height == MIN_BAR and strip.bars[0].seconds is None
    assert strip.bars[1].seconds == 10.0 and strip.scale_label == "tallest bar = 10.0 s"
    assert "started not yet" in strip.bars[0].title
    assert run_strip([], now=0.0).scale_label == "no runs yet"


@dataclass(frozen=True)
class _Bucket:
    start: float
    fires: int
    completed: int
    failed: int
    timed_out: int
    cancelled: int


def test_activity_columns_stack_outcomes_on_the_largest_total() -> None:
    buckets = [
        _Bucket(3600.0 * h, 0, c, f, t, 0)
        for h, (c, f, t) in enumerate([(2, 1, 1), (0, 0, 0), (1, 1, 0)])
    ]
    chart = activity_chart(buckets)
    assert chart.scale_count == 4 and chart.scale_label == "tallest column = 4 runs"
    first, empty, third = chart.columns
    assert [s.series for s in first.segments] == ["completed", "failed", "timed_out"]
    assert sum(s.height for s in first.segments) == chart.bar_room
    # stacked upward: each segment sits on the one below it
    assert first.segments[0].y + first.segments[0].height == chart.bar_room
    assert first.segments[1].y + first.segments[1].height == first.segments[0].y
    assert empty.segments == () and empty.total == 0
    assert third.segments[0].height == chart.bar_room / 4
    assert first.label == "00:00" and third.label == "02:00"
    assert chart.total("completed") == 3 and chart.total("failed") == 2
    assert "2 completed, 1 failed, 1 timed out, 0 cancelled" in first.title
    assert activity_chart([]).scale_label == "no runs ended in this window"


def test_health_counts_keep_every_verdict() -> None:
    order = ("healthy", "failing", "overdue")
    assert health_counts(["healthy", "failing", "healthy"], order) == [
        ("healthy", 2),
        ("failing", 1),
        ("overdue", 0),
    ]


def test_edit_sends_only_what_changed_and_blank_clears() -> None:
    stored = {
        "name": "report",
        "description": "nightly",
        "interval_sec": 3600,
        "action_command": "python3",
        "action_command_args": ["-c", "print(1)"],
        "overlap_policy": "skip",
        "budget_usd": None,
        "pause_on_failure": False,
    }
    before = form_values(stored)
    assert before["interval_sec"] == "3600" and before["action_command_args"] == "-c\nprint(1)"
    unchanged = {k: before[k] for k in ("name", "interval_sec", "action_command_args")}
    assert patch_body(unchanged, before) == {}
    typed = {
        **before,
        "description": "",
        "interval_sec": "60",
        "action_command_args": "-c\r\nprint(2)\n\n",
        "budget_usd": "1.5",
        "pause_on_failure": "on",
        "name": "",
    }
    assert patch_body(typed, before) == {
        "name": "",
        "description": None,
        "interval_sec": 60,
        "action_command_args": ["-c", "print(2)"],
        "budget_usd": "1.5",
        "pause_on_failure": True,
    }
