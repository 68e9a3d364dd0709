"""Admission: threshold → overlap → rate_limit → budget → max_runs → slot.

:class:`Admission` holds the in-process bookkeeping (in-flight top-level fires per schedule,
max_runs claims, global slot holders) and returns a :class:`Decision` with a reason code.
An admitted decision carries a :class:`Reservation`, released idempotently by the fire.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import aiosqlite

from .._records.due import DueSchedule
from .._records.schedule import Schedule
from .._settings import SchedulerSettings
from ..abc import ThresholdDecision, ThresholdGate
from .rate_limit import RATE_LIMIT, RateWindows
from .store import admitted_run_count, fired_run_count, schedule_spend

Outcome = Literal["fire", "skip", "defer", "advance", "disable"]

OVERLAP = "schedule.skipped.overlap"
OVERLAP_HELD = "schedule.deferred.overlap"
BUDGET_EXHAUSTED = "schedule.budget.exhausted"
BUDGET_PENDING = "schedule.deferred.budget_pending"
MAX_RUNS = "schedule.disabled.max_runs"
CAPACITY = "schedule.deferred.capacity"
THRESHOLD = "schedule.threshold.not_breached"


@dataclass
class Reservation:
    """What an admitted fire holds: its overlap registration, max_runs claim and slot."""

    admission: Admission
    schedule_id: str
    token: int
    path: str
    since: float
    max_runs_claim: bool
    slot: bool
    run_id: str | None = None
    released_claim: bool = False
    released: bool = False
    on_release: Callable[[], None] | None = None

    def release_max_runs(self) -> None:
        """Drop the max_runs claim (once the terminal run row counts instead). Idempotent."""
        if self.max_runs_claim and not self.released_claim:
            self.released_claim = True
            self.admission.drop_claim(self.schedule_id)

    def park(self, run_id: str) -> None:
        """Hold on while the run, committed ``queued``, waits for and runs on any node's
        worker: released when the leader sees it end (:mod:`.dispatched`). Its max_runs
        claim is dropped now: the queued row counts in the database instead."""
        self.release_max_runs()
        self.run_id = run_id
        self.admission.dispatched[run_id] = self

    def release(self) -> None:
        """Release everything still held. Idempotent."""
        self.release_max_runs()
        if not self.released:
            self.released = True
            self.admission.drop(self)
            if self.on_release is not None:
                self.on_release()


class SlotHolder(TypedDict):
    """A fire holding a global slot: its schedule, its run (once committed), since when, and
    the path that admitted it (a JSON object of the engine's health and limits reports)."""

    schedule_id: str
    run_id: str | None
    since: float
    path: str


@dataclass
class Decision:
    """An admission verdict: ``outcome`` with ``reason_code``; ``reservation`` when admitted."""

    outcome: Outcome
    reason_code: str = ""
    message: str = ""
    reservation: Reservation | None = None
    context: Mapping[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    schedule_updates: Mapping[str, Any] = field(default_factory=dict)


class Admission:
    """The admission gates and their in-process reservations (single engine per database)."""

    def __init__(
        self, conn: aiosqlite.Connection, settings: SchedulerSettings, threshold: ThresholdGate
    ) -> None:
        self._conn = conn
        self._settings = settings
        self._threshold = threshold
        self._tokens = itertools.count(1)
        self._locks: dict[str, asyncio.Lock] = {}
        self.running: dict[str, dict[int, Reservation]] = {}
        self._claims: dict[str, int] = {}
        self.slots: dict[int, Reservation] = {}
        self.dispatched: dict[str, Reservation] = {}
        """run id → the reservation of a fire committed ``queued`` for any node's worker."""
        self._capacity_cache: Decision | None = None
        self.rates = RateWindows(conn)
        """Each rate-limited schedule's fires inside its window."""

    @property
    def cap(self) -> int:
        """The global cap on concurrently held scheduled slots."""
        return self._settings.max_scheduled_concurrent

    def slot_free(self) -> bool:
        """Whether a global slot is free right now."""
        return len(self.slots) < self.cap

    def in_flight(self, schedule_id: str) -> int:
        """Top-level fires of ``schedule_id`` currently admitted in this process."""
        return len(self.running.get(schedule_id, ()))

    def holders(self) -> list[SlotHolder]:
        """Current slot holders, oldest first."""
        return [
            SlotHolder(schedule_id=r.schedule_id, run_id=r.run_id, since=r.since, path=r.path)
            for r in sorted(self.slots.values(), key=lambda r: r.token)
        ]

    def drop_claim(self, schedule_id: str) -> None:
        """Give back one max_runs claim of the schedule (a :class:`Reservation`'s own)."""
        left = self._claims.get(schedule_id, 0) - 1
        if left > 0:
            self._claims[schedule_id] = left
        else:
            self._claims.pop(schedule_id, None)

    def drop(self, reservation: Reservation) -> None:
        """Forget what ``reservation`` holds: its overlap registration, slot and parking."""
        fires = self.running.get(reservation.schedule_id)
        if fires is not None:
            fires.pop(reservation.token, None)
            if not fires:
                del self.running[reservation.schedule_id]
        self.slots.pop(reservation.token, None)
        if reservation.run_id is not None:
            self.dispatched.pop(reservation.run_id, None)

    def _lock(self, schedule_id: str) -> asyncio.Lock:
        lock = self._locks.get(schedule_id)
        if lock is None:
            lock = self._locks[schedule_id] = asyncio.Lock()
        return lock

    def reserve_retry(self, schedule_id: str, *, now: float) -> Reservation | None:
        """A global slot for a due retry, no other gate (its occurrence was admitted once);
        ``None`` while the cap is reached."""
        if not self.slot_free():
            return None
        token = next(self._tokens)
        reservation = Reservation(self, schedule_id, token, "retry", now, False, True)
        self.running.setdefault(schedule_id, {})[token] = reservation
        self.slots[token] = reservation
        return reservation

    def restore(self, schedule_id: str, run_id: str, *, since: float) -> Reservation:
        """Hold a slot and the overlap registration again for a run in flight on a worker
        that a previous leader admitted: a new leader counts what already runs."""
        token = next(self._tokens)
        reservation = Reservation(
            self, schedule_id, token, "dispatched", since, False, True, run_id=run_id
        )
        self.running.setdefault(schedule_id, {})[token] = reservation
        self.slots[token] = reservation
        reservation.park(run_id)
        return reservation

    def plain_capacity_deferral(self, due: DueSchedule) -> Decision | None:
        """The capacity deferral of a due schedule no earlier gate can refuse, when no slot is
        free.

        One with no threshold, budget or max_runs, and no overlap to skip, passes every gate
        before the slot; with the slot full its decision is known without any await. ``None``
        means: run the full gates.
        """
        if self.slot_free():
            return None
        if due.threshold_config is not None or due.max_runs is not None:
            return None
        if due.rate_limit is not None:
            return None
        if due.budget_usd is not None or due.budget_tokens is not None:
            return None
        if due.overlap_policy != "allow" and self.in_flight(due.id):
            return None
        return self._capacity()

    def _capacity(self) -> Decision:
        # One shared (read-only) decision while the slot count stays the same: a tick may
        # defer thousands of rows.
        cached = self._capacity_cache
        if cached is not None and cached.metadata["in_flight"] == len(self.slots):
            return cached
        self._capacity_cache = Decision(
            "defer",
            CAPACITY,
            f"global concurrent-fire cap reached ({len(self.slots)}/{self.cap})",
            metadata={"in_flight": len(self.slots), "cap": self.cap},
        )
        return self._capacity_cache

    async def admit(
        self, schedule: Schedule, *, now: float, manual: bool = False, path: str = ""
    ) -> Decision:
        """Run the gates in order for one occurrence (or a manual fire) of ``schedule``."""
        sid = schedule.id
        async with self._lock(sid):
            verdict: ThresholdDecision | None = None
            if not manual and schedule.threshold_config:
                verdict = await self._threshold.evaluate(self._conn, schedule, now=now)
                if not verdict.fire:
                    return Decision("advance", THRESHOLD, verdict.reason)
            decision = await self._gates(schedule, now=now, manual=manual, path=path)
            if verdict is None:
                return decision
            if decision.outcome == "fire" and decision.reservation is not None:
                # The threshold's reservation lives as long as the fire's; the occurrence
                # transaction writes its updates (last_alert_at).
                decision.reservation.on_release = verdict.release
                decision.context = verdict.context
                decision.schedule_updates = verdict.schedule_updates
            elif verdict.release is not None:
                verdict.release()  # a later gate refused: no alert, no cooldown
            return decision

    async def _gates(self, schedule: Schedule, *, now: float, manual: bool, path: str) -> Decision:
        sid = schedule.id
        context: Mapping[str, Any] = {}
        if not manual and schedule.overlap_policy == "skip" and self.in_flight(sid):
            if schedule.trigger_type == "github_poll":
                # A PR event does not recur like a cron slot: skipping it would lose it, so
                # overlap=skip makes a github schedule's events wait their turn instead.
                return Decision(
                    "defer",
                    OVERLAP_HELD,
                    "a run of this schedule is still in flight; the event waits for it",
                    metadata={"overlap_policy": "skip"},
                )
            return Decision(
                "skip",
                OVERLAP,
                "a run of this schedule is still in flight",
                metadata={"overlap_policy": "skip"},
            )

        rate_limit = schedule.rate_limit
        if rate_limit is not None:
            rate = await self.rates.check(sid, rate_limit, now=now)
            if not rate.allowed and not manual:
                return Decision(
                    "defer",
                    RATE_LIMIT,
                    f"rate limit reached ({rate.fires} fires in the last "
                    f"{rate_limit['window_sec']} s, at most {rate_limit['max_fires']})",
                    metadata={**rate_limit, "fires": rate.fires, "retry_at": rate.retry_at},
                )

        budget_usd, budget_tokens = schedule.budget_usd, schedule.budget_tokens
        if budget_usd is not None or budget_tokens is not None:
            if self.in_flight(sid):
                # Usage lands when a run ends: admitting a second fire before then could
                # overshoot the budget by more than one fire.
                return Decision(
                    "defer", BUDGET_PENDING, "waiting for the in-flight run's usage evidence"
                )
            cost, tokens = await schedule_spend(self._conn, sid)
            if (budget_usd is not None and cost >= float(budget_usd)) or (
                budget_tokens is not None and tokens >= int(budget_tokens)
            ):
                return Decision(
                    "disable",
                    BUDGET_EXHAUSTED,
                    f"budget exhausted: spent ${cost:.4f} and {tokens} tokens "
                    f"(budget_usd={budget_usd}, budget_tokens={budget_tokens})",
                    metadata={
                        "cost_usd": cost,
                        "tokens": tokens,
                        "budget_usd": budget_usd,
                        "budget_tokens": budget_tokens,
                    },
                )

        max_runs = schedule.max_runs
        if max_runs is not None:
            # Fires queued for any node's worker count in the database as soon as they commit.
            count = admitted_run_count if self._settings.scheduled_on_any_node else fired_run_count
            fired = await count(self._conn, sid) + self._claims.get(sid, 0)
            if fired >= int(max_runs):
                return Decision(
                    "disable",
                    MAX_RUNS,
                    f"max_runs reached ({fired} of {max_runs})",
                    metadata={"max_runs": max_runs, "fired": fired},
                )

        if not self.slot_free():
            return self._capacity()

        token = next(self._tokens)
        reservation = Reservation(
            admission=self,
            schedule_id=sid,
            token=token,
            path=path or ("manual" if manual else "scheduled"),
            since=now,
            max_runs_claim=max_runs is not None,
            slot=True,
        )
        self.running.setdefault(sid, {})[token] = reservation
        self.slots[token] = reservation
        if max_runs is not None:
            self._claims[sid] = self._claims.get(sid, 0) + 1
        if rate_limit is not None:
            self.rates.record(sid, now)
        return Decision("fire", reservation=reservation, context=context)
