"""The ``at`` one-shot trigger: one occurrence at the schedule's instant, then disabled.

The instant is the ``at`` column (RFC 3339 with an explicit offset, kept as the operator wrote
it); ``next_fire_at`` holds it until it fires. The occurrence transaction that consumes it (a
fire, or a skip) also disables the schedule (``schedule.disabled.once``): the claim's updates
carry the disable (:func:`consumed_updates`), and the occurrence writer records its transition
row and notification in that same transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Final

import aiosqlite

from .._records.codec import ColumnValue
from .._records.schedule import Schedule
from ..abc import Occurrence

ONCE: Final = "schedule.disabled.once"
"""The reason code of a one-shot schedule disabled by its fire."""
ONCE_SUMMARY: Final = "an 'at' schedule fires once: disabled after its fire"

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})"
)


def parse_at(value: str) -> float:
    """The epoch seconds of an RFC 3339 instant with an explicit offset (``Z`` or ``±hh:mm``).

    :class:`ValueError` for anything else (a date alone, no offset, an impossible date).
    """
    text = value.strip()
    if not _RFC3339.fullmatch(text):
        raise ValueError(
            f"must be an RFC 3339 instant with an explicit offset "
            f"(e.g. 2027-01-05T09:00:00+01:00), got {value!r}"
        )
    head, dot, rest = text.partition(".")
    if dot:  # fromisoformat takes at most 6 fractional digits
        digits = re.match(r"\d+", rest)
        frac = digits.group(0) if digits else ""
        text = f"{head}.{frac[:6].ljust(6, '0')}{rest[len(frac) :]}"
    try:
        instant = datetime.fromisoformat(text.replace("z", "Z").replace("t", "T"))
    except ValueError as exc:
        raise ValueError(f"is not a valid instant: {exc}") from None
    return instant.timestamp()


class OnceTrigger:
    """``at``: a single occurrence at ``next_fire_at``; its fire disables the schedule."""

    trigger_type = "at"
    missed_fire_applies = True

    def next_fire_at(
        self, schedule: Schedule, *, due: float | None, now: float, timezone: str
    ) -> float | None:
        """Never again: the one occurrence has been handled."""
        return None

    async def occurrences(
        self,
        conn: aiosqlite.Connection,
        schedule: Schedule,
        *,
        now: float,
        timezone: str,
    ) -> list[Occurrence]:
        """The single occurrence, whose transaction disables the schedule."""
        due = schedule.next_fire_at
        context = {"scheduled": True, "fired_at": now, "due_at": due, "at": schedule.at}
        return [Occurrence(schedule=schedule, due_at=due, trigger_context=context)]


def consumed_updates(schedule: Schedule) -> Mapping[str, ColumnValue]:
    """The schedule columns an occurrence transaction that consumes ``schedule``'s due time
    also writes: an ``at`` schedule is disabled (fired, skipped or missed alike)."""
    if schedule.trigger_type == "at":
        return {"enabled": 0, "disabled_reason": ONCE}
    return {}
