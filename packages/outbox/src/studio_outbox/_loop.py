"""One delivery pass's loop, for either backend: write steps pipelined with the sends they feed.

Each write step is one transaction (on SQLite one trip to the connection's thread; on
PostgreSQL one short transaction that locks the rows it claims ``FOR UPDATE SKIP LOCKED``): the
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

import abc
import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from . import _claimant as claimant
from ._constants import CLAIM_LEASE_SECONDS, DELIVERING, EXPIRED, DispatchReason
from ._steps import Change, Claimed
from .abc import DispatchEnvelope, Transport, TransportResult

logger = logging.getLogger("studio_outbox")

# The loop stops waiting for any transport this long after the row's claim, comfortably inside
# the claim lease, so no other scanner can claim the row while its send may still be running.
TRANSPORT_DEADLINE_SECONDS = CLAIM_LEASE_SECONDS - 2.0
_UNFINISHED = f"transport did not finish within {TRANSPORT_DEADLINE_SECONDS:g}s"

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
# What the loop hands a write step to claim: the rows themselves (SQLite's pass scanned them
# first) or how many to take (PostgreSQL's step locks the rows as it claims them).
Batch = TypeVar("Batch")


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


class Loop(abc.ABC, Generic[Batch]):
    """One delivery pass: refills up to ``concurrency`` sends as earlier ones finish.

    A backend says how many rows may still be claimed (:meth:`_left`), sets aside the next
    ones for a step (:meth:`_take`) and runs a write step until it lands (:meth:`_step`).
    """

    def __init__(
        self,
        transport: Transport,
        read: Callable[[], float],
        actor: str,
        counts: dict[str, int],
        stop: asyncio.Event | None,
    ) -> None:
        self._transport = transport
        self._read = read
        self._actor = actor
        self._counts = counts
        self._stop = stop

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    @abc.abstractmethod
    def _left(self) -> int:
        """How many more rows this pass may claim (``0``: none)."""

    @abc.abstractmethod
    def _take(self, count: int) -> Batch:
        """The next ``count`` rows to claim (``count`` may be ``0``), for one step."""

    @abc.abstractmethod
    async def _step(
        self,
        decided: list[Change],
        finished: Finished,
        batch: Batch,
        stale: list[Claimed],
        at: tuple[float, float],
    ) -> tuple[list[Ready], list[Ready]]:
        """Run one write step until it lands: ``decided`` and the outcomes of ``finished``
        (each at its send's end), renewals of ``stale``, claims from ``batch``; ``at`` is
        (monotonic, clock) at launch. Returns the renewed and the new claims with their
        deadlines (monotonic), after counting what applied (:meth:`_count`)."""

    async def run(self, decided: list[Change], concurrency: int) -> None:
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
                        free = max(0, min(wanted, self._left()))
                    batch = self._take(free)
                    flush = bool(finished) and (
                        not self._left()
                        or self._stopping()
                        or not (sending or starting)
                        or time.monotonic() - finished_at >= OUTCOME_WAIT_SECONDS
                    )
                    if decided or free or stale or flush:
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

    def _count(self, applied: list[Change]) -> None:
        """Count the changes a step applied by what they mean (delivered, retried …)."""
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
