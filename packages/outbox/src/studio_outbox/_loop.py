"""One delivery pass's loop: write steps pipelined with the sends they feed.

Each write step is one transaction, run in a single trip to the connection's thread: the
outcomes that finished since the last step, the changes decided without a send, and the
claims that refill the free send slots plus one row claimed ahead. A step runs while sends
are in flight, so at concurrency 1 the next row is already claimed when the current send
ends and its send starts at once, while the outcome of the one before is written.

Every outcome and claim stays a guarded change on ``(id, status, attempt)``; a step's changes
merely share the commit. A row claimed ahead waits at most for one slot to free; its send's
deadline counts from its claim, so the send still ends inside the claim lease.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import aiosqlite

import studio_state

from . import _claimant as claimant
from ._constants import CLAIM_LEASE_SECONDS, DELIVERING, EXPIRED, DispatchReason
from ._drive import Steps, is_busy, record, run_sync
from ._steps import Change, Claimed, DueRow, apply_changes, claim, decide_without_send, outcome
from .abc import DispatchEnvelope, Transport, TransportResult

logger = logging.getLogger("studio_outbox")

# A write step that finds the database locked by another process waits and tries again until
# it lands: an outcome that is not written would become a second send after the lease.
_BUSY_RETRY_FIRST = 0.05
_BUSY_RETRY_MAX = 1.0
_BUSY_LOG_EVERY = 10.0

# The loop stops waiting for any transport this long after the row's claim, comfortably inside
# the claim lease, so no other scanner can claim the row while its send may still be running.
TRANSPORT_DEADLINE_SECONDS = CLAIM_LEASE_SECONDS - 2.0

# A step that began this long after it was launched waited for the write lock: it reads the
# clock again (a claim's lease must count from when the claim lands).
_STALE_SECONDS = 0.5

# Rows claimed beyond the free send slots, so the next send need not wait for a write step.
CLAIM_AHEAD = 1

COUNT_KEYS = ("attempted", "delivered", "retried", "dead_letter", "expired")
COUNTED_AS = {
    DispatchReason.TRANSPORT_OK: "delivered",
    DispatchReason.AWAITING_ACK: "delivered",  # a successful send of a row awaiting its ack
    DispatchReason.RETRY_BACKOFF: "retried",
    DispatchReason.MAX_ATTEMPTS: "dead_letter",
    DispatchReason.ACK_TIMEOUT: "dead_letter",
    DispatchReason.EXPIRED_TTL: "expired",
    DispatchReason.GONE: "dead_letter",
}

Finished = list[tuple[Claimed, TransportResult]]
# A claimed row and the monotonic time by which its send must have ended.
Ready = tuple[Claimed, float]


def step_steps(
    now: float, decided: list[Change], finished: Finished, batch: list[DueRow], actor: str
) -> Steps[tuple[list[Change], list[Claimed]]]:
    """One write step's statements (inside the step's transaction)."""
    changes = list(decided)
    changes += [outcome(item, result, now) for item, result in finished]
    to_claim: list[DueRow] = []
    for row in batch:
        # Re-decided at claim time: a row may have expired while waiting for a slot.
        change = decide_without_send(row, now)
        if change is None:
            to_claim.append(row)
        else:
            changes.append(change)
    applied: list[Change] = []
    claimed: list[Claimed] = []
    transitions: list[studio_state.Transition] = []
    if changes:
        applied, transitions = yield from apply_changes(changes, now, actor)
    if to_claim:
        claimed, claim_transitions = yield from claim(to_claim, now, actor)
        transitions += claim_transitions
    yield from record(transitions)
    return applied, claimed


def _expired_unsent(item: Claimed) -> Change:
    """A row claimed ahead whose expiry passed before a send slot came free: never sent."""
    return Change(
        item.row.id,
        DELIVERING,
        item.attempt,
        EXPIRED,
        DispatchReason.EXPIRED_TTL,
        "expires_at passed before delivery",
    )


class Loop:
    """One delivery pass: refills up to ``concurrency`` sends as earlier ones finish."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        transport: Transport,
        read: Callable[[], float],
        actor: str,
        counts: dict[str, int],
        stop: asyncio.Event | None,
    ) -> None:
        self._conn = conn
        self._transport = transport
        self._read = read
        self._actor = actor
        self._counts = counts
        self._stop = stop

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    async def run(self, decided: list[Change], sendable: list[DueRow], concurrency: int) -> None:
        queue = collections.deque(sendable)
        ready: collections.deque[Ready] = collections.deque()
        in_flight: dict[asyncio.Future[TransportResult], Claimed] = {}
        finished: Finished = []
        unsent: list[Claimed] = []  # claimed ahead, expired before a slot came free
        writing: list[Claimed] = []  # the claims whose outcome the running step records
        step: asyncio.Future[list[Ready]] | None = None
        starting: list[Ready] = []  # taken from ready, their sends not yet started
        try:
            while True:
                # Claimed rows are sent even once stopping: their attempt is already spent.
                starting = []
                while ready and len(in_flight) + len(starting) < concurrency:
                    item, deadline = ready.popleft()
                    if item.row.expired(self._read()):
                        decided.append(_expired_unsent(item))
                        unsent.append(item)
                        continue
                    starting.append((item, deadline))
                if step is None:
                    wanted = concurrency + CLAIM_AHEAD - len(in_flight) - len(starting)
                    wanted -= len(ready)
                    free = 0 if self._stopping() else max(0, min(wanted, len(queue)))
                    batch = [queue.popleft() for _ in range(free)]
                    if decided or finished or batch:
                        # Read the step's time now, before the sends just started run.
                        at = (time.monotonic(), self._read())
                        step = asyncio.ensure_future(self._step(decided, finished, batch, at))
                        writing = [*unsent, *(item for item, _ in finished)]
                        decided, finished, unsent = [], [], []
                # The step is queued to the database thread before the sends start: a spawn
                # holds the event loop until the child has exec'd, and the step's statements
                # and commit run on the other thread meanwhile instead of after it.
                for item, deadline in starting:
                    self._counts["attempted"] += 1
                    in_flight[asyncio.ensure_future(self._send(item, deadline))] = item
                starting = []
                if step is None and not in_flight:
                    return
                waiting: set[asyncio.Future[Any]] = set(in_flight)
                if step is not None:
                    waiting.add(step)
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if step is not None and step in done:
                    claimed, step = step.result(), None
                    for item in writing:
                        claimant.release(item.row.id, item.attempt)
                    writing = []
                    for item, _ in claimed:
                        claimant.hold(item.row.id, item.attempt)
                    ready.extend(claimed)
                for future in [f for f in in_flight if f in done]:
                    finished.append((in_flight.pop(future), future.result()))
        except BaseException:
            pending: list[asyncio.Future[Any]] = [*in_flight]
            if step is not None:
                pending.append(step)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise
        finally:
            # Claims whose outcome was not recorded: this loop no longer holds them, so their
            # lease alone decides when they are sent again.
            unrecorded = [*in_flight.values(), *(item for item, _ in finished), *unsent]
            held = [*writing, *(item for item, _ in ready), *(item for item, _ in starting)]
            for item in [*unrecorded, *held]:
                claimant.release(item.row.id, item.attempt)

    async def _step(
        self,
        decided: list[Change],
        finished: Finished,
        batch: list[DueRow],
        at: tuple[float, float],
    ) -> list[Ready]:
        delay = _BUSY_RETRY_FIRST
        waiting_since: float | None = None
        logged = 0.0
        while True:
            try:
                applied, claimed, claimed_at = await self._write_step(decided, finished, batch, at)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                now = time.monotonic()
                if waiting_since is None:
                    waiting_since = logged = now
                elif now - logged >= _BUSY_LOG_EVERY:
                    logged = now
                    logger.warning(
                        "delivery: the database has been locked by another writer for %.0fs; "
                        "still waiting to record %d outcome(s)",
                        now - waiting_since,
                        len(finished),
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BUSY_RETRY_MAX)
                at = (time.monotonic(), self._read())
                continue
            self._count(applied)
            deadline = claimed_at + TRANSPORT_DEADLINE_SECONDS
            return [(item, deadline) for item in claimed]

    async def _write_step(
        self,
        decided: list[Change],
        finished: Finished,
        batch: list[DueRow],
        at: tuple[float, float],
    ) -> tuple[list[Change], list[Claimed], float]:
        # ``at`` (monotonic, clock) was read when the step was launched, so an outcome counts
        # from the end of its send even though the next send may already be running; a step
        # that then waited for the write lock reads the clock again, so a claim's lease
        # starts when the claim lands.
        read, actor = self._read, self._actor
        started, now = at

        def body(db: sqlite3.Connection) -> tuple[list[Change], list[Claimed], float]:
            claimed_at = time.monotonic()
            at = now if claimed_at - started < _STALE_SECONDS else read()
            applied, claimed = run_sync(db, step_steps(at, decided, finished, batch, actor))
            return applied, claimed, claimed_at

        return await studio_state.run_write_transaction(self._conn, body)

    def _count(self, applied: list[Change]) -> None:
        counts = self._counts
        for change in applied:
            counts[COUNTED_AS[change.reason_code]] += 1

    async def _send(self, item: Claimed, deadline: float) -> TransportResult:
        row = item.row
        envelope = DispatchEnvelope(row.id, row.kind, row.deliver_to, item.attempt, item.payload)
        failed = f"transport did not finish within {TRANSPORT_DEADLINE_SECONDS:g}s"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            # Claimed ahead and kept waiting for a slot until too close to its lease's end.
            return TransportResult.failure(f"{failed} of its claim (not started)")
        try:
            async with asyncio.timeout(remaining):
                result: object = await self._transport.send(envelope)
        except TimeoutError:
            return TransportResult.failure(failed)
        except Exception as exc:
            return TransportResult.failure(f"transport raised {type(exc).__name__}: {exc}")
        if not isinstance(result, TransportResult):
            return TransportResult.failure(
                f"transport returned {type(result).__name__}, not a TransportResult"
            )
        return result
