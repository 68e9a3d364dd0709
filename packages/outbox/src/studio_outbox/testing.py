"""Test helpers for code that delivers through the outbox (stdlib only).

:class:`RecordingTransport` stands in for a destination in the test's own process: it records
every envelope it is given and answers with ``behaviour``'s result (success by default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from .abc import DispatchEnvelope, TransportResult


@dataclass
class RecordingTransport:
    """A :class:`~studio_outbox.abc.Transport` that records each send.

    ``behaviour(envelope)`` returns the result of a send (``None``: success); ``latency``
    seconds pass inside each send, as for a destination across a network.
    """

    behaviour: Callable[[DispatchEnvelope], TransportResult | None] | None = None
    latency: float = 0.0
    sent: list[DispatchEnvelope] = field(default_factory=list)

    async def send(self, envelope: DispatchEnvelope) -> TransportResult:
        """Record ``envelope``, wait ``latency``, answer with ``behaviour``'s result."""
        self.sent.append(envelope)
        if self.latency:
            await asyncio.sleep(self.latency)
        result = self.behaviour(envelope) if self.behaviour else None
        return result if result is not None else TransportResult.success()
