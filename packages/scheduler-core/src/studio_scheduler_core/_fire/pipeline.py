"""The fire pipeline every path shares: prepare → commit → release on failure → start.

A scheduled occurrence, a manual fire and a follow-up differ only in their claim (what the
occurrence transaction is guarded on and writes to the schedule row), their reservation
(admission's slot and claims; none for a follow-up) and what starts the committed fire.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._admission.gates import Reservation
from .._observe.events import emit
from .occurrence import ScheduleClaim
from .steps import FireEnv, Prepared, commit, prepare

StartFire = Callable[[Prepared, Reservation | None], None]


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
    """Prepare and commit one fire; ``None`` when the claim's guard was lost.

    ``claim`` is built after preparing, inside the pipeline: computing it (the next cadence
    value) may raise, and the reservation must be released then too.

    The reservation (if any) is released when preparing or committing raises or the guard is
    lost; otherwise it passes with the fire to ``start`` (which then owns it). Without
    ``start`` the committed fire is returned for the caller to run (a follow-up, inline).
    """
    try:
        prepared = prepare(
            env,
            schedule,
            context,
            kind=kind,
            chain_depth=chain_depth,
            chain_parent_id=chain_parent_id,
        )
        if reservation is not None:
            reservation.run_id = prepared.run_id
        won = await commit(env, prepared, claim())
    except BaseException:
        if reservation is not None:
            reservation.release()
        raise
    if not won:
        if reservation is not None:
            reservation.release()
        return None
    fire_event(prepared, claim_due(env, context, kind))
    if start is not None:
        start(prepared, reservation)
    return prepared


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
