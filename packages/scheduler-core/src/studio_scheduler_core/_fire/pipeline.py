"""The fire pipeline every path shares: reserve → prepare → commit → release on failure → start.

A scheduled occurrence, a manual fire, a follow-up and a claimed ad-hoc run differ only in
their hold (admission's reservation, the ad-hoc worker's slot, none for a follow-up), their
commit (the occurrence transaction guarded on the schedule row, or the guarded claim of a
queued row) and what starts the committed fire. :func:`stage` and :func:`commit_steps` are
the sequence (:func:`run_steps` for one fire); :func:`stage_fire` and :func:`commit_fires` are
it for schedule fires, which an evaluation pass commits as one batch, and :func:`fire` for one.
A stored row that waits to start (a due retry, a buffered occurrence: a :class:`Waiting`) is
the third source: :func:`fire_waiting` prepares it under its reservation and commits it with
:func:`~studio_scheduler_core._fire.waiting.commit_waiting`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .._admission.gates import Reservation
from .._observe.events import emit
from .._records.run import Run
from .._records.schedule import Schedule
from .commit import commit_batch
from .env import FireEnv, Prepared
from .occurrence import ScheduleClaim
from .prepare import prepare
from .waiting import commit_waiting, prepare_row


class Hold(Protocol):
    """What a fire holds from its reservation until it ends; released idempotently."""

    run_id: str | None

    def release(self) -> None:
        """Give back everything held."""


H = TypeVar("H", bound=Hold)

StartFire = Callable[[Prepared, Reservation | None], None]


@dataclass
class Staged(Generic[H]):
    """A prepared fire under its hold, waiting for its commit (alone or in a batch)."""

    prepared: Prepared
    hold: H | None
    claim: ScheduleClaim | None = None


def stage(
    prepare_step: Callable[[], Prepared],
    hold: H | None,
    claim_step: Callable[[], ScheduleClaim] | None = None,
) -> Staged[H]:
    """Prepare one fire under ``hold`` (and build its claim); ``hold`` is released if either
    raises."""
    try:
        prepared = prepare_step()
        if hold is not None:
            hold.run_id = prepared.run_id
        claim = None if claim_step is None else claim_step()
    except BaseException:
        if hold is not None:
            hold.release()
        raise
    return Staged(prepared, hold, claim)


async def commit_steps(
    staged: Sequence[Staged[H]],
    commit_step: Callable[[Sequence[Staged[H]]], Awaitable[Sequence[bool]]],
    start: Callable[[Prepared, H | None], None] | None = None,
) -> list[Prepared | None]:
    """Commit staged fires (``commit_step`` says, per fire, whether its guard held) and start
    the committed ones; ``None`` at the index of a fire whose guard was lost.

    Every hold is released when the commit raises; a lost fire's hold is released; a committed
    fire's hold passes with it to ``start`` (which then owns it). Without ``start`` the
    committed fires are returned for the caller to run (a follow-up, inline).
    """
    try:
        won = await commit_step(staged)
    except BaseException:
        for item in staged:
            if item.hold is not None:
                item.hold.release()
        raise
    fired: list[Prepared | None] = []
    for item, landed in zip(staged, won, strict=True):
        if not landed:
            if item.hold is not None:
                item.hold.release()
            fired.append(None)
            continue
        if start is not None:
            start(item.prepared, item.hold)
        fired.append(item.prepared)
    return fired


async def run_steps(
    prepare_step: Callable[[], Prepared],
    commit_step: Callable[[Prepared], Awaitable[bool]],
    hold: H | None,
    start: Callable[[Prepared, H | None], None] | None = None,
) -> Prepared | None:
    """Prepare and commit one fire under ``hold``; ``None`` when the commit's guard was lost
    (:func:`stage` then :func:`commit_steps` for a batch of one)."""

    async def commit_one(items: Sequence[Staged[H]]) -> list[bool]:
        return [await commit_step(item.prepared) for item in items]

    return (await commit_steps([stage(prepare_step, hold)], commit_one, start))[0]


def stage_fire(
    env: FireEnv,
    schedule: Schedule,
    context: Mapping[str, Any],
    *,
    kind: str,
    claim: Callable[[], ScheduleClaim],
    reservation: Reservation | None,
    chain_depth: int = 0,
    chain_parent_id: str | None = None,
) -> Staged[Reservation]:
    """Prepare one fire of ``schedule`` under its reservation, for :func:`commit_fires`.

    ``claim`` is built after preparing: computing it (the next cadence value) may raise, and
    the reservation must be released then too.
    """

    def prepare_step() -> Prepared:
        return prepare(
            env,
            schedule,
            context,
            kind=kind,
            chain_depth=chain_depth,
            chain_parent_id=chain_parent_id,
        )

    return stage(prepare_step, reservation, claim)


async def commit_fires(
    env: FireEnv, staged: Sequence[Staged[Reservation]], start: StartFire | None = None
) -> list[Prepared | None]:
    """Commit staged schedule fires in ONE occurrence transaction (each under its own claim),
    then start the committed ones; ``None`` at the index of a fire whose claim was lost."""

    async def commit_step(items: Sequence[Staged[Reservation]]) -> list[bool]:
        pairs = [(item.prepared, item.claim) for item in items if item.claim is not None]
        if len(pairs) != len(items):
            raise ValueError("a staged schedule fire has no claim")
        won = await commit_batch(env, pairs)
        for item, landed in zip(items, won, strict=True):
            if landed:
                kind = item.prepared.kind
                fire_event(item.prepared, claim_due(env, item.prepared.trigger_context, kind))
        return won

    return await commit_steps(staged, commit_step, start)


async def fire(
    env: FireEnv,
    schedule: Schedule,
    context: Mapping[str, Any],
    *,
    kind: str,
    claim: Callable[[], ScheduleClaim],
    reservation: Reservation | None,
    start: StartFire | None = None,
    chain_depth: int = 0,
    chain_parent_id: str | None = None,
) -> Prepared | None:
    """One fire of ``schedule``: :func:`stage_fire` then :func:`commit_fires` for a batch of
    one; ``None`` when the claim was lost."""
    staged = stage_fire(
        env,
        schedule,
        context,
        kind=kind,
        claim=claim,
        reservation=reservation,
        chain_depth=chain_depth,
        chain_parent_id=chain_parent_id,
    )
    return (await commit_fires(env, [staged], start))[0]


@dataclass(frozen=True, slots=True)
class Waiting:
    """A stored run row waiting to start: a due retry (``previous`` ``retry_wait``) or a
    buffered occurrence (``waiting_dependency``); ``fired`` is the (reason code, summary) of
    its start and ``lag`` the seconds its fire event reports."""

    row: Run
    kind: str
    previous: str
    fired: tuple[str, str]
    lag: float = 0.0


async def fire_waiting(
    env: FireEnv,
    schedule: Schedule,
    waiting: Waiting,
    reservation: Reservation,
    start: StartFire,
) -> Prepared | None:
    """Start one waiting row of ``schedule`` under ``reservation``: prepare it, commit it
    guarded on its previous status, start it; ``None`` (the reservation released) when the
    guard was lost."""
    try:
        fire = await prepare_row(env, schedule, waiting.row, kind=waiting.kind)
    except BaseException:
        reservation.release()
        raise

    async def commit_step(prepared: Prepared) -> bool:
        won = await commit_waiting(
            env, prepared, env.clock(), previous=waiting.previous, fired=waiting.fired
        )
        if won:
            fire_event(prepared, waiting.lag)
        return won

    return await run_steps(lambda: fire, commit_step, reservation, start)


def claim_due(env: FireEnv, context: Mapping[str, Any], kind: str) -> float:
    """Seconds from the occurrence's due time to now (0 for manual fires and follow-ups)."""
    if kind in ("manual", "follow_up"):
        return 0.0
    due = context.get("due_at", context.get("missed_fire_at"))
    if isinstance(due, int | float) and not isinstance(due, bool):
        return max(0.0, env.clock() - float(due))
    return 0.0


def fire_event(prepared: Prepared, lag: float) -> None:
    """The log event of a committed fire."""
    sid = prepared.schedule.id
    emit(
        "fire",
        f"fired schedule {sid} as run {prepared.run_id} ({prepared.kind}, lag {lag:.3f}s)",
        schedule_id=sid,
        run_id=prepared.run_id,
        kind=prepared.kind,
        lag_seconds=lag,
    )
