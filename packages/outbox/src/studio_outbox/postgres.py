"""The outbox on PostgreSQL (``pip install 'studio-outbox[postgres]'``, psycopg 3).

Producers: :func:`enqueue_dispatch` / :func:`enqueue_many` take a psycopg ``AsyncConnection``
or an asyncpg connection, :func:`enqueue_dispatch_sync` / :func:`enqueue_many_sync` a psycopg
``Connection``; each joins the transaction the producer has open on it, exactly as the SQLite
functions do, and the enqueue wakes waiting deliverers (``NOTIFY``) when that transaction
commits. They are ``studio_outbox.enqueue_dispatch`` / ``enqueue_many`` and
``studio_outbox.sync``'s, which take these connections too (and SQLite's).

Delivery: :func:`deliver_due_dispatches` runs one pass with the SQLite outbox's statuses,
transitions, retries, backoff and dead letters; its claims lock rows with
``FOR UPDATE SKIP LOCKED``, so any number of deliverers on any number of machines drain one
table without sending a dispatch twice. :func:`run_deliverer` runs passes until stopped,
sleeping on ``LISTEN`` between them.

Operators and consumers: :func:`ack_dispatch`, :func:`retry_dispatch`, :func:`purge_dispatch`,
:func:`get_dispatch`, :func:`list_dispatches`, :func:`page_dispatches`,
:func:`dispatch_id_for_dedup_key`, :func:`count_dispatches` and
:func:`dispatch_backlog`, with the SQLite functions' rules and errors.
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "studio_outbox.postgres needs psycopg 3: pip install 'studio-outbox[postgres]'"
    ) from exc

from ._enqueue import enqueue_dispatch, enqueue_many
from ._pg._delivery import deliver_due_dispatches
from ._pg._operations import (
    ack_dispatch,
    count_dispatches,
    dispatch_backlog,
    dispatch_id_for_dedup_key,
    get_dispatch,
    list_dispatches,
    operator_ack_dispatch,
    page_dispatches,
    purge_dispatch,
    purge_dispatches,
    retry_dispatch,
)
from ._pg._schema import (
    CHANNEL,
    MIGRATIONS,
    STATE_MIGRATIONS,
    compact_counts,
    ensure_schema,
    ensure_schema_sync,
)
from ._pg._wake import next_due_at, run_deliverer
from .sync import enqueue_dispatch as enqueue_dispatch_sync
from .sync import enqueue_many as enqueue_many_sync

__all__ = [
    "CHANNEL",
    "MIGRATIONS",
    "STATE_MIGRATIONS",
    "ack_dispatch",
    "compact_counts",
    "count_dispatches",
    "deliver_due_dispatches",
    "dispatch_backlog",
    "dispatch_id_for_dedup_key",
    "enqueue_dispatch",
    "enqueue_dispatch_sync",
    "enqueue_many",
    "enqueue_many_sync",
    "ensure_schema",
    "ensure_schema_sync",
    "get_dispatch",
    "list_dispatches",
    "next_due_at",
    "operator_ack_dispatch",
    "page_dispatches",
    "purge_dispatch",
    "purge_dispatches",
    "retry_dispatch",
    "run_deliverer",
]
