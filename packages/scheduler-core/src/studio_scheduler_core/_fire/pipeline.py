"""The fire pipeline every path shares: reserve → prepare → commit → release on failure → start.

A scheduled occurrence, a manual fire, a follow-up and a claimed ad-hoc run differ only in
their hold (admission's reservation, the ad-hoc worker's slot, none for a follow-up), their
commit (the occurrence transaction guarded on the schedule row, or the guarded claim of a
queued row) and what starts the committed fire. :func:`run_steps` is the sequence;
:func:`fire` is it for a schedule's fire.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from .._admission.gates import Reservation
from .._observe.events import emit
from .commit import commit
from .env import FireEnv, Prepared
from .occurrence import ScheduleClaim
from .prepare import prepare


class Hold(Protocol):
    """What a fire holds from its reservation until it ends; released idempotently."""

    run_id: str | None

    def release(self) -> None:
        """Give back everything held."""


H = TypeVar("H", bound=Hold)

StartFire = Callable[[Prepared, Reservation | None], None]


async def run_steps(
    prepare_step: Callable[[], Prepared],
    commit_step: Callable[[Prepared], Awaitable[bool]],
    hold: H | None,
    start: Callable[[Prepared, H | None], None] | None = None,
) -> Prepared | None:
    """Prepare and commit one fire under ``hold``; ``None`` when the commit's guard was lost.

    ``hold`` (if any) is released when preparing or committing raises or the guard is lost;
    otherwise it passes with the fire to ``start`` (which then owns it). Without ``start`` the
    committed fire is returned for the caller to run (a follow-up, inline).
    """
    try:
        prepared = prepare_step()
        if hold is not None:
            hold.run_id = prepared.run_id
        won = await commit_step(prepared)
    except BaseException:
        if hold is not None:
            hold.release()
        raise
    if not won:
        if hold is not None:
            hold.release()
        return None
    if start is not None:
        start(prepared, hold)
    return prepared


async def fire(
    env: FireEnv,
    schedule: Mapping[str, Any],
    context: Mapping[str, Any],
    *,
    kind: str,
    claim: Callable[[], ScheduleClaim],
    reservation: Reservation | None,
    start: StartFire | None = None,
    chain_depth: int = 0,
    chain_parent_id: str | None = None,
) -> Prepared | None:
    """One fire of ``schedule`` through :func:`run_steps`; ``None`` when the claim was lost.

    ``claim`` is built after preparing, inside the pipeline: computing it (the next cadence
    value) may raise, and the reservation must be released then too.
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

    async def commit_step(prepared: Prepared) -> bool:
        won = await commit(env, prepared, claim())
        if won:
            fire_event(prepared, claim_due(env, context, kind))
        return won

    return await run_steps(prepare_step, commit_step, reservation, start)


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
    sid = str(prepared.schedule["id"])
    emit(
        "fire",
        f"fired schedule {sid} as run {prepared.run_id} ({prepared.kind}, lag {lag:.3f}s)",
        schedule_id=sid,
        run_id=prepared.run_id,
        kind=prepared.kind,
        lag_seconds=lag,
    )
