"""``/api/audit``: who changed what, newest first (the ``status_transitions`` rows)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.exceptions import RequestValidationError

from studio_state import ENTITY_TYPES, TransitionFilter, read_transitions

from .._cursor import decode_cursor, encode_cursor
from .._deps import ReadsDep, responses
from .._models import SQLITE_INT_MAX, ResponseModel

router = APIRouter(prefix="/api/audit", tags=["audit"])


class AuditEntry(ResponseModel):
    """One recorded change: what (entity), from and to which status, why, who and when."""

    id: str
    entity_type: str
    entity_id: str
    previous_status: str | None
    status: str
    reason_code: str
    reason_summary: str | None
    actor: str | None
    metadata: dict[str, Any] | None
    created_at: float


class AuditList(ResponseModel):
    """One page of the audit trail, newest first; ``next_cursor`` continues after it."""

    entries: list[AuditEntry]
    limit: int
    offset: int
    next_cursor: str | None


def _bad(field: str, message: str) -> RequestValidationError:
    return RequestValidationError(
        [{"loc": ("query", field), "msg": message, "type": "value_error"}]
    )


def parse_instant(field: str, value: str | None) -> float | None:
    """An epoch-seconds number or an ISO 8601 time with an offset; 422 naming ``field``."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _bad(field, "must be epoch seconds or an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise _bad(field, "an ISO 8601 time needs an offset (e.g. Z or +02:00)")
    return moment.timestamp()


def _entity_filter(entity: str | None) -> tuple[str | None, str | None]:
    """``entity``: an entity type, ``<type>:<id>``, or an entity id → (type, id)."""
    if entity is None or not entity.strip():
        return None, None
    text = entity.strip()
    kind, sep, ident = text.partition(":")
    if sep and kind in ENTITY_TYPES:
        return kind, ident
    if text in ENTITY_TYPES:
        return text, None
    return None, text


def _entry(row: dict[str, Any]) -> AuditEntry:
    metadata = row.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = {"text": metadata}
    return AuditEntry.of({**row, "metadata": metadata if isinstance(metadata, dict) else None})


@router.get("", response_model=AuditList, responses=responses())
async def audit(
    reads: ReadsDep,
    actor: Annotated[str | None, Query(description="Only this actor's changes")] = None,
    entity: Annotated[
        str | None,
        Query(
            description="An entity type (schedule, schedule_run, invocation, dispatch, "
            "token, maintenance), <type>:<id>, or an entity id"
        ),
    ] = None,
    since: Annotated[str | None, Query(description="From this time (epoch or ISO 8601)")] = None,
    until: Annotated[str | None, Query(description="Before this time (epoch or ISO 8601)")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Page size (1-1000)")] = 100,
    offset: Annotated[int, Query(ge=0, le=SQLITE_INT_MAX, description="Rows to skip")] = 0,
    cursor: Annotated[str | None, Query(description="A page's next_cursor")] = None,
) -> AuditList:
    """The audit trail, newest first: every recorded status change with its actor (the
    token's name for API requests, ``cli:<user>`` for commands on the database, ``studio``
    or a component's name for the engine), filtered by actor, entity and time."""
    entity_type, entity_id = _entity_filter(entity)
    before = None
    if cursor is not None:
        at, last_id = decode_cursor(cursor, (float, str), offset=offset)
        before = (float(at), str(last_id))
    where = TransitionFilter(
        actor=actor.strip() if actor is not None and actor.strip() else None,
        entity_type=entity_type,
        entity_id=entity_id,
        since=parse_instant("since", since),
        until=parse_instant("until", until),
        before=before,
    )
    rows = await read_transitions(reads.conn, where, limit=limit, offset=offset)
    following = None
    if len(rows) == limit:
        following = encode_cursor([float(rows[-1]["created_at"]), str(rows[-1]["id"])])
    return AuditList(
        entries=[_entry(row) for row in rows], limit=limit, offset=offset, next_cursor=following
    )
