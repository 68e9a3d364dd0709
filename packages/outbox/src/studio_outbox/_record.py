"""The ``Dispatch`` record: one field per ``dispatch_outbox`` column, in column order.

The read views select its public columns; the API's response model follows its fields. Field
metadata: ``public=False`` keeps a column out of every view (the ack token is a secret between
the outbox and the consumer), ``json=True`` marks a column stored as JSON text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._constants import DispatchStatus


@dataclass(frozen=True, kw_only=True)
class Dispatch:
    """A ``dispatch_outbox`` row as the views return it (payload decoded, no ack token)."""

    id: str
    kind: str
    deliver_to: str
    payload: Mapping[str, Any] | None = field(default=None, metadata={"json": True})
    dedup_key: str | None = None
    status: DispatchStatus
    attempt: int
    max_attempts: int
    next_attempt_at: float | None = None
    ack_required: bool
    ack_token: str | None = field(default=None, metadata={"public": False})
    session_id: str | None = None
    schedule_run_id: str | None = None
    last_error: str | None = None
    created_at: float
    expires_at: float | None = None
    updated_at: float | None = None
    claimed_by: str | None = field(default=None, metadata={"public": False})
    """The delivery pass holding the claim (internal)."""


DISPATCH_COLUMNS = tuple(f.name for f in dataclasses.fields(Dispatch))
"""Every column of ``dispatch_outbox``, in order."""

PUBLIC_DISPATCH_COLUMNS = tuple(
    f.name for f in dataclasses.fields(Dispatch) if f.metadata.get("public", True)
)
"""The columns the read views return."""
