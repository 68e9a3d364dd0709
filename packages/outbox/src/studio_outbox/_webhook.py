"""The webhook transport: POST the DispatchSignal to an ``http(s)://`` ``deliver_to``.

Standard Webhooks headers (``webhook-id`` = the dispatch id, ``webhook-timestamp``,
``webhook-signature`` when a secret is given). httpx is imported only when a transport is
built, so the outbox without its ``http`` extra imports with aiosqlite alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import importlib.util
import math
from collections.abc import AsyncGenerator
from datetime import UTC
from types import TracebackType
from typing import TYPE_CHECKING, cast

from studio_state import Clock, system_clock

from .__about__ import __version__
from ._constants import NOTIFY_TIMEOUT_SECONDS
from ._exceptions import InvalidArgument, OutboxError
from ._secret import parse_webhook_secret, signature_header
from .abc import DispatchEnvelope, TransportResult

if TYPE_CHECKING:
    import httpx

WEBHOOK_TIMEOUT_SECONDS = NOTIFY_TIMEOUT_SECONDS
"""Total deadline of one send: connect, request and the whole (bounded) response."""

RESPONSE_HEAD_BYTES = 64 * 1024
"""At most this much of a response body is read; the connection is dropped past it."""

ERROR_BODY_CHARS = 500
ERROR_CHARS = 2000
RETRY_AFTER_MIN_SECONDS = 1.0
RETRY_AFTER_MAX_SECONDS = 1800.0


class WebhookUnavailable(OutboxError):
    """The webhook transport needs httpx: install ``studio-outbox[http]``."""

    def __init__(self) -> None:
        super().__init__("the webhook transport needs httpx: install the extra studio-outbox[http]")


def webhook_transport_available() -> bool:
    """True when httpx (the ``http`` extra) is installed, so webhooks can be sent."""
    try:
        return importlib.util.find_spec("httpx") is not None
    except (ImportError, ValueError):
        return False


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delay seconds or an HTTP date).

    The result is clamped to 1..1800 s; None when the header is absent or unreadable.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    seconds: float
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - now
    if math.isnan(seconds):
        return None
    return min(max(seconds, RETRY_AFTER_MIN_SECONDS), RETRY_AFTER_MAX_SECONDS)


def _bounded(text: str) -> str:
    return text[:ERROR_CHARS]


class WebhookTransport:
    """Sends each envelope as a signed POST to its ``deliver_to`` URL over one httpx client.

    ``secret`` is a ``whsec_<base64>`` Standard Webhooks secret (refused with
    :class:`InvalidWebhookSecret` when malformed); without one, requests carry
    ``webhook-id`` and ``webhook-timestamp`` but no ``webhook-signature``. The body is the
    DispatchSignal JSON, exactly as stored.

    A 2xx answer is success; 410 fails permanently (the row goes to ``dead_letter``); 429
    and 5xx fail with their ``Retry-After`` (if any) replacing the backoff; any other answer,
    a timeout or a connection error fails for the normal backoff. Redirects are not followed.
    Each send has a total deadline of ``timeout`` seconds (connect, request and response) and
    reads at most 64 KiB of the response body.

    The client keeps connections alive between sends: build one transport per delivery loop
    and close it with the loop (``async with WebhookTransport(...)`` or :meth:`aclose`). It
    never reads the environment (no proxy or certificate variables).
    """

    def __init__(
        self,
        secret: str | None = None,
        *,
        timeout: float = WEBHOOK_TIMEOUT_SECONDS,
        clock: Clock = system_clock,
        max_connections: int = 100,
    ) -> None:
        self._key = None if secret is None else parse_webhook_secret(secret, field="secret")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise InvalidArgument("timeout", f"must be seconds, got {type(timeout).__name__}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise InvalidArgument("timeout", f"must be a positive number, got {timeout!r}")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise InvalidArgument("max_connections", "must be an int")
        if max_connections < 1:
            raise InvalidArgument("max_connections", f"must be at least 1, got {max_connections}")
        try:
            import httpx
        except ImportError:
            raise WebhookUnavailable() from None
        self._httpx = httpx
        self.timeout = float(timeout)
        self._clock = clock
        self._client: httpx.AsyncClient = httpx.AsyncClient(
            follow_redirects=False,
            timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            trust_env=False,
            headers={"user-agent": f"studio-outbox/{__version__}"},
        )

    @property
    def signed(self) -> bool:
        """Whether requests carry a ``webhook-signature``."""
        return self._key is not None

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has run (a closed transport cannot send)."""
        return self._client.is_closed

    def __repr__(self) -> str:
        return f"WebhookTransport(signed={self.signed}, timeout={self.timeout:g})"

    async def aclose(self) -> None:
        """Close the client and its kept-alive connections."""
        await self._client.aclose()

    async def __aenter__(self) -> WebhookTransport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def headers(self, dispatch_id: str, body: bytes) -> dict[str, str]:
        """The Standard Webhooks headers of one send, timestamped now."""
        timestamp = int(self._clock())
        headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            "webhook-id": dispatch_id,
            "webhook-timestamp": str(timestamp),
        }
        if self._key is not None:
            headers["webhook-signature"] = signature_header(self._key, dispatch_id, timestamp, body)
        return headers

    async def send(self, envelope: DispatchEnvelope) -> TransportResult:
        """POST ``envelope.payload`` to ``envelope.deliver_to`` once."""
        httpx = self._httpx
        body = envelope.payload.encode("utf-8")
        headers = self.headers(envelope.dispatch_id, body)
        try:
            async with asyncio.timeout(self.timeout):
                request = self._client.build_request(
                    "POST", envelope.deliver_to, content=body, headers=headers
                )
                response = await self._client.send(request, stream=True, follow_redirects=False)
                try:
                    head = await _read_head(response)
                finally:
                    await response.aclose()
        except TimeoutError:
            return TransportResult.failure(
                f"no complete response within {self.timeout:g}s (connect, request and response)"
            )
        except httpx.InvalidURL as exc:
            return TransportResult.failure(_bounded(f"invalid webhook URL: {exc}"))
        except httpx.TimeoutException as exc:
            return TransportResult.failure(_bounded(f"timeout: {type(exc).__name__}: {exc}"))
        except httpx.HTTPError as exc:
            detail = str(exc) or repr(exc)
            return TransportResult.failure(
                _bounded(f"connection error: {type(exc).__name__}: {detail}")
            )
        return self._result(response, head)

    def _result(self, response: httpx.Response, head: bytes) -> TransportResult:
        status = response.status_code
        if 200 <= status < 300:
            return TransportResult.success()
        text = head.decode("utf-8", errors="replace")[:ERROR_BODY_CHARS]
        error = _bounded(f"HTTP {status}: {text}".rstrip())
        if status == 410:
            return TransportResult.permanent_failure(error)
        if status == 429 or status >= 500:
            retry_after = parse_retry_after(response.headers.get("retry-after"), self._clock())
            return TransportResult.failure(error, retry_after=retry_after)
        return TransportResult.failure(error)


async def _read_head(response: httpx.Response) -> bytes:
    """The first 64 KiB of the raw body (no decompression); the rest is never read."""
    head = bytearray()
    chunks = cast(AsyncGenerator[bytes, None], response.aiter_raw())
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            head += chunk
            if len(head) >= RESPONSE_HEAD_BYTES:
                break
    return bytes(head[:RESPONSE_HEAD_BYTES])
