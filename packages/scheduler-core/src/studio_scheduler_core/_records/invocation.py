"""The ``invocations`` row a start inserts, as a record."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class NewInvocation:
    """The ``invocations`` row of a fire that starts (``failed`` at once when its setup was
    refused); its fields are the columns inserted, in column order."""

    id: str
    schedule_run_id: str
    skill: str
    status: str
    prompt: str | None
    started_at: float
    ended_at: float | None
    status_reason_code: str
    status_reason_summary: str | None
    created_at: float
    updated_at: float

    def params(self) -> tuple[Any, ...]:
        """The INSERT parameters, in :data:`INVOCATION_COLUMNS` order."""
        return tuple(getattr(self, name) for name in INVOCATION_COLUMNS)


INVOCATION_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(NewInvocation))
"""The columns a start inserts into ``invocations``."""
