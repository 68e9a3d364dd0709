"""studio-outbox: a durable SQLite outbox for outbound notifications.

Producers enqueue dispatches inside their own transaction (transactional outbox, with dedup
keys); a delivery pass claims due rows with guarded updates, sends them through a transport
(by default an argv ``notify_template``, never a shell), retries with backoff, optionally
waits for the consumer's ack, and ends every row as ``delivered``, ``acked``, ``dead_letter``
or ``expired``. Every status change writes a ``status_transitions`` row in the same
transaction. Works on any ``aiosqlite`` connection (any ``row_factory``);
:mod:`studio_outbox.sync` offers the same functions on a standard ``sqlite3.Connection``.
On PostgreSQL, :func:`enqueue_dispatch` and :func:`enqueue_many` also take a producer's
asyncpg connection or psycopg 3 ``AsyncConnection`` (and ``studio_outbox.sync``'s a psycopg
``Connection``) and join its open transaction.
"""

from __future__ import annotations

from . import sync
from .__about__ import __version__
from ._constants import (
    CLAIM_LEASE_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DISPATCH_STATUSES,
    NOTIFY_TIMEOUT_SECONDS,
    SECRET_ENV_NAMES,
    DispatchReason,
    DispatchStatus,
    backoff_seconds,
)
from ._delivery import deliver_due_dispatches
from ._enqueue import enqueue_dispatch, enqueue_many
from ._exceptions import (
    AckNotRequired,
    AckTokenMismatch,
    DispatchNotFound,
    InvalidArgument,
    InvalidDispatch,
    InvalidDispatchState,
    InvalidNotifyTemplate,
    OutboxError,
    UnsupportedConnection,
)
from ._operations import (
    ack_dispatch,
    operator_ack_dispatch,
    purge_dispatch,
    purge_dispatches,
    retry_dispatch,
)
from ._operator_ops import OPERATOR_ACKED, PURGED
from ._queries import (
    count_dispatches,
    dispatch_backlog,
    dispatch_id_for_dedup_key,
    get_dispatch,
    list_dispatches,
    next_due_at,
    page_dispatches,
)
from ._record import Dispatch
from ._schema import connect, ensure_schema
from ._secret import InvalidWebhookSecret, parse_webhook_secret
from ._transport import CommandTransport, render_argv, transport_env, validate_notify_template
from ._url import is_webhook_url
from ._verify import WebhookVerificationError, verify_webhook
from ._webhook import (
    WebhookTransport,
    WebhookUnavailable,
    parse_retry_after,
    webhook_transport_available,
)
from .abc import DispatchEnvelope, Transport, TransportResult

__all__ = [
    "AckNotRequired",
    "AckTokenMismatch",
    "CLAIM_LEASE_SECONDS",
    "CommandTransport",
    "DEFAULT_MAX_ATTEMPTS",
    "DISPATCH_STATUSES",
    "Dispatch",
    "DispatchEnvelope",
    "DispatchNotFound",
    "DispatchReason",
    "DispatchStatus",
    "InvalidArgument",
    "InvalidDispatch",
    "InvalidDispatchState",
    "InvalidNotifyTemplate",
    "InvalidWebhookSecret",
    "NOTIFY_TIMEOUT_SECONDS",
    "OPERATOR_ACKED",
    "OutboxError",
    "PURGED",
    "SECRET_ENV_NAMES",
    "Transport",
    "TransportResult",
    "UnsupportedConnection",
    "WebhookTransport",
    "WebhookUnavailable",
    "WebhookVerificationError",
    "__version__",
    "ack_dispatch",
    "backoff_seconds",
    "connect",
    "count_dispatches",
    "deliver_due_dispatches",
    "dispatch_backlog",
    "dispatch_id_for_dedup_key",
    "enqueue_dispatch",
    "enqueue_many",
    "ensure_schema",
    "get_dispatch",
    "is_webhook_url",
    "list_dispatches",
    "next_due_at",
    "operator_ack_dispatch",
    "page_dispatches",
    "parse_retry_after",
    "parse_webhook_secret",
    "purge_dispatch",
    "purge_dispatches",
    "render_argv",
    "retry_dispatch",
    "sync",
    "transport_env",
    "validate_notify_template",
    "verify_webhook",
    "webhook_transport_available",
]
