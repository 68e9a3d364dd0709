"""The events the engine emits from summaries: start-up recovery and a delivery pass."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._recovery.orphans import OrphanReaper
from .events import emit


def recovery_event(recovered: int, reaper: OrphanReaper, missed: Mapping[str, int]) -> None:
    """``recovered N runs, killed M orphans, K missed fires skipped/run`` (always logged)."""
    skipped = int(missed.get("skip", 0))
    run = int(missed.get("fire", 0))
    emit(
        "recovery",
        f"recovered {recovered} runs, killed {reaper.signalled} orphans, "
        f"{skipped} missed fires skipped/{run} run",
        recovered=recovered,
        orphans_killed=reaper.signalled,
        missed_skipped=skipped,
        missed_run=run,
    )


def delivery_event(counts: Mapping[str, int], template: Sequence[str] | None) -> None:
    """One event per outcome of a delivery pass that did something."""
    # the pass mixes the argv and webhook transports; its counts do not say which
    transport = "all" if template is not None else "paused"
    for outcome in ("delivered", "retried", "dead_letter", "expired"):
        count = int(counts.get(outcome, 0))
        if count:
            emit(
                "delivery",
                f"dispatch delivery: {count} {outcome}",
                outcome=outcome,
                transport=transport,
                count=count,
            )
