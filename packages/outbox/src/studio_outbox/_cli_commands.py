"""The dispatch commands of ``python -m studio_outbox``: enqueue, list, show, ack, retry, purge.

Each calls the public outbox function on the database; ack tokens are never printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import aiosqlite

from ._enqueue import enqueue_reporting
from ._exceptions import CliError, DispatchNotFound, InvalidDispatch
from ._operations import ack_dispatch, purge_dispatch, retry_dispatch
from ._queries import count_dispatches, get_dispatch, list_dispatches

# enqueue_dispatch's argument names -> the flag that sets them, so an error names the flag.
ENQUEUE_FLAGS = {
    "kind": "--kind",
    "deliver_to": "--to",
    "body": "--body",
    "dedup_key": "--dedup-key",
    "ack_required": "--ack",
    "max_attempts": "--max-attempts",
    "expires_at": "--expires-at",
}
_COLUMNS = (
    "ID",
    "KIND",
    "DELIVER TO",
    "STATUS",
    "ATTEMPT",
    "NEXT ATTEMPT",
    "CREATED",
    "LAST ERROR",
)


def emit_json(document: object) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _time(value: object) -> str:
    if not isinstance(value, int | float):
        return "-"
    try:
        return datetime.fromtimestamp(float(value)).astimezone().isoformat(" ", "seconds")
    except (OverflowError, OSError, ValueError):
        return str(value)


def _short(value: object, width: int) -> str:
    text = "-" if value is None else " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [list(_COLUMNS), *rows]) for i in range(len(_COLUMNS))]
    for row in [list(_COLUMNS), *rows]:
        say("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _body(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--body: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise CliError(f"--body: must be a JSON object, got {type(value).__name__}")
    return value


async def enqueue(conn: aiosqlite.Connection, args: argparse.Namespace) -> None:
    arguments: dict[str, Any] = {
        "kind": args.kind,
        "deliver_to": args.to,
        "body": _body(args.body),
        "dedup_key": args.dedup_key,
        "ack_required": args.ack,
        "max_attempts": args.max_attempts,
        "expires_at": args.expires_at,
        "session_id": None,
        "schedule_run_id": None,
    }
    try:
        dispatch_id, created = await enqueue_reporting(conn, **arguments)
    except InvalidDispatch as exc:
        raise CliError(f"{ENQUEUE_FLAGS.get(exc.field, exc.field)}: {exc.message}") from None
    if args.json:
        emit_json({"id": dispatch_id, "created": created})
    elif created:
        say(f"Enqueued dispatch {dispatch_id}")
    else:
        say(f"Dispatch {dispatch_id} already exists (dedup key {args.dedup_key!r})")


def _redact(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != "ack_token"}


async def list_(conn: aiosqlite.Connection, args: argparse.Namespace) -> None:
    rows = await list_dispatches(
        conn, status=args.status, kind=args.kind, limit=args.limit, offset=args.offset
    )
    total = await count_dispatches(conn, status=args.status, kind=args.kind)
    if args.json:
        clean = [{k: v for k, v in _redact(r).items() if k != "payload"} for r in rows]
        emit_json({"dispatches": clean, "total": total, "limit": args.limit, "offset": args.offset})
        return
    if not rows:
        say("no dispatches")
        return
    _table(
        [
            [
                str(r["id"]),
                _short(r["kind"], 30),
                _short(r["deliver_to"], 30),
                str(r["status"]),
                f"{r['attempt']}/{r['max_attempts']}",
                _time(r["next_attempt_at"]) if r["status"] in ("pending", "delivering") else "-",
                _time(r["created_at"]),
                _short(r["last_error"], 40),
            ]
            for r in rows
        ]
    )
    if total > len(rows):
        first = args.offset + 1
        say(f"showing {first}-{args.offset + len(rows)} of {total} (use --offset/--limit)")


async def _existing(conn: aiosqlite.Connection, dispatch_id: str) -> dict[str, Any]:
    row = await get_dispatch(conn, dispatch_id)
    if row is None:
        raise DispatchNotFound(dispatch_id)
    return row


async def show(conn: aiosqlite.Connection, args: argparse.Namespace) -> None:
    row = _redact(await _existing(conn, args.dispatch_id))
    if args.json:
        emit_json(row)
        return
    payload = row.pop("payload", None)
    say(f"dispatch {args.dispatch_id}")
    for key, value in row.items():
        shown = _time(value) if key.endswith("_at") and value is not None else value
        say(f"  {key}: {'-' if shown is None else shown}")
    say("payload:")
    say(json.dumps(payload, indent=2, default=str))


async def ack(conn: aiosqlite.Connection, args: argparse.Namespace) -> None:
    if not await ack_dispatch(conn, args.dispatch_id, args.token):
        raise CliError(f"dispatch {args.dispatch_id} was not acked: its status changed meanwhile")
    if args.json:
        emit_json({"dispatch_id": args.dispatch_id, "acked": True, "status": "acked"})
    else:
        say(f"Acked dispatch {args.dispatch_id}")


async def retry(conn: aiosqlite.Connection, args: argparse.Namespace) -> None:
    await retry_dispatch(conn, args.dispatch_id)
    status = (await _existing(conn, args.dispatch_id))["status"]
    if args.json:
        emit_json({"dispatch_id": args.dispatch_id, "requeued": True, "status": status})
    else:
        say(f"Dispatch {args.dispatch_id} queued for retry ({status})")


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise CliError(f"{question}: pass --yes to confirm (stdin is not a terminal)")
    sys.stderr.write(f"{question}? [y/N] ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise CliError("aborted: nothing was purged")


async def purge(conn: aiosqlite.Connection, args: argparse.Namespace) -> None:
    status = (await _existing(conn, args.dispatch_id))["status"]
    if not args.yes:
        _confirm(f"purge dispatch {args.dispatch_id} ({status})")
    await purge_dispatch(conn, args.dispatch_id)
    if args.json:
        emit_json({"dispatch_id": args.dispatch_id, "purged": True, "status": status})
    else:
        say(f"Purged dispatch {args.dispatch_id} (was {status})")
