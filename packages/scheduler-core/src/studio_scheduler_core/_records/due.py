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
        """The record of a due-scan row as read: exactly the :data:`DUE_COLUMNS` (its JSON
        columns decoded here).

        A busy tick builds 10,000 of them, so the row fills the instance's fields directly
        (as :func:`~.column.from_row` does, without its checks of which keys the row has:
        the scan selects these columns and no others).
        """
        if row["threshold_config"] is not None or row["rate_limit"] is not None:
            row = decode_schedule(row)  # the rare row with a JSON column set
        out = object.__new__(cls)
        out.__dict__.update(row)
        return out


DUE_COLUMNS = tuple(f.name for f in fields(DueSchedule))
"""The columns the due scan reads, in field order."""
