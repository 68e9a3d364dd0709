"""The writes of an occurrence: one guarded transaction each.

A fire's invocation row, its run row, their transition rows and the cadence advance commit
together, guarded on the schedule's ``next_fire_at`` (the fires of one evaluation pass commit
in one transaction, each under its own guard); a lost guard means someone else handled
this occurrence and nothing is written. Skips, threshold no-fires and deferral records use the
same shape, so no path leaves half an occurrence behind.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiosqlite

from studio_state import (
    Transition,
    new_id,
    record_transitions,
    record_transitions_sync,
    run_sync,
    run_write_transaction,
    write_transaction,
)

from .._notify.service import notify_run, notify_schedule_disabled
from .._observe.events import emit
from .._records.codec import TERMINAL_RUN_STATUSES, ColumnValue, dumps
from .._records.counters import count_end_sync, count_fire_sync
from .._records.invocation import NewInvocation
from .._records.run import Run
from .._records.vocab import ENGINE_ACTOR
from .._schedules.store import drop_buffered
from .._triggers.once import ONCE, ONCE_SUMMARY
from . import store

DISABLE_SUMMARY = {ONCE: ONCE_SUMMARY}
"""The summary of each disable a claim carries."""

ClaimKind = Literal["occurrence", "manual", "follow_up"]


@dataclass(frozen=True, slots=True)
class ScheduleClaim:
    """What a write does to (and requires of) the schedule row.

    ``occurrence``: guarded on ``enabled = 1`` and ``next_fire_at = due_at`` (``guard_due``),
    writes ``next_fire_at`` (``set_next``) and ``last_fired_at``. ``manual``: writes only
    ``last_fired_at`` (a manual fire is not an occurrence and leaves the cadence alone).
    ``follow_up``: the schedule must still exist; nothing about it is written. ``updates`` are
    further columns written and ``guards`` further columns the write is guarded on (values as
    stored: ``None`` is SQL NULL).
    """

    kind: ClaimKind
    schedule_id: str
    due_at: float | None = None
    guard_due: bool = True
    next_fire_at: float | None = None
    set_next: bool = True
    stamp_fired: bool = True
    updates: Mapping[str, ColumnValue] = field(default_factory=dict)
    guards: Mapping[str, ColumnValue] = field(default_factory=dict)


def _claim_sets(
    claim: ScheduleClaim, now: float
) -> tuple[dict[str, ColumnValue], list[store.Guard]]:
    sets: dict[str, ColumnValue] = {"updated_at": now}
    if claim.stamp_fired:
        sets["last_fired_at"] = now
    guards: list[store.Guard] = []
    if claim.kind == "occurrence":
        if claim.set_next:
            sets["next_fire_at"] = claim.next_fire_at
        guards.append(("enabled", 1))
        if claim.guard_due:
            guards.append(("next_fire_at", claim.due_at))
    sets.update(claim.updates)
    guards.extend(claim.guards.items())
    return sets, guards


def claim_disable(claim: ScheduleClaim) -> str | None:
    """The reason code when ``claim`` disables its (enabled: guarded) schedule, e.g. an
    ``at`` schedule's one occurrence."""
    if claim.kind == "occurrence" and claim.updates.get("enabled") == 0:
        return str(claim.updates.get("disabled_reason") or "")
    return None


def _apply_claim_sync(db: sqlite3.Connection, claim: ScheduleClaim, now: float) -> bool:
    if claim.kind == "follow_up":
        return store.schedule_exists_sync(db, claim.schedule_id)
    won = store.update_schedule_sync(db, claim.schedule_id, *_claim_sets(claim, now))
    reason = claim_disable(claim)
    if won and reason is not None:
        # The disable rides on the claim: its transition row goes in the same transaction.
        record_transitions_sync(db, [_disabled_transition(claim.schedule_id, reason, now)])
    return won


def _disabled_transition(schedule_id: str, reason_code: str, now: float) -> Transition:
    return Transition(
        entity_type="schedule",
        entity_id=schedule_id,
        previous_status="enabled",
        status="disabled",
        reason_code=reason_code,
        reason_summary=DISABLE_SUMMARY.get(reason_code, reason_code),
        actor=ENGINE_ACTOR,
        created_at=now,
    )


async def _notify_claim_disables(
    conn: aiosqlite.Connection, claims: Sequence[ScheduleClaim], now: float
) -> None:
    for claim in claims:
        reason = claim_disable(claim)
        if reason is None:
            continue
        summary = DISABLE_SUMMARY.get(reason, reason)
        await notify_schedule_disabled(
            conn, claim.schedule_id, reason_code=reason, reason_summary=summary, now=now
        )
        emit(
            "disable",
            f"schedule {claim.schedule_id} disabled [{reason}]: {summary}",
            schedule_id=claim.schedule_id,
            reason_code=reason,
        )


async def _apply_claim(conn: aiosqlite.Connection, claim: ScheduleClaim, now: float) -> bool:
    """:func:`_apply_claim_sync` in one trip."""
    return await run_sync(conn, lambda db: _apply_claim_sync(db, claim, now))


@dataclass(frozen=True, slots=True)
class FireWrite:
    """The rows of one fire's occurrence transaction, written only if ``claim`` holds."""

    claim: ScheduleClaim
    run: Mapping[str, Any]
    invocation: NewInvocation | None
    transitions: Sequence[Transition]


def _write_fires(db: sqlite3.Connection, writes: Sequence[FireWrite], now: float) -> list[bool]:
    won = [False] * len(writes)
    # Schedule rows are taken in id order, the order every other writer of several schedule
    # rows uses, so two transactions on PostgreSQL cannot each hold a row the other waits for.
    for index in sorted(range(len(writes)), key=lambda i: writes[i].claim.schedule_id):
        write = writes[index]
        # Each fire keeps its own guard: a lost claim writes nothing of that fire, and the
        # others in the batch go on.
        if not _apply_claim_sync(db, write.claim, now):
            continue
        if write.invocation is not None:
            store.insert_invocation_sync(db, write.invocation)
        store.insert_run_sync(db, write.run)
        record_transitions_sync(db, write.transitions)
        top_level = not write.run.get("chain_depth") and not write.run.get("retry_of")
        count_fire_sync(db, write.claim.schedule_id, now, top_level=top_level)
        if write.run.get("status") in TERMINAL_RUN_STATUSES:
            count_end_sync(db, str(write.run["id"]), now)
        won[index] = True
    return won


async def commit_fires(
    conn: aiosqlite.Connection, writes: Sequence[FireWrite], *, now: float
) -> list[bool]:
    """The occurrence transaction of one or many fires: for each, claim + invocation + run +
    transitions, or nothing of it when its claim's guard was lost (``False`` at its index).

    All of them commit together in ONE transaction, one trip to the connection's thread (and
    one more per fire refused at setup: its ``failed`` run's notification is enqueued in the
    same transaction). An exception rolls back the whole batch.
    """
    if not writes:
        return []
    terminal = [w.run.get("status") in TERMINAL_RUN_STATUSES for w in writes]
    disables = any(claim_disable(w.claim) is not None for w in writes)
    if not any(terminal) and not disables:
        return await run_write_transaction(conn, lambda db: _write_fires(db, writes, now))
    async with write_transaction(conn):
        won = await run_write_transaction(conn, lambda db: _write_fires(db, writes, now))
        for write, landed, ended in zip(writes, won, terminal, strict=True):
            if landed and ended:
                await notify_run(conn, str(write.run["id"]), now=now)
        landed_claims = [w.claim for w, landed in zip(writes, won, strict=True) if landed]
        await _notify_claim_disables(conn, landed_claims, now)
        return won


def skipped_run(
    *,
    schedule_id: str,
    action_kind: str,
    reason_code: str,
    summary: str,
    context: Mapping[str, Any],
    now: float,
    metadata: Mapping[str, Any] | None = None,
) -> tuple[Run, Transition]:
    """A ``skipped`` run and its transition row (not yet written)."""
    run_id = new_id()
    run = Run(
        id=run_id,
        schedule_id=schedule_id,
        trigger_context=dict(context),
        action_kind=action_kind,
        action_args=[],
        status="skipped",
        chain_depth=0,
        fired_at=now,
        ended_at=now,
        created_at=now,
        updated_at=now,
        status_reason_code=reason_code,
        status_reason_summary=summary,
        status_evidence_refs=[{"kind": "schedule", "id": schedule_id}],
    )
    transition = Transition(
        entity_type="schedule_run",
        entity_id=run_id,
        status="skipped",
        reason_code=reason_code,
        reason_summary=summary,
        evidence_refs=[{"kind": "schedule", "id": schedule_id}],
        actor=ENGINE_ACTOR,
        metadata=metadata,
        created_at=now,
    )
    return run, transition


async def write_skip(
    conn: aiosqlite.Connection,
    *,
    claim: ScheduleClaim,
    run: Run | None,
    transitions: Sequence[Transition],
    now: float,
    disable: tuple[str, str] | None = None,
) -> bool:
    """A skip/no-fire in one transaction: the claim, an optional skipped run, an optional
    disable (``(reason_code, summary)``) with its ``schedule.disabled`` notification (a gate's
    disable notifies like every other disable). ``False`` (nothing written) when the claim is
    lost."""
    disabled = False
    async with write_transaction(conn):
        if not await _apply_claim(conn, claim, now):
            return False
        if run is not None:
            await store.insert_run(conn, run.to_row())
        rows = list(transitions)
        if disable is not None:
            reason_code, summary = disable
            disabled = await store.disable_schedule(
                conn, claim.schedule_id, reason_code=reason_code, now=now
            )
            if disabled:
                await drop_buffered(conn, claim.schedule_id, now=now)
                rows.append(
                    Transition(
                        entity_type="schedule",
                        entity_id=claim.schedule_id,
                        previous_status="enabled",
                        status="disabled",
                        reason_code=reason_code,
                        reason_summary=summary,
                        actor=ENGINE_ACTOR,
                        created_at=now,
                    )
                )
        await record_transitions(conn, rows)
        await _notify_claim_disables(conn, [claim], now)
        if disable is not None and disabled:
            # after the transition row: the dispatch's dedup key names it
            await notify_schedule_disabled(
                conn, claim.schedule_id, reason_code=disable[0], reason_summary=disable[1], now=now
            )
    if disable is not None and disabled:
        emit(
            "disable",
            f"schedule {claim.schedule_id} disabled [{disable[0]}]: {disable[1]}",
            level=logging.WARNING,
            schedule_id=claim.schedule_id,
            reason_code=disable[0],
        )
    return True


@dataclass(frozen=True, slots=True)
class Deferral:
    """One deferral record to write (a ``skipped`` run with the deferral's reason)."""

    schedule_id: str
    action_kind: str
    reason_code: str
    summary: str
    metadata: Mapping[str, Any]
    deferral_count: int
    count_key: str = "deferral_count"
    """The metadata key the count is written under (``coalesced_count`` for coalescing)."""


async def write_deferrals(
    conn: aiosqlite.Connection, records: Iterable[Deferral], *, now: float
) -> int:
    """Insert many deferral records and their transitions in ONE transaction (executemany).

    The hot path of a tick with thousands of due rows and no free slot: parameters are built
    directly (ids are hex, so the evidence JSON needs no encoder). A record whose schedule was
    deleted since the due scan is skipped (with its transition), not a foreign-key failure
    that would roll back the whole batch. Returns how many records were written.
    """
    items = sorted(records, key=lambda record: record.schedule_id)  # id order, as above
    if not items:
        return 0
    runs: list[tuple[Any, ...]] = []
    transitions: list[tuple[Any, ...]] = []
    contexts: dict[str, str] = {}
    metas: dict[int, str] = {}
    # 2 ids of 12 hex characters per record, from one urandom call.
    ids = os.urandom(12 * len(items)).hex()
    for index, record in enumerate(items):
        run_id = ids[24 * index : 24 * index + 12]
        transition_id = ids[24 * index + 12 : 24 * index + 24]
        context = contexts.get(record.reason_code)
        if context is None:
            context = contexts[record.reason_code] = (
                dumps({"deferred": record.reason_code, "fired_at": now}) or "{}"
            )
        key = id(record.metadata)  # records of one decision share its metadata dict
        meta = metas.get(key)
        if meta is None:
            meta = metas[key] = dumps(dict(record.metadata)) or "{}"
        count = f'"{record.count_key}":{int(record.deferral_count)}'
        metadata = f"{{{count}}}" if meta == "{}" else f"{meta[:-1]},{count}}}"
        evidence = f'[{{"id":"{record.schedule_id}","kind":"schedule"}}]'
        runs.append(
            (
                run_id,
                record.schedule_id,
                context,
                record.action_kind,
                now,
                now,
                now,
                now,
                record.reason_code,
                record.summary,
                evidence,
                record.schedule_id,
            )
        )
        transitions.append(
            (
                transition_id,
                run_id,
                record.reason_code,
                record.summary,
                evidence,
                ENGINE_ACTOR,
                metadata,
                now,
                run_id,
            )
        )
    async with write_transaction(conn):
        return await store.insert_deferrals(conn, runs, transitions)
