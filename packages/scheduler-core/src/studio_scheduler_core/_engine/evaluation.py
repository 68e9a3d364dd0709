"""The schedule-evaluation concern: due rows through the index, per-type sources, the gates.

Only due rows are read (``enabled = 1 AND next_fire_at <= now`` on the partial index, in
keyset batches, at most :data:`MAX_DUE_PER_TICK` per tick; a tick that stops at the cap resumes
where it stopped). Each row goes to the :class:`~studio_scheduler_core.abc.TriggerSource` of its
``trigger_type`` and each occurrence through admission. Capacity deferrals are recorded on
the 1st, 11th, 21st … consecutive deferral, batched into one transaction per batch; a fire
that passes over missed interval slots (coalescing them) is counted and recorded the same way
(``schedule.skipped.coalesced``).

While every global slot is taken, each finished child wakes the engine to fill the slot it
freed. Walking every due row again for each of those wake-ups costs a read per due row per
fire at saturation, and counts each waiting schedule deferred many times a second. So within
:data:`REFILL_SECONDS` of a full pass that met the cap, a pass is a *refill*: it stops at its
first capacity deferral without counting it, and reads the due rows in small batches (the
free slots plus :data:`REFILL_MARGIN`, doubling while rows take no slot) rather than a full
batch it would leave at its first row. A full pass (which counts and records every
deferral) runs at most once per :data:`REFILL_SECONDS` while the cap holds.

The fires admitted for cadence rows (one occurrence per row) are prepared as the pass goes
and committed together, in ONE occurrence transaction at the end of each batch of due rows
(each under its own claim on its schedule row), then started: one trip to the database
thread and one fsync for the batch instead of one transaction per fire. Their reservations
are taken at admission, so the gates see them while they wait.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import aiosqlite

from .._admission.gates import CAPACITY, Admission, Decision
from .._fire.env import FireEnv
from .._fire.occurrence import ScheduleClaim, skipped_run, write_skip
from .._fire.pipeline import StartFire, commit_fires, stage_fire
from .._fire.retry import next_retry_at
from .._observe.summary import coalesced_event
from .._policies.overlap import OverlapPolicies, Revoke
from .._records.due import DueSchedule
from .._records.schedule import Schedule
from .._triggers.once import consumed_updates
from .._triggers.registry import CadenceTrigger, TriggerRegistry
from ..abc import Occurrence, TriggerSource
from . import store
from .firebatch import MAX_FIRE_BATCH, FireBatch
from .jitter import fields_view, jitter_until
from .missed import missed_pass
from .records import PassRecords

logger = logging.getLogger("studio_scheduler_core")

BATCH = 1000
MAX_DUE_PER_TICK = 10_000
REFILL_SECONDS = 1.0
REFILL_MARGIN = 8


class Evaluator:
    """Evaluates due schedules and the startup missed-fire pass."""

    def __init__(
        self,
        env: FireEnv,
        admission: Admission,
        registry: TriggerRegistry,
        start_fire: StartFire,
        revoke: Revoke | None = None,
    ) -> None:
        self._overlap = OverlapPolicies(env, admission, start_fire, revoke)
        self._env = env
        self._admission = admission
        self._registry = registry
        self._start_fire = start_fire
        self._records = PassRecords()
        self.backoff: dict[str, float] = {}
        self.cursor: tuple[float, str] | None = None
        self.blocked = False
        self.more = False
        self._staged = FireBatch(env, start_fire)
        self._capped = False  # the last full pass met the global cap
        self._full_pass_at: float | None = None
        self._refill = False  # this pass stops at its first capacity deferral
        self._refilled = False  # ... and it did

    @property
    def coalesced_total(self) -> int:
        """Slots coalesced away since start (the health figure)."""
        return self._records.coalesced_total

    @property
    def timezone(self) -> str:
        """The zone cron expressions are read in."""
        return self._env.settings.timezone

    @property
    def conn(self) -> aiosqlite.Connection:
        """The engine's connection the passes read and write through."""
        return self._env.conn

    def source_for(self, trigger_type: str) -> TriggerSource | None:
        """The registered trigger source of ``trigger_type`` (``None``: not registered)."""
        return self._registry.get(trigger_type)

    async def flush_records(self, now: float) -> None:
        """Write what this pass recorded (coalesced slots, deferrals) and start a new record."""
        await self._records.flush(self._env.conn, now)

    async def due_rows(
        self, now: float, after: tuple[float, str] | None, limit: int
    ) -> list[DueSchedule]:
        """Due schedules of registered trigger types, in due order after the keyset ``after``."""
        types = self._registry.types()
        if not types:
            return []
        return await store.due_rows(self._env.conn, types, now, after, limit)

    async def next_due(self, now: float, target: float) -> float:
        """When schedules next need a tick: ``now`` if the last pass stopped at the cap, else
        the earliest ``next_fire_at`` (not in backoff; only future ones while capacity is
        blocked) or backoff end, if before ``target``."""
        if self.more:
            return now
        types = self._registry.types()
        if not types:
            return target
        skip = set(self.backoff)
        rows = await store.next_fire_rows(
            self._env.conn, types, floor=now if self.blocked else None, limit=len(skip) + 1
        )
        for sid, next_fire_at in rows:
            if sid not in skip:
                target = min(target, next_fire_at)
                break
        for until in self.backoff.values():
            target = min(target, until)
        retry_at = await next_retry_at(self._env.conn)
        return target if retry_at is None else min(target, max(now, retry_at))

    async def due_backlog(self, now: float) -> tuple[int, float]:
        """How many enabled schedules are due now, and how many seconds the oldest of them is
        behind its due time (0 when none is due): the health figures."""
        count, oldest = await store.due_backlog(self._env.conn, now)
        return count, 0.0 if oldest is None else max(0.0, now - oldest)

    async def evaluate(self, now: float) -> dict[str, int]:
        """One evaluation pass over due rows; returns counts by outcome."""
        counts: dict[str, int] = {}
        self.blocked = False
        self.more = False
        self.backoff = {k: v for k, v in self.backoff.items() if v > now}
        counts.update(await self._overlap.start_waiting(now))
        window = min(REFILL_SECONDS, self._env.settings.tick_seconds)
        last = self._full_pass_at
        self._refill = self._capped and last is not None and 0 <= now - last < window
        self._refilled = False
        if not self._refill:
            self._full_pass_at = now
            self._capped = False
        started_at = self.cursor
        try:
            cursor = await self._walk(now, started_at, counts)
        finally:
            self._refill = False
        if self._refilled:  # stopped at the cap: the next full pass resumes where this began
            self.blocked = True
            self.more = False
            cursor = started_at
        self.cursor = cursor if self.more or self._refilled else None
        await self._records.flush(self._env.conn, now)
        return counts

    async def _walk(
        self, now: float, cursor: tuple[float, str] | None, counts: dict[str, int]
    ) -> tuple[float, str] | None:
        seen = 0
        free = self._admission.cap - len(self._admission.slots)
        size = min(BATCH, max(0, free) + REFILL_MARGIN) if self._refill else BATCH
        while seen < MAX_DUE_PER_TICK:
            limit = min(size, MAX_DUE_PER_TICK - seen)
            rows = await self.due_rows(now, cursor, limit)
            if not rows:
                return None
            seen += len(rows)
            cursor = (rows[-1].next_fire_at, rows[-1].id)
            try:
                for row in rows:
                    outcome = await self._evaluate_row(row, now)
                    if self._refilled:
                        break
                    counts[outcome] = counts.get(outcome, 0) + 1
                    if len(self._staged) >= MAX_FIRE_BATCH:
                        await self._commit_staged(now, counts)
                await self._commit_staged(now, counts)
            finally:
                self._staged.drop()  # cancelled before their commit: release, write nothing
            if self._refilled or len(rows) < limit:
                return None
            size = min(BATCH, size * 2)
        self.more = True
        return cursor

    async def _commit_staged(self, now: float, counts: dict[str, int]) -> None:
        retry_at = now + self._env.settings.tick_seconds
        for occ, next_at, run_id in await self._staged.commit(counts, self.backoff, retry_at):
            self._coalesce(occ, next_at, run_id)

    def _coalesce(self, occ: Occurrence, next_at: float | None, run_id: str) -> None:
        slots = coalesced_event(fields_view(occ.schedule), occ.due_at, next_at)
        self._records.coalesce(occ, slots, next_at, run_id)

    async def _evaluate_row(self, row: DueSchedule, now: float) -> str:
        sid = row.id
        if sid in self.backoff:
            return "backoff"
        source = self._registry.get(row.trigger_type)
        if source is None:
            return "unhandled"
        if row.jitter_sec:
            until = await jitter_until(self._env.conn, row, now, timezone=self.timezone)
            if until is not None:
                self.backoff[sid] = until  # due, but its jittered start is still ahead
                return "jitter"
        if isinstance(source, CadenceTrigger):
            # One occurrence per row: when no gate before the slot can refuse and the slot is
            # full, the decision is known without reading the whole row (the 10k-due tick).
            deferred = self._admission.plain_capacity_deferral(row)
            if deferred is not None:
                self._defer(sid, row.action_kind, deferred)
                return "defer"
        try:
            schedule = await store.due_schedule(self._env.conn, sid, row.next_fire_at)
            if schedule is None:
                return "lost"  # changed since the scan: the next pass sees its new state
            occurrences = await source.occurrences(
                self._env.conn, schedule, now=now, timezone=self.timezone
            )
            outcome = "empty"
            batch = isinstance(source, CadenceTrigger)
            for occurrence in occurrences:
                outcome = await self.handle(source, occurrence, now, batch=batch)
                if outcome in ("defer", "disable", "lost"):
                    break
            return outcome
        except Exception as exc:
            problem = self._env.storage.failed(exc)
            if problem is None:
                logger.exception("evaluating schedule %s failed; retrying after a tick", sid)
            self.backoff[sid] = now + self._env.settings.tick_seconds
            return "error"

    def schedule_claim(
        self, source: TriggerSource, occ: Occurrence, now: float, *, advance: bool
    ) -> ScheduleClaim:
        """The claim on the occurrence's schedule row (its next due time when ``advance``)."""
        schedule = occ.schedule
        nxt = (
            source.next_fire_at(schedule, due=occ.due_at, now=now, timezone=self.timezone)
            if advance and occ.advance
            else None
        )
        return ScheduleClaim(
            "occurrence",
            schedule.id,
            due_at=occ.due_at,
            next_fire_at=nxt,
            set_next=advance and occ.advance,
            stamp_fired=False,
            updates={**occ.schedule_updates, **consumed_updates(schedule)}
            if advance and occ.advance
            else occ.schedule_updates,
            guards=occ.guards,
        )

    async def handle(
        self,
        source: TriggerSource,
        occ: Occurrence,
        now: float,
        *,
        kind: str = "scheduled",
        batch: bool = False,
    ) -> str:
        """Admit one occurrence and act on the decision; returns the outcome name.

        With ``batch`` an admitted fire is staged for the pass's shared commit (its outcome
        becomes ``lost`` there if its claim is lost) instead of committed here.
        """
        schedule = occ.schedule
        sid = schedule.id
        decided = await self._overlap.intercept(
            occ, lambda: self.schedule_claim(source, occ, now, advance=True), now
        )
        if decided is not None:  # buffered, or skipped with the buffer full
            return decided
        decision = await self._admission.admit(schedule, now=now, path=kind)
        if decision.outcome != "defer":
            self._records.admitted(sid)
        if decision.outcome == "fire":
            return await self._fire(source, occ, schedule, decision, now, kind, batch=batch)
        if decision.outcome == "defer":
            self._defer(sid, schedule.action_kind, decision)
            return "defer"
        if decision.outcome == "advance":
            claim = self.schedule_claim(source, occ, now, advance=True)
            claim = replace(claim, updates={**claim.updates, "last_evaluated_at": now})
            won = await write_skip(self._env.conn, claim=claim, run=None, transitions=(), now=now)
            return "advance" if won else "lost"
        run, transition = skipped_run(
            schedule_id=sid,
            action_kind=schedule.action_kind,
            reason_code=decision.reason_code,
            summary=decision.message,
            context={**occ.trigger_context, "skipped": decision.reason_code},
            now=now,
            metadata=decision.metadata,
        )
        if decision.outcome == "skip":
            claim = self.schedule_claim(source, occ, now, advance=True)
            won = await write_skip(
                self._env.conn, claim=claim, run=run, transitions=[transition], now=now
            )
            return "skip" if won else "lost"
        # disable: budget exhausted writes a skipped run; max_runs writes none. The refused
        # occurrence's own updates (a github cursor) stay unwritten: re-enabled, it fires.
        claim = replace(self.schedule_claim(source, occ, now, advance=False), updates={})
        with_run = decision.reason_code == "schedule.budget.exhausted"
        won = await write_skip(
            self._env.conn,
            claim=claim,
            run=run if with_run else None,
            transitions=[transition] if with_run else [],
            now=now,
            disable=(decision.reason_code, decision.message),
        )
        return "disable" if won else "lost"

    async def _fire(
        self,
        source: TriggerSource,
        occ: Occurrence,
        schedule: Schedule,
        decision: Decision,
        now: float,
        kind: str,
        *,
        batch: bool,
    ) -> str:
        claimed: list[ScheduleClaim] = []

        def claim() -> ScheduleClaim:
            claim = self.schedule_claim(source, occ, now, advance=True)
            updates = {**claim.updates, **decision.schedule_updates}
            claimed.append(claim)
            return replace(claim, stamp_fired=True, updates=updates)

        staged = stage_fire(
            self._env,
            schedule,
            {**occ.trigger_context, **decision.context},
            kind=kind,
            claim=claim,
            reservation=decision.reservation,
        )
        next_at = claimed[-1].next_fire_at
        if batch and kind == "scheduled":
            self._staged.add(staged, occ, next_at)
            return "fire"
        [fired] = await commit_fires(self._env, [staged], self._start_fire)
        if fired is None:
            return "lost"
        if kind == "scheduled":
            # A missed-fire catch-up (run_once) is its policy's one run for the whole
            # outage; coalescing records slots passed over while the scheduler runs.
            self._coalesce(occ, next_at, fired.run_id)
        return "fire"

    def _defer(self, schedule_id: str, action_kind: str, decision: Decision) -> None:
        if decision.reason_code == CAPACITY:
            if self._refill:
                self._refilled = True  # no slot left to fill: stop, count nothing
                return
            self._capped = True
        self.blocked = True
        self._records.defer(schedule_id, action_kind, decision)

    async def missed_fires(self, now: float) -> dict[str, int]:
        """Startup: apply each due row's missed_fire_policy once (skip, or run_once)."""
        return await missed_pass(self, now)
