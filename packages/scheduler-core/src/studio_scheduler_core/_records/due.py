"""The ``DueSchedule`` record: what the tick's due scan reads of each due schedule.

The scan reads a few columns of every due row (a tick may meet 10,000): enough to route the
row to its trigger source, to wait out its jitter and to decide a plain capacity deferral
without reading the rest. The full row is read, as a :class:`~.schedule.Schedule`, only for a
row that gets past those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .codec import decode_schedule
from .column import from_row
from .vocab import ActionKindName, OverlapPolicy, TriggerType


@dataclass(frozen=True, kw_only=True)
class DueSchedule:
    """A due ``schedules`` row as the due scan reads it: each field is the ``Schedule`` field
    of the same name, with its type (``next_fire_at`` is set: the row is due)."""

    id: str
    trigger_type: TriggerType
    next_fire_at: float
    action_kind: ActionKindName
    overlap_policy: OverlapPolicy
    threshold_config: Mapping[str, Any] | None = None
    max_runs: int | None = None
    budget_usd: float | None = None
    budget_tokens: int | None = None
    jitter_sec: int | None = None
    rate_limit: Mapping[str, Any] | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DueSchedule:
        """The record of a due-scan row as read (its JSON columns decoded)."""
        if row["threshold_config"] is not None or row["rate_limit"] is not None:
            row = decode_schedule(row)  # the rare row with a JSON column set
        return from_row(cls, row)


DUE_COLUMNS = tuple(f.name for f in fields(DueSchedule))
"""The columns the due scan reads, in field order."""
