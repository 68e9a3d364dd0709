"""Per-row transport choice: ``http(s)://`` destinations go to the webhook transport."""

from __future__ import annotations

from studio_state import Clock

from ._url import is_webhook_url
from ._webhook import WebhookTransport, webhook_transport_available
from .abc import DispatchEnvelope, Transport, TransportResult


class Routes:
    """The transport of each row of one delivery pass, chosen by its ``deliver_to``.

    URL rows use ``webhooks`` when given (the caller's long-lived transport, left open), else
    a :class:`WebhookTransport` built on the first URL send and closed by :meth:`aclose`.
    Other rows use ``command`` (the argv ``notify_template`` or the caller's transport).
    """

    def __init__(
        self,
        command: Transport | None,
        webhooks: Transport | None,
        *,
        webhook_secret: str | None,
        clock: Clock,
    ) -> None:
        self._command = command
        self._webhooks = webhooks
        self._owned: WebhookTransport | None = None
        self._secret = webhook_secret
        self._clock = clock
        self._webhooks_possible = webhooks is not None or webhook_transport_available()

    @property
    def paused(self) -> bool:
        """True when no row at all could be sent."""
        return self._command is None and not self._webhooks_possible

    def can_send(self, deliver_to: str) -> bool:
        """Whether a transport is available for ``deliver_to`` (else the row stays as it is)."""
        if is_webhook_url(deliver_to):
            return self._webhooks_possible
        return self._command is not None

    def _webhook(self) -> Transport:
        if self._webhooks is not None:
            return self._webhooks
        if self._owned is None:
            self._owned = WebhookTransport(self._secret, clock=self._clock)
        return self._owned

    async def send(self, envelope: DispatchEnvelope) -> TransportResult:
        if is_webhook_url(envelope.deliver_to):
            return await self._webhook().send(envelope)
        if self._command is None:  # not reached: such rows are never claimed
            return TransportResult.failure("no notify_template configured")
        return await self._command.send(envelope)

    async def aclose(self) -> None:
        """Close the webhook transport this pass built (never the caller's)."""
        if self._owned is not None:
            owned, self._owned = self._owned, None
            await owned.aclose()
