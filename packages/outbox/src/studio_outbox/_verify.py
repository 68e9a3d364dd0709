"""Verifying a webhook on the consumer's side (Standard Webhooks, ``v1`` signatures)."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ._exceptions import InvalidArgument, OutboxError
from ._secret import SIGNATURE_VERSION, parse_webhook_secret, signature

DEFAULT_TOLERANCE_SECONDS = 300


class WebhookVerificationError(OutboxError):
    """A webhook request that does not prove it came from the holder of the secret.

    Raised for a missing or malformed ``webhook-*`` header, a timestamp outside the tolerance,
    no matching ``v1`` signature, or a body that is not a JSON object.
    """


def _lower(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {str(name).lower(): str(value) for name, value in items}


def _required(headers: dict[str, str], name: str) -> str:
    value = headers.get(name, "").strip()
    if not value:
        raise WebhookVerificationError(f"missing {name} header")
    return value


def verify_webhook(
    secret: str | bytes,
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    body: bytes | str,
    *,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a received webhook and return its JSON payload (the DispatchSignal).

    ``secret`` is the ``whsec_<base64>`` secret the sender signs with (or the raw key bytes);
    ``headers`` are the request's headers, names in any case; ``body`` is the raw request
    body, exactly as received. The ``webhook-timestamp`` must be within ``tolerance`` seconds
    of ``now`` (default: the current time) either way, and one of the space-separated ``v1``
    signatures in ``webhook-signature`` must match (compared in constant time).

    Raises :class:`WebhookVerificationError` when the request fails any check, and
    :class:`InvalidWebhookSecret` when ``secret`` itself is malformed.
    """
    key = secret if isinstance(secret, bytes) else parse_webhook_secret(secret, field="secret")
    if not key:
        raise InvalidArgument("secret", "must not be empty")
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float):
        raise InvalidArgument("tolerance", f"must be seconds, got {type(tolerance).__name__}")
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise InvalidArgument("tolerance", f"must be a finite number >= 0, got {tolerance!r}")
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    named = _lower(headers)
    msg_id = _required(named, "webhook-id")
    stamp = _required(named, "webhook-timestamp")
    signatures = _required(named, "webhook-signature")
    if not stamp.isascii() or not stamp.isdigit():
        raise WebhookVerificationError("webhook-timestamp is not whole epoch seconds")
    timestamp = int(stamp)
    current = time.time() if now is None else float(now)
    if timestamp < current - tolerance:
        raise WebhookVerificationError("webhook-timestamp is too old")
    if timestamp > current + tolerance:
        raise WebhookVerificationError("webhook-timestamp is too new")
    expected = signature(key, msg_id, timestamp, raw)
    matched = False
    for entry in signatures.split():
        version, _, encoded = entry.partition(",")
        if version != SIGNATURE_VERSION:
            continue
        try:
            candidate = base64.b64decode(encoded.encode("ascii"), validate=True)
        except (UnicodeEncodeError, binascii.Error):
            continue
        # every entry is compared, so the time taken does not tell which one matched
        matched = hmac.compare_digest(expected, candidate) or matched
    if not matched:
        raise WebhookVerificationError("no matching v1 signature in webhook-signature")
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise WebhookVerificationError("the body is not JSON") from None
    if not isinstance(payload, dict):
        raise WebhookVerificationError("the body is not a JSON object")
    return payload
