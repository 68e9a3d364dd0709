"""Seams of the scheduler engine: trigger sources, the threshold gate, worker passes, hooks,
leadership.

The engine's loop never names a trigger type: schedule evaluation looks each due row's
``trigger_type`` up in a registry of :class:`TriggerSource` objects (cron and interval are
built in; github_poll plugs in as another source), which take the due :class:`Schedule`
record. Threshold evaluation is the first admission
gate (:class:`ThresholdGate`, a no-op by default); ad-hoc queued runs are a
:class:`WorkerPass`; terminal-run notifications are a :class:`RunTerminalHook`. Which process
may evaluate schedules on a database is a :class:`Leadership` (the database file's lock on
SQLite, an advisory-lock election on PostgreSQL). A component that holds resources of its own
(tasks, HTTP clients) is :class:`Closeable`: the engine closes it when it stops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import aiosqlite

from ._records.codec import ColumnValue
from ._records.run import Run
from ._records.schedule import Schedule


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One due fire a trigger source offers for admission.

    ``due_at`` is the ``next_fire_at`` value the occurrence transaction is guarded on (a lost
    guard means someone else handled it). With ``advance`` the transaction also moves
    ``next_fire_at`` on (computed by the source's :meth:`TriggerSource.next_fire_at`, lazily:
    a deferred occurrence never pays for it). ``schedule_updates`` are further schedule
    columns written in the same transaction (a github cursor), and ``guards`` further columns
    it is guarded on (column values as stored: ``None`` is SQL NULL). ``trigger_context`` is
    the JSON object the run records.
    """

    schedule: Schedule
    due_at: float | None
    trigger_context: Mapping[str, Any]
    advance: bool = True
    schedule_updates: Mapping[str, ColumnValue] = field(default_factory=dict)
    guards: Mapping[str, ColumnValue] = field(default_factory=dict)


@runtime_checkable
class TriggerSource(Protocol):
    """Turns a due schedule of one ``trigger_type`` into occurrences, and arms cadence."""

    trigger_type: str
    """The ``schedules.trigger_type`` value this source handles."""

    missed_fire_applies: bool
    """Whether the startup missed-fire policy applies to schedules of this type."""

    def next_fire_at(
        self, schedule: Schedule, *, due: float | None, now: float, timezone: str
    ) -> float | None:
        """The cadence value after the occurrence due at ``due`` is handled at ``now``."""
        ...

    async def occurrences(
        self, conn: aiosqlite.Connection, schedule: Schedule, *, now: float, timezone: str
    ) -> list[Occurrence]:
        """The occurrences a due schedule offers now (may be empty: nothing to fire)."""
        ...


@runtime_checkable
class Closeable(Protocol):
    """A component with resources of its own; the engine awaits ``aclose()`` when it stops.

    A :class:`TriggerSource` that runs background work (github_poll: polls, its HTTP client)
    implements it; sources without resources need not.
    """

    async def aclose(self) -> None:
        """Stop background work and release resources; called once, at engine shutdown."""
        ...


@dataclass(frozen=True, slots=True)
class ThresholdDecision:
    """A threshold gate's verdict: fire (with extra context) or only advance the cadence.

    A firing verdict may carry ``schedule_updates`` (columns the occurrence transaction writes,
    e.g. ``last_alert_at``) and ``release``, called once when the fire ends or a later gate
    refuses it (the gate's in-memory reservation).
    """

    fire: bool
    context: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""
    schedule_updates: Mapping[str, ColumnValue] = field(default_factory=dict)
    release: Callable[[], None] | None = None


@runtime_checkable
class ThresholdGate(Protocol):
    """The first admission gate: evaluates ``threshold_config`` and its cooldown."""

    async def evaluate(
        self, conn: aiosqlite.Connection, schedule: Schedule, *, now: float
    ) -> ThresholdDecision:
        """Whether the occurrence of ``schedule`` may fire now."""
        ...


@runtime_checkable
class WorkerPass(Protocol):
    """The tick's host task-worker concern (ad-hoc queued runs)."""

    async def run(self, conn: aiosqlite.Connection, *, now: float) -> None:
        """Claim and start work; must return promptly (long work runs in its own tasks)."""
        ...

    async def stop(self) -> None:
        """Cancel whatever the worker started (engine shutdown)."""
        ...

    def in_flight(self) -> int:
        """How many ad-hoc runs this worker is executing."""
        ...

    def attach(self, *, node_id: str, storage: Any, runner: Any) -> None:
        """Join the engine as it starts: its node id (written on the runs it starts), its
        storage health (one for every terminal write) and its fire runner (where the
        scheduled fires it claims run)."""
        ...

    async def revoke(self, run_id: str) -> bool:
        """Stop the run at once if this worker executes it (its row already changed);
        whether it did."""
        ...


@runtime_checkable
class RunTerminalHook(Protocol):
    """Called once a schedule run's terminal status has committed (notifications seam)."""

    async def __call__(self, conn: aiosqlite.Connection, schedule: Schedule, run: Run) -> None:
        """React to the terminal run (e.g. enqueue a dispatch); errors are logged, not raised."""
        ...


@runtime_checkable
class Leadership(Protocol):
    """Who evaluates schedules on a database: exactly one engine at a time, the *leader*.

    On SQLite the leader is the one engine holding the database file's lock (taken once, at
    start, or the start is refused); on PostgreSQL every node is a candidate and a session
    advisory lock elects one, which another node replaces within ``tick_seconds`` when its
    connection drops. Only the leader runs the tick's concerns; every node serves its API.
    """

    @property
    def node_id(self) -> str:
        """This engine's node name (``hostname:pid`` unless configured)."""
        ...

    @property
    def is_leader(self) -> bool:
        """Whether the last :meth:`acquire` or :meth:`tick` found this engine leading."""
        ...

    async def acquire(self) -> None:
        """Become a candidate, before the database is opened: raises when this engine may not
        run at all (SQLite: :class:`EngineLocked`, another engine holds the file)."""
        ...

    async def tick(self) -> bool:
        """Check or try leadership now (cheap; called at every loop turn); returns
        :attr:`is_leader`. Never raises for a lost connection: it only stops leading."""
        ...

    async def release(self) -> None:
        """Give leadership up at once (engine stop); idempotent."""
        ...
