"""Usage evidence: the ``sessions`` row a child reports for its invocation."""

from __future__ import annotations

import math
import time
from typing import Any

import aiosqlite

from studio_state import Clock, new_id, write_transaction

from .._exceptions import ScheduleValidationError
from .._records.vocab import SESSION_STATUSES
from . import store


def _count(field: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScheduleValidationError(field, f"must be an integer >= 0, got {value!r}")
    return value


async def report_usage(
    conn: aiosqlite.Connection,
    *,
    invocation_id: str,
    status: str = "completed",
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cost_usd: float | None = None,
    clock: Clock = time.time,
) -> str:
    """Write one ``sessions`` row of usage evidence for ``invocation_id``; return its id.

    ``studio usage report`` calls this from inside a child (``$LIONAGI_INVOCATION_ID``). A
    terminal ``status`` stamps ``ended_at``. Unknown invocation or bad values raise
    :class:`ScheduleValidationError` naming the field, and nothing is written.
    """
    if not isinstance(invocation_id, str) or not invocation_id:
        raise ScheduleValidationError("invocation_id", "is required")
    if status not in SESSION_STATUSES:
        raise ScheduleValidationError("status", f"must be one of {', '.join(SESSION_STATUSES)}")
    tokens_in = _count("input_tokens", input_tokens)
    tokens_out = _count("output_tokens", output_tokens)
    if cost_usd is not None and (
        isinstance(cost_usd, bool)
        or not isinstance(cost_usd, int | float)
        or not math.isfinite(cost_usd)
        or cost_usd < 0
    ):
        raise ScheduleValidationError("cost_usd", f"must be a finite number >= 0, got {cost_usd!r}")
    now = clock()
    session_id = new_id()
    async with write_transaction(conn):
        started_at = await store.invocation_start(conn, invocation_id)
        if started_at is None:
            raise ScheduleValidationError(
                "invocation_id", f"no invocation {invocation_id!r} in this database"
            )
        await store.insert_session(
            conn,
            session_id=session_id,
            invocation_id=invocation_id,
            status=status,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cost_usd=None if cost_usd is None else float(cost_usd),
            started_at=started_at,
            ended_at=None if status == "running" else now,
            now=now,
        )
    return session_id
