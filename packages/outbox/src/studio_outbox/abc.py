"""The transport interface: how a claimed dispatch is sent.

The delivery loop only knows this protocol. :class:`studio_outbox.CommandTransport` (the argv
``notify_template`` of docs/reference.md) is one implementation; an HTTP webhook transport can be
another, passed as ``deliver_due_dispatches(..., transport=...)``, without touching the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class DispatchEnvelope:
    """One send of one dispatch, as the transport receives it."""

    dispatch_id: str
    kind: str
    deliver_to: str
    attempt: int
    """The attempt number of this send (1 for the first)."""
    payload: str
    """The DispatchSignal JSON text to deliver (also stored in ``dispatch_outbox.payload``)."""


@dataclass(frozen=True, slots=True)
class TransportResult:
    """The outcome of one send. ``error`` explains a failure (kept as ``last_error``)."""

    ok: bool
    error: str | None = None
    retry_after: float | None = None
    """For a failure: seconds to wait before the next send instead of the backoff (the
    destination's ``Retry-After``); the delivery loop keeps it within 1..1800 s."""
    gone: bool = False
    """For a failure: the destination refused for good (HTTP 410); no further send is made."""

    @classmethod
    def success(cls) -> TransportResult:
        return cls(True, None)

    @classmethod
    def failure(cls, error: str, *, retry_after: float | None = None) -> TransportResult:
        return cls(False, error or "transport failed", retry_after)

    @classmethod
    def permanent_failure(cls, error: str) -> TransportResult:
        """A failure that dead-letters the row at once (``dispatch.dead_letter.gone``)."""
        return cls(False, error or "destination gone", gone=True)


@runtime_checkable
class Transport(Protocol):
    """Sends one envelope and reports whether the destination accepted it.

    ``send`` must finish well within the claim lease (15 s); the delivery loop stops waiting
    after 13 s and records a failure. Exceptions raised by ``send`` are recorded as failures.
    Cancellation must stop the send (and anything it started) before re-raising.
    """

    async def send(self, envelope: DispatchEnvelope) -> TransportResult: ...
