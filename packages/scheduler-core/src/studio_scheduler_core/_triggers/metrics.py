"""Threshold metrics: one indexed query (or two) per metric, studio-wide (the statements are in
:mod:`.store`).

Every metric is studio-wide (they are health alerts), measured over the last
``window_minutes`` unless it is a point-in-time figure. The alert schedule's own runs (and
their invocations and sessions) are left out of ``failed_runs``, ``failed_sessions`` and
``p95_latency_ms``, so an alert whose action fails or runs long cannot keep re-triggering
itself. Definitions:

- ``failed_runs``: schedule runs (scheduled, follow-up and ad-hoc) that ended ``failed`` or
  ``timed_out`` in the window.
- ``failed_sessions``: distinct failure causes among sessions ``failed``/``timed_out`` in the
  window (time = ended, else started, else created): one per (invocation, status), so a
  fan-out that fails in one way counts once; a session without an invocation counts alone.
- ``total_cost_usd``: the sum of session cost in the window (NULL counts 0); a breach also
  reports ``unreported_sessions`` (ended sessions with no cost) and ``spend_is_partial``.
- ``p95_latency_ms``: the 95th percentile (nearest rank) of ``ended_at - started_at`` of
  invocations started in the window and ended (not cancelled, not closed by a daemon-restart
  reconciliation, whose end time is not the child's); 0 with none.
- ``dead_letters``: outbox rows that became ``dead_letter`` in the window.
- ``pending_dispatch``: outbox rows now ``pending`` or ``delivering`` (point in time).
- ``github_poll_healthy_age_minutes``: minutes since the stalest github_poll schedule's last
  healthy poll (since its creation if it never had one); 0 with none. Point in time.
- ``github_poll_consecutive_401``: the highest ``poller_consecutive_401``; 0 with none.
  Point in time.

The github metrics look at enabled github_poll schedules and at those the poller disabled for
401s, so an auth failure keeps alerting until someone re-enables (or deletes) the schedule.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TypedDict

import aiosqlite

from . import store


class MetricExtras(TypedDict, total=False):
    """What a breach reports beside the observed figure (each metric sets its own keys)."""

    unreported_sessions: int
    spend_is_partial: bool
    samples: int
    github_schedule_id: str
    github_repo: str | None


MetricResult = tuple[float, MetricExtras]
Measure = Callable[[aiosqlite.Connection, float, float, str], Awaitable[MetricResult]]


async def _failed_runs(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    return await store.count(conn, "failed_runs", (start, own)), {}


async def _failed_sessions(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    return await store.count(conn, "failed_sessions", (start, own)), {}


async def _total_cost(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    cost, unreported = await store.session_cost(conn, start)
    extras = MetricExtras(unreported_sessions=unreported)
    if unreported:
        extras["spend_is_partial"] = True
    return cost, extras


async def _p95(conn: aiosqlite.Connection, now: float, start: float, own: str) -> MetricResult:
    n = await store.latency_samples(conn, start, own)
    if n == 0:
        return 0.0, {"samples": 0}
    rank = math.ceil(0.95 * n) - 1
    return await store.latency_at_rank(conn, start, own, rank), {"samples": n}


async def _dead_letters(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    return await store.count(conn, "dead_letters", (start,)), {}


async def _pending_dispatch(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    return await store.count(conn, "pending_dispatch"), {}


async def _healthy_age(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    poll = await store.stalest_github_poll(conn)
    if poll is None or poll.figure is None:
        return 0.0, {}
    age = max(0.0, (now - poll.figure) / 60.0)
    return age, {"github_schedule_id": poll.id, "github_repo": poll.github_repo}


async def _consecutive_401(
    conn: aiosqlite.Connection, now: float, start: float, own: str
) -> MetricResult:
    poll = await store.most_401_github_poll(conn)
    if poll is None:
        return 0.0, {}
    return poll.figure or 0.0, {"github_schedule_id": poll.id, "github_repo": poll.github_repo}


MEASURES: dict[str, Measure] = {
    "failed_runs": _failed_runs,
    "failed_sessions": _failed_sessions,
    "total_cost_usd": _total_cost,
    "p95_latency_ms": _p95,
    "dead_letters": _dead_letters,
    "pending_dispatch": _pending_dispatch,
    "github_poll_healthy_age_minutes": _healthy_age,
    "github_poll_consecutive_401": _consecutive_401,
}


async def measure(
    conn: aiosqlite.Connection, metric: str, *, now: float, window_minutes: float, own: str
) -> MetricResult:
    """``(observed, extra context)`` of ``metric`` at ``now`` (``KeyError``: unknown metric).

    ``own`` is the evaluating schedule's id (left out of the run-derived metrics).
    """
    return await MEASURES[metric](conn, now, now - float(window_minutes) * 60.0, own)
