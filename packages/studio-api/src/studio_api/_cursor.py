"""Opaque keyset cursors: a page's ``next_cursor`` names the sort key of its last row.

The string is URL-safe base64 of a JSON array (the key's values in order); clients pass it
back verbatim as ``?cursor=`` and never parse it. A cursor that does not decode to a key of
the expected shape is a 422 naming ``cursor``, as is a cursor combined with an ``offset``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError

_MAX_LEN = 1024


def cursor_error(message: str = "is not a cursor this list returned") -> RequestValidationError:
    """The 422 for a bad ``cursor`` query parameter."""
    return RequestValidationError(
        [{"loc": ("query", "cursor"), "msg": message, "type": "value_error"}]
    )


def encode_cursor(values: Sequence[Any]) -> str:
    """The opaque cursor for a sort key (JSON scalars)."""
    raw = json.dumps(list(values), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def next_cursor(rows: Sequence[object], key: Sequence[str], limit: int) -> str | None:
    """The cursor after a full page's last record (``None`` when the page came back short)."""
    if len(rows) < limit or not rows:
        return None
    return encode_cursor([getattr(rows[-1], column) for column in key])


def decode_cursor(cursor: str, kinds: Sequence[type], *, offset: int) -> list[Any]:
    """The sort key in ``cursor``, each value of the matching type in ``kinds`` (``float``
    takes an int too); :class:`RequestValidationError` on ``cursor`` for anything else, or when
    ``offset`` is non-zero."""
    if offset:
        raise cursor_error("cannot be combined with a non-zero offset")
    if not cursor or len(cursor) > _MAX_LEN:
        raise cursor_error()
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw.decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise cursor_error() from None
    if not isinstance(values, list) or len(values) != len(kinds):
        raise cursor_error()
    out: list[Any] = []
    for value, kind in zip(values, kinds, strict=True):
        if isinstance(value, bool):
            raise cursor_error()
        if kind is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, kind):
            raise cursor_error()
        out.append(value)
    return out
