"""``studio dispatch …``: inspect and operate the dispatch outbox, directly on the database.

Every command calls the ``studio_outbox`` functions the API uses. Ack tokens are never
printed (not in tables, not in ``--json``): a token is a consumer's secret.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import click

from .._context import open_db, resolve_db_path, run_async
from .._errors import CliError
from .._output import emit_json, fmt_time, print_record, print_rows, say, shorten
from .._types import VocabularyChoice, parse_json_flag
from ._actor import cli_actor
from ._common import confirm_or_abort, db_option, json_option, limit_option, offset_option

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


@click.group("dispatch")
def dispatch_group() -> None:
    """Inspect, acknowledge, retry and purge outbound dispatches."""


def redact(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row without its ack token (also removed from the decoded payload)."""
    clean = {key: value for key, value in row.items() if key != "ack_token"}
    payload = clean.get("payload")
    if isinstance(payload, Mapping):
        clean["payload"] = {key: value for key, value in payload.items() if key != "ack_token"}
    return clean


@dispatch_group.command("enqueue")
@click.option("--kind", required=True, help="The dispatch kind, e.g. deploy.finished.")
@click.option("--to", "deliver_to", required=True, metavar="DEST", help="Where to deliver it.")
@click.option("--body", metavar="JSON", help="The body: a JSON object.")
@click.option("--dedup-key", metavar="KEY", help="Enqueue at most once per KEY.")
@click.option("--ack", is_flag=True, help="Resend until the consumer acks it.")
@db_option
@json_option
def enqueue(
    kind: str,
    deliver_to: str,
    body: str | None,
    dedup_key: str | None,
    ack: bool,
    db: str | None,
    as_json: bool,
) -> None:
    """Enqueue a dispatch directly on the database (Studio's engine delivers it).

    Prints the id; a taken --dedup-key prints the existing row's id (created: false).

    \b
    Example:
      studio dispatch enqueue --kind deploy.finished --to https://hooks.example/x --body '{}'
    """
    decoded = parse_json_flag("--body", body)
    if decoded is not None and not isinstance(decoded, dict):
        raise CliError(f"--body: must be a JSON object, got {type(decoded).__name__}")
    db_path = resolve_db_path(db)

    async def _enqueue() -> tuple[str, bool]:
        from studio_outbox import dispatch_id_for_dedup_key, enqueue_dispatch
        from studio_state import write_transaction

        async with open_db(db_path, outbox_only=True) as conn, write_transaction(conn):
            existing = None
            if dedup_key is not None:
                existing = await dispatch_id_for_dedup_key(conn, dedup_key)
            dispatch_id = await enqueue_dispatch(
                conn,
                kind=kind,
                deliver_to=deliver_to,
                body=decoded,
                dedup_key=dedup_key,
                ack_required=ack,
                actor=cli_actor(),
            )
            return dispatch_id, existing is None

    dispatch_id, created = run_async(_enqueue)
    if as_json:
        emit_json({"id": dispatch_id, "created": created})
    elif created:
        say(dispatch_id)
    else:
        say(f"{dispatch_id} (already enqueued with --dedup-key {dedup_key})")


@dispatch_group.command("list")
@click.option(
    "--status",
    type=VocabularyChoice("DISPATCH_STATUSES", "studio_outbox"),
    help="Only this status.",
)
@click.option("--kind", help="Only this kind.")
@limit_option(50)
@offset_option
@db_option
@json_option
def list_dispatches(
    status: str | None, kind: str | None, limit: int, offset: int, db: str | None, as_json: bool
) -> None:
    """List dispatches, newest first.

    \b
    Example:
      studio dispatch list --status dead_letter
    """
    db_path = resolve_db_path(db, existing=True)

    async def _list() -> tuple[list[dict[str, Any]], int]:
        from studio_outbox import count_dispatches
        from studio_outbox import list_dispatches as list_rows

        async with open_db(db_path, outbox_only=True) as conn:
            rows = await list_rows(conn, status=status, kind=kind, limit=limit, offset=offset)
            return rows, await count_dispatches(conn, status=status, kind=kind)

    rows, total = run_async(_list)
    rows = [redact(row) for row in rows]
    if as_json:
        for row in rows:
            row.pop("payload", None)
        emit_json({"dispatches": rows, "total": total, "limit": limit, "offset": offset})
        return
    table = [
        [
            str(r.get("id")),
            str(r.get("kind")),
            shorten(r.get("deliver_to"), 30),
            str(r.get("status")),
            f"{r.get('attempt')}/{r.get('max_attempts')}",
            fmt_time(r.get("next_attempt_at"))
            if r.get("status") in ("pending", "delivering")
            else "-",
            fmt_time(r.get("created_at")),
            shorten(r.get("last_error"), 40),
        ]
        for r in rows
    ]
    print_rows(_COLUMNS, table, empty="no dispatches")
    if rows and total > len(rows):
        say(f"showing {offset + 1}-{offset + len(rows)} of {total} (use --offset/--limit)")


@dispatch_group.command("show")
@click.argument("dispatch_id")
@db_option
@json_option
def show(dispatch_id: str, db: str | None, as_json: bool) -> None:
    """Show one dispatch with its payload (the ack token is never shown)."""
    db_path = resolve_db_path(db, existing=True)

    async def _show() -> dict[str, Any] | None:
        from studio_outbox import get_dispatch

        async with open_db(db_path, outbox_only=True) as conn:
            return await get_dispatch(conn, dispatch_id)

    row = run_async(_show)
    if row is None:
        raise CliError(f"dispatch not found: {dispatch_id}")
    clean = redact(row)
    if as_json:
        emit_json(clean)
        return
    payload = clean.pop("payload", None)
    print_record(clean, title=f"dispatch {dispatch_id}")
    if payload is not None:
        say("payload:")
        say(json.dumps(payload, indent=2, default=str))


@dispatch_group.command("ack")
@click.argument("dispatch_id")
@click.argument("token")
@db_option
@json_option
def ack(dispatch_id: str, token: str, db: str | None, as_json: bool) -> None:
    """Acknowledge DISPATCH_ID with the consumer's TOKEN."""
    db_path = resolve_db_path(db, existing=True)

    async def _ack() -> bool:
        from studio_outbox import ack_dispatch

        async with open_db(db_path, outbox_only=True) as conn:
            return await ack_dispatch(conn, dispatch_id, token)

    if not run_async(_ack):
        raise CliError(f"dispatch {dispatch_id} was not acked: its status changed concurrently")
    if as_json:
        emit_json({"dispatch_id": dispatch_id, "acked": True, "status": "acked"})
    else:
        say(f"Acked dispatch {dispatch_id}")


@dispatch_group.command("retry")
@click.argument("dispatch_id")
@db_option
@json_option
def retry(dispatch_id: str, db: str | None, as_json: bool) -> None:
    """Send a dead-lettered or expired dispatch again (attempts reset)."""
    db_path = resolve_db_path(db, existing=True)

    async def _retry() -> dict[str, Any] | None:
        from studio_outbox import get_dispatch, retry_dispatch

        async with open_db(db_path, outbox_only=True) as conn:
            await retry_dispatch(conn, dispatch_id, actor=cli_actor())
            return await get_dispatch(conn, dispatch_id)

    row = run_async(_retry)
    status = row.get("status") if row else "pending"
    if as_json:
        emit_json({"dispatch_id": dispatch_id, "requeued": True, "status": status})
    else:
        say(f"Dispatch {dispatch_id} queued for retry ({status})")


@dispatch_group.command("purge")
@click.argument("dispatch_id", required=False)
@click.option(
    "--status",
    type=click.Choice(("pending", "delivered", "acked", "dead_letter", "expired")),
    help="Purge every row with this status (never delivering rows).",
)
@click.option("--before", metavar="TIME", help="With --status: only rows last changed before TIME.")
@click.option("--dry-run", is_flag=True, help="With --status: only say how many rows would go.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@db_option
@json_option
def purge(
    dispatch_id: str | None,
    status: str | None,
    before: str | None,
    dry_run: bool,
    yes: bool,
    db: str | None,
    as_json: bool,
) -> None:
    """Delete one dispatch (refused while it is being delivered), or in bulk with --status.

    \b
    Examples:
      studio dispatch purge 0123456789ab
      studio dispatch purge --status dead_letter --before 2026-01-01T00:00Z --dry-run
    """
    if status is not None or before is not None or dry_run:
        if dispatch_id is not None:
            raise CliError("give a DISPATCH_ID or --status, not both")
        if status is None:
            raise CliError("--status: required with --before or --dry-run")
        _purge_many(status, before, dry_run, yes, db, as_json)
        return
    if dispatch_id is None:
        raise CliError("give a DISPATCH_ID, or --status to purge in bulk")
    db_path = resolve_db_path(db, existing=True)

    async def _purge() -> str:
        from studio_outbox import get_dispatch, purge_dispatch

        async with open_db(db_path, outbox_only=True) as conn:
            row = await get_dispatch(conn, dispatch_id)
            if row is None:
                raise CliError(f"dispatch not found: {dispatch_id}")
            confirm_or_abort(f"purge dispatch {dispatch_id} ({row.get('status')})", yes)
            await purge_dispatch(conn, dispatch_id, actor=cli_actor())
            return str(row.get("status"))

    status_was = run_async(_purge)
    if as_json:
        emit_json({"dispatch_id": dispatch_id, "purged": True, "status": status_was})
    else:
        say(f"Purged dispatch {dispatch_id} (was {status_was})")


def _purge_many(
    status: str, before: str | None, dry_run: bool, yes: bool, db: str | None, as_json: bool
) -> None:
    """``purge --status``: count, confirm, then delete in batches (each row audited)."""
    cutoff = _instant("--before", before)
    db_path = resolve_db_path(db, existing=True)
    actor = cli_actor()

    async def _run() -> tuple[int, int]:
        from studio_outbox import purge_dispatches

        async with open_db(db_path, outbox_only=True) as conn:
            would = await purge_dispatches(
                conn, status=status, before=cutoff, actor=actor, dry_run=True
            )
            if dry_run or would == 0:
                return would, 0
            confirm_or_abort(f"purge {would} {status} dispatches", yes)
            return would, await purge_dispatches(conn, status=status, before=cutoff, actor=actor)

    would, removed = run_async(_run)
    when = f" last changed before {before}" if before else ""
    if as_json:
        emit_json(
            {
                "status": status,
                "before": cutoff,
                "dry_run": dry_run,
                "would_remove": would,
                "removed": removed,
            }
        )
    elif dry_run:
        say(f"Would remove {would} {status} dispatches{when} (dry run: nothing removed)")
    else:
        say(f"Removed {removed} {status} dispatches{when}")


def _instant(flag: str, text: str | None) -> float | None:
    """An epoch-seconds number or an ISO 8601 time with an offset; CliError naming ``flag``."""
    if text is None:
        return None
    from datetime import datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{flag}: {text!r} is not epoch seconds or an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise CliError(f"{flag}: {text!r} needs an offset (e.g. Z or +02:00)")
    return moment.timestamp()
