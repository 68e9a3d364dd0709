"""Standard Webhooks secrets (``whsec_`` + base64) and the ``v1`` signature scheme."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from ._exceptions import InvalidArgument

SECRET_PREFIX = "whsec_"  # noqa: S105 - the prefix, not a secret
SIGNATURE_VERSION = "v1"


class InvalidWebhookSecret(InvalidArgument):
    """A webhook secret that is not ``whsec_`` followed by valid, non-empty base64.

    ``field`` names where the value came from (an argument, or the environment variable a
    server read it from). The message never repeats the value.
    """

    def __init__(self, message: str, *, field: str = "webhook_secret") -> None:
        super().__init__(field, message)


def parse_webhook_secret(value: object, *, field: str = "webhook_secret") -> bytes:
    """Return the HMAC key of a ``whsec_<base64>`` secret, or raise :class:`InvalidWebhookSecret`.

    ``field`` is the name used in the error (for example the environment variable a server
    read the value from), so the refusal says which setting to fix.
    """
    if not isinstance(value, str):
        raise InvalidWebhookSecret(
            f"must be a string starting with {SECRET_PREFIX!r}, got {type(value).__name__}",
            field=field,
        )
    if not value.startswith(SECRET_PREFIX):
        raise InvalidWebhookSecret(f"must start with {SECRET_PREFIX!r}", field=field)
    encoded = value[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise InvalidWebhookSecret(
            f"the part after {SECRET_PREFIX!r} must be valid base64", field=field
        ) from None
    if not key:
        raise InvalidWebhookSecret(f"the key after {SECRET_PREFIX!r} is empty", field=field)
    return key


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    """HMAC-SHA256 of ``"{msg_id}.{timestamp}.{body}"`` (the raw digest)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def signature_header(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 signature>``."""
    digest = base64.b64encode(signature(key, msg_id, timestamp, body)).decode("ascii")
    return f"{SIGNATURE_VERSION},{digest}"
