"""Which transport a row's ``deliver_to`` names: an ``http(s)://`` URL is a webhook."""

from __future__ import annotations

from urllib.parse import urlsplit

from ._exceptions import InvalidDispatch

WEBHOOK_SCHEMES = ("http", "https")


def is_webhook_url(deliver_to: str) -> bool:
    """True when ``deliver_to`` has the webhook scheme prefix (``http:`` or ``https:``, any case).

    Such rows are sent by the webhook transport; every other destination goes to the argv
    ``notify_template``.
    """
    scheme, colon, _ = deliver_to.partition(":")
    return bool(colon) and scheme.lower() in WEBHOOK_SCHEMES


def check_deliver_to_url(deliver_to: str) -> None:
    """Refuse a ``deliver_to`` that has the webhook scheme prefix but is not a usable URL.

    Raises :class:`InvalidDispatch` naming ``deliver_to`` (``http:/x``, ``https://`` without a
    host, whitespace, a bad port). Destinations without the prefix are not checked here.
    """
    if not is_webhook_url(deliver_to):
        return
    if any(ch.isspace() or ord(ch) < 0x20 or ch == "\x7f" for ch in deliver_to):
        raise InvalidDispatch("deliver_to", "a webhook URL must not contain whitespace")
    parts = urlsplit(deliver_to)
    scheme = parts.scheme.lower()
    if not deliver_to[len(scheme) + 1 :].startswith("//"):
        raise InvalidDispatch(
            "deliver_to", f"a webhook URL must be absolute: {scheme}://host[:port]/path"
        )
    if not parts.hostname:
        raise InvalidDispatch("deliver_to", "the webhook URL has no host")
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise InvalidDispatch("deliver_to", "the webhook URL has an invalid port") from None
