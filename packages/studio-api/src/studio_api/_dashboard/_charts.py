"""The geometry of the dashboard's pictures (inline SVG drawn by the templates).

Pure functions from runs and counters to rectangles in a fixed viewBox: the templates only
place what is computed here. Every shape also carries a word or glyph (its status, its
count), so a picture reads without colour.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ._format import STATUS_ICONS, duration, status_tone, utc_time

#: How many runs the strip of a schedule's page shows (its newest ones).
STRIP_RUNS = 50
STRIP_WIDTH = 1000.0
STRIP_HEIGHT = 120.0
#: Room below the bars for each run's status glyph.
STRIP_GLYPH_ROOM = 18.0
#: A run that took no time (or never started) still shows a sliver to hover and click.
MIN_BAR = 3.0

CHART_WIDTH = 1000.0
CHART_HEIGHT = 160.0
#: Room below the columns for the hour labels.
CHART_LABEL_ROOM = 18.0
#: The stacked segments of the activity chart, bottom to top, and the glyph of each.
ACTIVITY_SERIES = ("completed", "failed", "timed_out", "cancelled")


@dataclass(frozen=True)
class Bar:
    """One run of the strip: its rectangle, its status and what hovering shows."""

    run_id: str
    status: str
    glyph: str
    tone: str
    x: float
    y: float
    width: float
    height: float
    seconds: float | None
    title: str

    @property
    def href(self) -> str:
        return f"/runs/{self.run_id}"

    @property
    def glyph_x(self) -> float:
        return self.x + self.width / 2


@dataclass(frozen=True)
class Strip:
    """The run-history strip: bars oldest (left) to newest (right) and the stated scale."""

    bars: tuple[Bar, ...]
    width: float
    height: float
    bar_room: float
    #: The duration the tallest possible bar stands for (the longest run shown).
    scale_seconds: float

    @property
    def scale_label(self) -> str:
        if not self.bars:
            return "no runs yet"
        return f"tallest bar = {duration(self.scale_seconds)}"


def run_seconds(run: Mapping[str, Any], now: float) -> float | None:
    """How long ``run`` took, or has run so far (``None`` when it never started)."""
    start = run.get("fired_at")
    if start is None:
        return None
    end = run.get("ended_at")
    return max(0.0, float(end if end is not None else now) - float(start))


def _run_title(run: Mapping[str, Any], seconds: float | None) -> str:
    status = str(run.get("status") or "")
    parts = [f"run {run.get('id')}: {status.replace('_', ' ')}"]
    parts.append(f"started {utc_time(run.get('fired_at')) or 'not yet'}")
    if run.get("ended_at") is not None:
        parts.append(f"ended {utc_time(run['ended_at'])}")
    if seconds is not None:
        parts.append(f"took {duration(seconds)}")
    return " · ".join(parts)


def run_strip(
    runs_newest_first: Sequence[Mapping[str, Any]],
    *,
    now: float,
    width: float = STRIP_WIDTH,
    height: float = STRIP_HEIGHT,
) -> Strip:
    """The strip of the newest :data:`STRIP_RUNS` runs (given newest first, as the API lists
    them), drawn oldest first; bar height is the run's duration over the longest one's."""
    chosen = list(runs_newest_first[:STRIP_RUNS])[::-1]
    seconds = [run_seconds(run, now) for run in chosen]
    scale = max((s for s in seconds if s is not None), default=0.0)
    bar_room = height - STRIP_GLYPH_ROOM
    slot = width / STRIP_RUNS
    bars = []
    for index, (run, took) in enumerate(zip(chosen, seconds, strict=True)):
        share = (took / scale) if (took is not None and scale > 0) else 0.0
        tall = max(MIN_BAR, share * bar_room)
        status = str(run.get("status") or "")
        bars.append(
            Bar(
                run_id=str(run["id"]),
                status=status,
                glyph=STATUS_ICONS.get(status, "•"),
                tone=status_tone(status),
                x=round(index * slot + slot * 0.1, 2),
                y=round(bar_room - tall, 2),
                width=round(slot * 0.8, 2),
                height=round(tall, 2),
                seconds=took,
                title=_run_title(run, took),
            )
        )
    return Strip(tuple(bars), width, height, bar_room, scale)


class BucketLike(Protocol):
    """What the activity chart reads of a counter bucket."""

    @property
    def start(self) -> float: ...
    @property
    def completed(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def timed_out(self) -> int: ...
    @property
    def cancelled(self) -> int: ...


@dataclass(frozen=True)
class Segment:
    """One series' part of a column (zero-height segments are left out)."""

    series: str
    count: int
    y: float
    height: float


@dataclass(frozen=True)
class Column:
    """One bucket of the activity chart: its stacked segments and its hover text."""

    start: float
    label: str
    x: float
    width: float
    total: int
    segments: tuple[Segment, ...]
    title: str


@dataclass(frozen=True)
class ActivityChart:
    """The activity chart: one column per bucket, stacked by outcome, on a stated scale."""

    columns: tuple[Column, ...]
    width: float
    height: float
    bar_room: float
    scale_count: int

    @property
    def scale_label(self) -> str:
        if self.scale_count == 0:
            return "no runs ended in this window"
        noun = "run" if self.scale_count == 1 else "runs"
        return f"tallest column = {self.scale_count} {noun}"

    def total(self, series: str) -> int:
        return sum(s.count for c in self.columns for s in c.segments if s.series == series)


def activity_chart(
    buckets: Sequence[BucketLike],
    *,
    width: float = CHART_WIDTH,
    height: float = CHART_HEIGHT,
) -> ActivityChart:
    """Stacked columns of ``buckets`` (oldest first): completed at the bottom, then failed,
    timed out and cancelled; column height is its total over the largest total."""
    counts = [{name: int(getattr(b, name)) for name in ACTIVITY_SERIES} for b in buckets]
    totals = [sum(c.values()) for c in counts]
    scale = max(totals, default=0)
    bar_room = height - CHART_LABEL_ROOM
    slot = width / max(1, len(buckets))
    columns = []
    for index, (bucket, count, total) in enumerate(zip(buckets, counts, totals, strict=True)):
        base = bar_room
        segments = []
        for name in ACTIVITY_SERIES:
            if count[name] == 0:
                continue
            tall = count[name] / scale * bar_room
            base -= tall
            segments.append(Segment(name, count[name], round(base, 2), round(tall, 2)))
        hour = dt.datetime.fromtimestamp(float(bucket.start), dt.UTC).strftime("%H:%M")
        detail = ", ".join(f"{count[n]} {n.replace('_', ' ')}" for n in ACTIVITY_SERIES)
        columns.append(
            Column(
                start=float(bucket.start),
                label=hour,
                x=round(index * slot + slot * 0.1, 2),
                width=round(slot * 0.8, 2),
                total=total,
                segments=tuple(segments),
                title=f"{utc_time(bucket.start)}: {detail}",
            )
        )
    return ActivityChart(tuple(columns), width, height, bar_room, scale)


def health_counts(verdicts: Sequence[str], order: Sequence[str]) -> list[tuple[str, int]]:
    """How many schedules have each verdict of ``order`` (zeros kept: a summary lists all)."""
    return [(name, sum(1 for v in verdicts if v == name)) for name in order]
