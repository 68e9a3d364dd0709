"""Enqueue: the producer side of the outbox (the transactional-outbox write)."""

from __future__ import annotations

import functools
import json
import json.encoder
import math
import secrets
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiosqlite

import studio_state
from studio_state import Clock, system_clock

from ._constants import DEFAULT_ACTOR, DEFAULT_MAX_ATTEMPTS, PENDING, DispatchReason
from ._drive import Fetch, Steps, TransitionRow, record, run_write
from ._new_row import NewRow, validate, validate_items

_COLUMNS = (
    "id, kind, deliver_to, payload, dedup_key, status, attempt, max_attempts, next_attempt_at, "
    "ack_required, ack_token, session_id, schedule_run_id, created_at, expires_at, updated_at"
)
_ROW_SQL = "(?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_PARAMS_PER_ROW = 14
# Rows per multi-row INSERT: stays far below SQLite's bound-parameter limit.
_CHUNK = 200
_ID_RETRIES = 3
_PRIMARY_KEY_CONFLICT = "SQLITE_CONSTRAINT_PRIMARYKEY"

# The string encoder json.dumps itself uses for ``str`` (``ensure_ascii``): the payload is
# written out by hand, byte for byte what ``json.dumps(..., separators=(",", ":"))`` gives
# for it, at a fifth of the cost (it is built inside every enqueue's transaction).
_quote = json.encoder.encode_basestring_ascii


def _json_text(value: str | None) -> str:
    return "null" if value is None else _quote(value)


def _json_number(value: float | None) -> str:
    if value is None:
        return "null"
    if type(value) is float:
        if not math.isfinite(value):
            raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
        return float.__repr__(value)
    return json.dumps(value, allow_nan=False)


def _payload(row: NewRow, dispatch_id: str, ack_token: str | None, now: float) -> str:
    """The stored payload JSON, around the already-serialised body (encoded once)."""
    ack = "" if ack_token is None else f',"ack_token":{_quote(ack_token)}'
    return (
        f'{{"dispatch_id":{_quote(dispatch_id)},"kind":{_quote(row.kind)},'
        f'"deliver_to":{_quote(row.deliver_to)},"attempt":0{ack},"body":{row.body_json},'
        f'"created_at":{_json_number(now)},"expires_at":{_json_number(row.expires_at)},'
        f'"session_id":{_json_text(row.session_id)},'
        f'"schedule_run_id":{_json_text(row.schedule_run_id)}}}'
    )


def _params(row: NewRow, now: float) -> tuple[str, tuple[Any, ...]]:
    dispatch_id = studio_state.new_id()
    ack_token = secrets.token_hex(16) if row.ack_required else None
    return dispatch_id, (
        dispatch_id,
        row.kind,
        row.deliver_to,
        _payload(row, dispatch_id, ack_token, now),
        row.dedup_key,
        row.max_attempts,
        now,
        int(row.ack_required),
        ack_token,
        row.session_id,
        row.schedule_run_id,
        now,
        row.expires_at,
        now,
    )


def insert_steps(rows: Sequence[NewRow], now: float, actor: str) -> Steps[list[str]]:
    """Insert ``rows`` (inside the current transaction); returns one id per row, in order."""
    ids, _ = yield from insert_reporting_steps(rows, now, actor)
    return ids


def insert_reporting_steps(
    rows: Sequence[NewRow], now: float, actor: str
) -> Steps[tuple[list[str], set[int]]]:
    """:func:`insert_steps` that also returns the positions that were dedup hits."""
    ids: list[str] = []
    fresh: list[TransitionRow] = []
    conflicted: dict[int, str] = {}  # position -> dedup_key of a row that already existed
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start : start + _CHUNK]
        sql = _insert_sql(len(chunk))
        for attempt in range(_ID_RETRIES):
            generated = [_params(row, now) for row in chunk]
            flat = [value for _, params in generated for value in params]
            try:
                inserted = {r["id"] for r in (yield Fetch(sql, flat))}
            except sqlite3.IntegrityError as exc:
                # Only a (2**-48) id collision gets here: the dedup conflict is DO NOTHING.
                # Told by SQLite's error code (the id is the table's only primary key), not its
                # message. PostgreSQL's is never retried: its failed statement has aborted the
                # transaction, so the error goes to the transaction's owner as it is.
                primary_key = studio_state.classify_db_error(exc).code == _PRIMARY_KEY_CONFLICT
                if not primary_key or attempt == _ID_RETRIES - 1:
                    raise
                continue
            break
        for row, (dispatch_id, _) in zip(chunk, generated, strict=True):
            if dispatch_id in inserted:
                ids.append(dispatch_id)
                fresh.append(
                    TransitionRow(
                        dispatch_id,
                        None,
                        PENDING,
                        DispatchReason.ENQUEUED,
                        f"enqueued kind={row.kind}",
                        now,
                        actor,
                    )
                )
            else:
                assert row.dedup_key is not None
                conflicted[len(ids)] = row.dedup_key
                ids.append("")
    if conflicted:
        keys = sorted(set(conflicted.values()))
        found: dict[str, str] = {}
        for start in range(0, len(keys), _CHUNK):
            part = keys[start : start + _CHUNK]
            result = yield Fetch(
                "SELECT id, dedup_key FROM dispatch_outbox WHERE dedup_key IN "
                f"({', '.join('?' * len(part))})",
                part,
            )
            found.update({r["dedup_key"]: r["id"] for r in result})
        for position, key in conflicted.items():
            ids[position] = found[key]
    yield from record(fresh)
    return ids, set(conflicted)


@functools.cache
def _insert_sql(rows: int) -> str:
    """The multi-row INSERT of ``rows`` rows (built once per size: most are of one row)."""
    return (
        f"INSERT INTO dispatch_outbox ({_COLUMNS}) VALUES "
        + ", ".join([_ROW_SQL] * rows)
        + " ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING RETURNING id"
    )


async def enqueue_dispatch(
    conn: aiosqlite.Connection | Any,
    *,
    kind: str,
    deliver_to: str,
    body: dict[str, Any] | None = None,
    dedup_key: str | None = None,
    ack_required: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    expires_at: float | None = None,
    session_id: str | None = None,
    schedule_run_id: str | None = None,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> str:
    """Add a ``pending`` dispatch and return its id.

    ``conn`` is an ``aiosqlite.Connection`` (SQLite, or Studio's own PostgreSQL connection),
    or on PostgreSQL the producer's asyncpg connection or psycopg 3 ``AsyncConnection``
    (anything else raises :class:`UnsupportedConnection` naming ``conn``). Inside a
    transaction the caller has open on ``conn`` (``conn.in_transaction``; asyncpg's
    ``is_in_transaction()``; psycopg's ``info.transaction_status`` not idle), the row and its
    ``dispatch.pending.enqueued`` transition are written into that transaction and commit or
    roll back with the producer's own change; nothing here commits it. Otherwise they commit
    in one transaction of their own (``BEGIN IMMEDIATE`` on SQLite). A ``dedup_key`` that
    already exists returns the existing row's id (whatever its status) and writes nothing,
    also when another process enqueues the same key at the same moment. ``session_id`` and
    ``schedule_run_id`` are stored as given (soft references). Bad arguments raise
    :class:`InvalidDispatch` before anything is written.
    """
    row = validate(
        kind=kind,
        deliver_to=deliver_to,
        body=body,
        dedup_key=dedup_key,
        ack_required=ack_required,
        max_attempts=max_attempts,
        expires_at=expires_at,
        session_id=session_id,
        schedule_run_id=schedule_run_id,
    )
    ids = await _insert(conn, [row], clock(), actor or DEFAULT_ACTOR)
    return ids[0]


async def enqueue_many(
    conn: aiosqlite.Connection | Any,
    items: Iterable[Mapping[str, Any]],
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> list[str]:
    """Enqueue several dispatches in one transaction; returns their ids in order.

    ``conn`` is any connection :func:`enqueue_dispatch` takes, with the same transaction
    rule. Each item holds the keyword arguments of :func:`enqueue_dispatch`. Every item is
    validated before anything is written (an invalid one raises :class:`InvalidDispatch`
    whose field is prefixed with ``items[i].``). Dedup applies across the database and within
    the batch: a repeated key yields the first row's id.
    """
    rows = validate_items(items)
    if not rows:
        return []
    return await _insert(conn, rows, clock(), actor or DEFAULT_ACTOR)


async def _insert(conn: Any, rows: Sequence[NewRow], now: float, actor: str) -> list[str]:
    """The one insert (:func:`insert_steps`), driven on whichever connection ``conn`` is."""
    if isinstance(conn, aiosqlite.Connection):
        return await run_write(conn, insert_steps(rows, now, actor))
    # The PostgreSQL drivers' front-end: it refuses any other kind of connection.
    from ._pg._enqueue import insert_async

    return await insert_async(conn, rows, now, actor)


async def enqueue_reporting(
    conn: aiosqlite.Connection, *, clock: Clock = system_clock, **arguments: Any
) -> tuple[str, bool]:
    """:func:`enqueue_dispatch` returning ``(id, created)``: False for a dedup hit.

    ``arguments`` are every keyword argument of :func:`enqueue_dispatch` but ``clock``/``actor``.
    """
    row = validate(**arguments)
    now = clock()
    ids, hits = await run_write(conn, insert_reporting_steps([row], now, DEFAULT_ACTOR))
    return ids[0], 0 not in hits
