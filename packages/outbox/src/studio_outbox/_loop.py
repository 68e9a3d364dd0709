"""One delivery pass's loop: write steps pipelined with the sends they feed.

Each write step is one transaction, run in a single trip to the connection's thread: the
outcomes that finished since the last step, the changes decided without a send, and the
claims that refill the free send slots plus up to :data:`CLAIM_AHEAD` rows claimed ahead. A
step runs while sends are in flight, so the next row is already claimed when a send ends and
its send starts at once, while the outcomes of the ones before are written. Each of the
``concurrency`` send slots is one task that goes on to the next claimed row in the same turn
of the event loop as its send ended; an outcome carries the clock of that end, whenever the
step that records it runs.

Claims are refilled once the rows claimed ahead run low (no more than one per send slot
left), not after every send, and a finished send's outcome waits for that step, at most
:data:`OUTCOME_WAIT_SECONDS`: at concurrency 1 one step (one commit, one fsync) records the
outcomes of two sends and claims the next two, which halves the write cost of a delivery.

Every outcome and claim stays a guarded change on ``(id, status, attempt)``; a step's changes
merely share the commit. A send's deadline counts from its claim, so it ends inside the claim
lease. A row claimed ahead that waited :data:`RENEW_AFTER_SECONDS` for its slot (the sends
before it were slow) is not sent on its old claim: the next step renews the claim (guarded
the same way, a new lease and a new deadline) and the row is sent after that lands, or
dropped if the row changed meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiosqlite

import studio_state

from . import _claimant as claimant
from ._constants import CLAIM_LEASE_SECONDS, DELIVERING, EXPIRED, DispatchReason
from ._drive import Steps, TransitionRow, is_busy, record, run_sync
from ._steps import (
    Change,
    Claimed,
    DueRow,
    apply_changes,
    claim,
    decide_without_send,
    outcome,
    renew,
)
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
_UNFINISHED = f"transport did not finish within {TRANSPORT_DEADLINE_SECONDS:g}s"

# A step that began this long after it was launched waited for the write lock: it reads the
# clock again (a claim's lease must count from when the claim lands).
_STALE_SECONDS = 0.5

# Rows claimed beyond the free send slots, so the next send need not wait for a write step.
CLAIM_AHEAD = 3
# The longest a finished send's outcome waits for the step that refills the claims (it is
# written at once when nothing is left to claim, or when the loop is stopping).
OUTCOME_WAIT_SECONDS = 0.05
# A row claimed ahead that has waited this long for a slot has its claim renewed before its
# send starts, so every send starts with nearly its whole deadline ahead of it.
RENEW_AFTER_SECONDS = 1.0
_RENEW_BELOW = TRANSPORT_DEADLINE_SECONDS - RENEW_AFTER_SECONDS

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

# A finished send: its claim, its result and the clock when it ended (its outcome's time).
Finished = list[tuple[Claimed, TransportResult, float]]
# A claimed row and the monotonic time by which its send must have ended.
Ready = tuple[Claimed, float]
# What a write step applied, renewed and claimed, and when (monotonic) its claims landed.
StepResult = tuple[list[Change], list[Claimed], list[Claimed], float]


def step_steps(
    now: float,
    decided: list[Change],
    finished: Finished,
    batch: list[DueRow],
    actor: str,
    stale: Sequence[Claimed] = (),
) -> Steps[tuple[list[Change], list[Claimed], list[Claimed]]]:
    """One write step's statements (inside the step's transaction): the changes, the outcomes
    (each at the time its send ended), the renewals of ``stale`` claims and the new claims;
    returns what applied of each."""
    changes = list(decided)
    changes += [outcome(item, result, ended) for item, result, ended in finished]
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
    transitions: list[TransitionRow] = []
    if changes:
        applied, transitions = yield from apply_changes(changes, now, actor)
    renewed = (yield from renew(stale, now)) if stale else []
    if to_claim:
        claimed, claim_transitions = yield from claim(to_claim, now, actor)
        transitions += claim_transitions
    yield from record(transitions)
    return applied, renewed, claimed


def _drop_unrenewed(renewing: list[Claimed], renewed: list[Ready]) -> None:
    """Let go of waiting claims the step could not renew: the row changed while they waited
    (another party ended or reclaimed it), so this loop must not send it."""
    kept = {item.row.id for item, _ in renewed}
    for item in renewing:
        if item.row.id not in kept:
            claimant.release(item.row.id, item.attempt)
            logger.warning(
                "dispatch %s: attempt %d changed while it waited for a send slot; not sent",
                item.row.id,
                item.attempt,
            )


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
        slots: set[asyncio.Task[None]] = set()  # at most ``concurrency`` senders
        sending: dict[asyncio.Task[None], Claimed] = {}  # each slot's send in progress
        finished: Finished = []
        unsent: list[Claimed] = []  # claimed ahead, expired before a slot came free
        writing: list[Claimed] = []  # the claims whose outcome the running step records
        stale: list[Claimed] = []  # claimed ahead, waited too long: the next step renews them
        renewing: list[Claimed] = []  # the stale claims the running step renews
        step: asyncio.Future[tuple[list[Ready], list[Ready]]] | None = None
        starting: list[Ready] = []  # taken from ready for new slots, not yet started
        finished_at = 0.0  # when the oldest outcome in ``finished`` came in (monotonic)
        loop = asyncio.get_running_loop()
        wake: asyncio.Future[None] = loop.create_future()

        def wake_up(_: object = None) -> None:
            if not wake.done():
                wake.set_result(None)

        def take() -> Ready | None:
            """The next claimed row to send, if any (a row that expired or waited too long
            for a slot is set aside for the next step instead)."""
            while ready:
                item, deadline = ready.popleft()
                if item.row.expired(self._read()):
                    decided.append(_expired_unsent(item))
                    unsent.append(item)
                elif deadline - time.monotonic() < _RENEW_BELOW:
                    stale.append(item)
                else:
                    return item, deadline
            return None

        async def slot(item: Claimed, deadline: float) -> None:
            # A slot goes straight on to the next claimed row when a send ends, in the same
            # turn of the event loop, and wakes the loop below to write the outcome.
            nonlocal finished_at
            me = asyncio.current_task()
            assert me is not None
            while True:
                self._counts["attempted"] += 1
                sending[me] = item
                result = await self._send(item, deadline)
                del sending[me]
                if not finished:
                    finished_at = time.monotonic()
                finished.append((item, result, self._read()))
                wake_up()
                following = take()
                if following is None:
                    return
                item, deadline = following

        try:
            while True:
                # Claimed rows are sent even once stopping: their attempt is already spent.
                starting = []
                while len(slots) + len(starting) < concurrency and (following := take()):
                    starting.append(following)
                if step is None:
                    free, left = 0, len(ready) + len(stale)
                    if left <= concurrency and not self._stopping():
                        # Refilled once the rows claimed ahead run low: one step claims several.
                        wanted = concurrency + CLAIM_AHEAD - len(sending) - len(starting) - left
                        free = max(0, min(wanted, len(queue)))
                    batch = [queue.popleft() for _ in range(free)]
                    flush = bool(finished) and (
                        not queue
                        or self._stopping()
                        or not (sending or starting)
                        or time.monotonic() - finished_at >= OUTCOME_WAIT_SECONDS
                    )
                    if decided or batch or stale or flush:
                        at = (time.monotonic(), self._read())
                        step = asyncio.ensure_future(
                            self._step(decided, finished, batch, stale, at)
                        )
                        step.add_done_callback(wake_up)
                        writing = [*unsent, *(item for item, _, _ in finished)]
                        renewing = stale
                        decided, finished, unsent, stale = [], [], [], []
                # New slots start after the step is queued to the database thread: their
                # spawns hold the event loop, and the step's claims and commit run meanwhile.
                # (A slot that goes on to its next row spawns before the loop wakes here.)
                for following in starting:
                    task = asyncio.ensure_future(slot(*following))
                    sending[task] = following[0]  # until its first send starts
                    task.add_done_callback(wake_up)
                    slots.add(task)
                starting = []
                if step is None and not slots:
                    return
                if step is None and finished:
                    timeout = max(0.0, finished_at + OUTCOME_WAIT_SECONDS - time.monotonic())
                    await asyncio.wait((wake,), timeout=timeout)
                elif not wake.done():
                    await wake
                wake = loop.create_future()
                for task in [task for task in slots if task.done()]:
                    slots.discard(task)
                    task.result()  # a slot that failed (it never should) ends the pass
                if step is not None and step.done():
                    (renewed, claimed), step = step.result(), None
                    for item in writing:
                        claimant.release(item.row.id, item.attempt)
                    writing = []
                    _drop_unrenewed(renewing, renewed)
                    renewing = []
                    for item, _ in claimed:
                        claimant.hold(item.row.id, item.attempt)
                    ready.extendleft(reversed(renewed))  # they were next before they waited
                    ready.extend(claimed)
        except BaseException:
            pending: list[asyncio.Future[Any]] = [*slots]
            if step is not None:
                pending.append(step)
            for future in pending:
                future.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise
        finally:
            # Claims whose outcome was not recorded: this loop no longer holds them, so their
            # lease alone decides when they are sent again.
            unrecorded = [*sending.values(), *(item for item, _, _ in finished), *unsent]
            held = [*writing, *renewing, *stale, *(item for item, _ in [*ready, *starting])]
            for item in [*unrecorded, *held]:
                claimant.release(item.row.id, item.attempt)

    async def _step(
        self,
        decided: list[Change],
        finished: Finished,
        batch: list[DueRow],
        stale: list[Claimed],
        at: tuple[float, float],
    ) -> tuple[list[Ready], list[Ready]]:
        """Run one write step until it lands; the renewed and the new claims, with deadlines."""
        delay = _BUSY_RETRY_FIRST
        waiting_since: float | None = None
        logged = 0.0
        while True:
            try:
                applied, renewed, claimed, claimed_at = await self._write_step(
                    decided, finished, batch, stale, at
                )
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
            return [(item, deadline) for item in renewed], [(item, deadline) for item in claimed]

    async def _write_step(
        self,
        decided: list[Change],
        finished: Finished,
        batch: list[DueRow],
        stale: list[Claimed],
        at: tuple[float, float],
    ) -> StepResult:
        # An outcome carries the clock of its send's end, though the next send may already
        # be running. ``at`` (monotonic, clock) was read when the step was launched; a step
        # that then waited for the write lock reads the clock again, so a claim's lease
        # starts when the claim lands.
        read, actor = self._read, self._actor
        started, now = at

        def body(db: sqlite3.Connection) -> StepResult:
            claimed_at = time.monotonic()
            at = now if claimed_at - started < _STALE_SECONDS else read()
            steps = step_steps(at, decided, finished, batch, actor, stale)
            applied, renewed, claimed = run_sync(db, steps)
            return applied, renewed, claimed, claimed_at

        return await studio_state.run_write_transaction(self._conn, body)

    def _count(self, applied: list[Change]) -> None:
        counts = self._counts
        for change in applied:
            counts[COUNTED_AS[change.reason_code]] += 1

    async def _send(self, item: Claimed, deadline: float) -> TransportResult:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            # Claimed ahead and kept waiting for a slot until too close to its lease's end.
            return TransportResult.failure(f"{_UNFINISHED} of its claim (not started)")
        return await send_once(self._transport, item, remaining)


async def send_once(transport: Transport, item: Claimed, timeout: float) -> TransportResult:
    """Send one claimed row through ``transport``, stopping after ``timeout`` seconds.

    Whatever the transport does (returns, raises, hangs, returns something else) ends as a
    :class:`TransportResult`, so every claim gets its outcome recorded.
    """
    row = item.row
    envelope = DispatchEnvelope(row.id, row.kind, row.deliver_to, item.attempt, item.payload)
    try:
        async with asyncio.timeout(timeout):
            result: object = await transport.send(envelope)
    except TimeoutError:
        return TransportResult.failure(_UNFINISHED)
    except Exception as exc:
        return TransportResult.failure(f"transport raised {type(exc).__name__}: {exc}")
    if not isinstance(result, TransportResult):
        return TransportResult.failure(
            f"transport returned {type(result).__name__}, not a TransportResult"
        )
    return result
