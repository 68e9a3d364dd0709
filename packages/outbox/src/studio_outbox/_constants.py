"""Statuses, reason codes and timings of the dispatch outbox."""

from __future__ import annotations

from typing import Final, Literal, get_args

ENTITY_TYPE: Final = "dispatch"
TABLE: Final = "dispatch_outbox"

PENDING: Final = "pending"
DELIVERING: Final = "delivering"
DELIVERED: Final = "delivered"
ACKED: Final = "acked"
DEAD_LETTER: Final = "dead_letter"
EXPIRED: Final = "expired"

DispatchStatus = Literal["pending", "delivering", "delivered", "acked", "dead_letter", "expired"]
"""The type of ``dispatch_outbox.status``."""

DISPATCH_STATUSES: Final[tuple[str, ...]] = get_args(DispatchStatus)
"""Every value of ``dispatch_outbox.status``, in lifecycle order."""

NOTIFY_TIMEOUT_SECONDS: Final = 10.0
"""How long a notify transport may run before it is killed."""

CLAIM_LEASE_SECONDS: Final = NOTIFY_TIMEOUT_SECONDS + 5.0
"""A claim moves ``next_attempt_at`` this far ahead; a lapsed lease can be claimed again."""

DEFAULT_MAX_ATTEMPTS: Final = 8

SECRET_ENV_NAMES: Final = (
    "GITHUB_TOKEN",
    "LIONAGI_STUDIO_AUTH_TOKEN",
    "LIONAGI_STUDIO_WEBHOOK_SECRET",
)
"""Environment variables never given to a transport child unless passed through by name."""

DEFAULT_ACTOR: Final = "studio_outbox"


class DispatchReason:
    """The reason codes written to ``status_transitions`` for dispatch rows."""

    ENQUEUED: Final = "dispatch.pending.enqueued"
    CLAIMED: Final = "dispatch.delivering.claimed"
    TRANSPORT_OK: Final = "dispatch.delivered.transport_ok"
    AWAITING_ACK: Final = "dispatch.pending.awaiting_ack"
    RETRY_BACKOFF: Final = "dispatch.pending.retry_backoff"
    MAX_ATTEMPTS: Final = "dispatch.dead_letter.max_attempts"
    ACK_TIMEOUT: Final = "dispatch.dead_letter.ack_timeout"
    EXPIRED_TTL: Final = "dispatch.expired.ttl"
    ACKED: Final = "dispatch.acked.consumer"
    OPERATOR_RETRY: Final = "dispatch.pending.operator_retry"
    GONE: Final = "dispatch.dead_letter.gone"

    ALL: Final = (
        ENQUEUED,
        CLAIMED,
        TRANSPORT_OK,
        AWAITING_ACK,
        RETRY_BACKOFF,
        MAX_ATTEMPTS,
        ACK_TIMEOUT,
        EXPIRED_TTL,
        ACKED,
        OPERATOR_RETRY,
        GONE,
    )


_BACKOFF_BASE_SECONDS: Final = 30
_BACKOFF_CAP_SECONDS: Final = 1800


def backoff_seconds(attempt: int) -> int:
    """Delay before the next send after ``attempt`` sends: ``min(30 * 2**attempt, 1800)``.

    ``attempt`` is the row's attempt count after the claim (1 for the first send), so the first
    retry waits 60 s and the delay is capped at 30 minutes. No jitter.
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int):
        raise TypeError(f"attempt must be an int, got {type(attempt).__name__}")
    if attempt < 0:
        raise ValueError(f"attempt must not be negative, got {attempt}")
    if attempt >= 6:  # 30 * 2**6 = 1920 > cap; avoids building huge ints for large counts
        return _BACKOFF_CAP_SECONDS
    return min(_BACKOFF_BASE_SECONDS << attempt, _BACKOFF_CAP_SECONDS)
