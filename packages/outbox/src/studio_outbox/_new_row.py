"""The dispatch an enqueue writes: its arguments checked and turned into one ``NewRow``.

Every producer door (``enqueue_dispatch``, ``enqueue_many``, the sync and PostgreSQL fronts, the
CLI) validates here, before anything is written, so a bad argument is refused the same way
whichever door it comes in by: :class:`InvalidDispatch` naming the field.
"""

from __future__ import annotations

import json
import json.encoder
import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ._constants import DEFAULT_MAX_ATTEMPTS
from ._exceptions import InvalidDispatch
from ._url import check_deliver_to_url

_ENQUEUE_KEYS = frozenset(
    {
        "kind",
        "deliver_to",
        "body",
        "dedup_key",
        "ack_required",
        "max_attempts",
        "expires_at",
        "session_id",
        "schedule_run_id",
    }
)


class NewRow(NamedTuple):
    """One validated dispatch, ready to insert (a tuple: built on every enqueue)."""

    kind: str
    deliver_to: str
    body_json: str
    dedup_key: str | None
    ack_required: bool
    max_attempts: int
    expires_at: float | None
    session_id: str | None
    schedule_run_id: str | None


# The body's compact JSON, from the C encoder ``json.dumps`` itself drives, built once:
# ``json.dumps`` with separators builds a new encoder object on every call. Without the
# cycle-check table, a body that contains itself ends in RecursionError (reported below).
_encode_body = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None,
    json.JSONEncoder().default,
    json.encoder.encode_basestring_ascii,
    None,
    ":",
    ",",
    False,
    False,
    False,
)


def _text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidDispatch(field, f"must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidDispatch(field, "must not be empty")
    if "\x00" in value:
        raise InvalidDispatch(field, "must not contain a NUL byte")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidDispatch(
                field, "must be valid Unicode text (no lone surrogates)"
            ) from None
    return value


def _required_text(field: str, value: object) -> str:
    if value is None:
        raise InvalidDispatch(field, "is required")
    return _text(field, value)


def _optional_text(field: str, value: object) -> str | None:
    return None if value is None else _text(field, value)


def validate(
    *,
    kind: object,
    deliver_to: object,
    body: object,
    dedup_key: object,
    ack_required: object,
    max_attempts: object,
    expires_at: object,
    session_id: object,
    schedule_run_id: object,
) -> NewRow:
    kind_s = _required_text("kind", kind)
    deliver_s = _required_text("deliver_to", deliver_to)
    check_deliver_to_url(deliver_s)
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        raise InvalidDispatch("body", f"must be a JSON object (dict), got {type(body).__name__}")
    try:
        body_json = "".join(_encode_body(body if type(body) is dict else dict(body), 0))
    except (TypeError, ValueError) as exc:
        raise InvalidDispatch("body", f"is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidDispatch(
            "body", "is not JSON-serialisable: it contains itself or is nested too deeply"
        ) from None
    if not isinstance(ack_required, bool):
        raise InvalidDispatch("ack_required", f"must be a bool, got {type(ack_required).__name__}")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise InvalidDispatch("max_attempts", f"must be an int, got {type(max_attempts).__name__}")
    if max_attempts < 1:
        raise InvalidDispatch("max_attempts", f"must be at least 1, got {max_attempts}")
    expires: float | None = None
    if expires_at is not None:
        if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
            raise InvalidDispatch(
                "expires_at", f"must be epoch seconds or None, got {type(expires_at).__name__}"
            )
        expires = float(expires_at)
        if not math.isfinite(expires):
            raise InvalidDispatch("expires_at", f"must be a finite number, got {expires_at!r}")
    return NewRow(
        kind_s,
        deliver_s,
        body_json,
        _optional_text("dedup_key", dedup_key),
        ack_required,
        max_attempts,
        expires,
        _optional_text("session_id", session_id),
        _optional_text("schedule_run_id", schedule_run_id),
    )


def validate_items(items: Iterable[Mapping[str, Any]]) -> list[NewRow]:
    """Validate every item of a batch (field names prefixed with ``items[i].``)."""
    rows: list[NewRow] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidDispatch(f"items[{index}]", "must be a mapping of enqueue arguments")
        unknown = sorted(set(item) - _ENQUEUE_KEYS)
        if unknown:
            raise InvalidDispatch(f"items[{index}].{unknown[0]}", "is not an enqueue argument")
        args = {
            "body": None,
            "dedup_key": None,
            "ack_required": False,
            "max_attempts": DEFAULT_MAX_ATTEMPTS,
            "expires_at": None,
            "session_id": None,
            "schedule_run_id": None,
            "kind": None,
            "deliver_to": None,
        }
        args.update(item)
        try:
            rows.append(validate(**args))
        except InvalidDispatch as exc:
            raise InvalidDispatch(f"items[{index}].{exc.field}", exc.message) from None
    return rows
