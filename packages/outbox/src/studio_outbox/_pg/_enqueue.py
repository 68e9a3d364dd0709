"""The producer side on PostgreSQL: enqueue inside the producer's own transaction.

The validation and the SQL are the SQLite path's own (``studio_outbox._enqueue``); this module
only drives them on a psycopg (async or sync) or asyncpg connection. The insert fires the
``NOTIFY`` that wakes waiting deliverers, delivered when the producer's transaction commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from studio_state import Clock, system_clock

from .._constants import DEFAULT_ACTOR, DEFAULT_MAX_ATTEMPTS
from .._enqueue import NewRow, insert_steps, validate, validate_items
from ._drive import run_in_transaction_async, run_in_transaction_sync

if TYPE_CHECKING:
    import psycopg


def _row(
    kind: str,
    deliver_to: str,
    body: dict[str, Any] | None,
    dedup_key: str | None,
    ack_required: bool,
    max_attempts: int,
    expires_at: float | None,
    session_id: str | None,
    schedule_run_id: str | None,
) -> NewRow:
    return validate(
        kind=kind,
        deliver_to=deliver_to,
        body=body,
        dedup_key=dedup_key,
        ack_required=ack_required,
        max_attempts=max_attempts,
        expires_at=expires_at,
        session_id=session_id,
        schedule_run_id=schedule_run_id,
    )


async def enqueue_dispatch(
    conn: Any,
    *,
    kind: str,
    deliver_to: str,
    body: dict[str, Any] | None = None,
    dedup_key: str | None = None,
    ack_required: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    expires_at: float | None = None,
    session_id: str | None = None,
    schedule_run_id: str | None = None,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> str:
    """Add a ``pending`` dispatch on PostgreSQL and return its id.

    ``conn`` is a psycopg ``AsyncConnection`` or an asyncpg connection. When it has a
    transaction open (the producer's own), the row and its ``dispatch.pending.enqueued``
    transition are written into it and commit or roll back with the producer's change;
    otherwise they commit in a transaction of their own. A ``dedup_key`` that already exists
    returns the existing row's id and writes nothing, also when another connection enqueues the
    same key at the same moment (the second waits for the first to commit). Bad arguments raise
    :class:`InvalidDispatch` before anything is written.
    """
    row = _row(
        kind,
        deliver_to,
        body,
        dedup_key,
        ack_required,
        max_attempts,
        expires_at,
        session_id,
        schedule_run_id,
    )
    ids = await run_in_transaction_async(conn, insert_steps([row], clock(), actor or DEFAULT_ACTOR))
    return ids[0]


async def enqueue_many(
    conn: Any,
    items: Iterable[Mapping[str, Any]],
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> list[str]:
    """Enqueue several dispatches in one transaction on PostgreSQL; ids in order.

    The same rules as :func:`studio_outbox.enqueue_many`: every item is validated first
    (fields prefixed ``items[i].``), and dedup applies across the database and the batch.
    """
    rows = validate_items(items)
    if not rows:
        return []
    return await run_in_transaction_async(conn, insert_steps(rows, clock(), actor or DEFAULT_ACTOR))


def enqueue_dispatch_sync(
    conn: psycopg.Connection[Any],
    *,
    kind: str,
    deliver_to: str,
    body: dict[str, Any] | None = None,
    dedup_key: str | None = None,
    ack_required: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    expires_at: float | None = None,
    session_id: str | None = None,
    schedule_run_id: str | None = None,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> str:
    """:func:`enqueue_dispatch` on a psycopg (sync) ``Connection``, joining its open
    transaction the same way."""
    row = _row(
        kind,
        deliver_to,
        body,
        dedup_key,
        ack_required,
        max_attempts,
        expires_at,
        session_id,
        schedule_run_id,
    )
    return run_in_transaction_sync(conn, insert_steps([row], clock(), actor or DEFAULT_ACTOR))[0]


def enqueue_many_sync(
    conn: psycopg.Connection[Any],
    items: Iterable[Mapping[str, Any]],
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> list[str]:
    """:func:`enqueue_many` on a psycopg (sync) ``Connection``."""
    rows = validate_items(items)
    if not rows:
        return []
    return run_in_transaction_sync(conn, insert_steps(rows, clock(), actor or DEFAULT_ACTOR))
