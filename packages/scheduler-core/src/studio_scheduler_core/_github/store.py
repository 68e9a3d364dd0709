"""github_poll's schedule-row writes: each its own transaction, guarded so that a poll that
finished after the row changed never overwrites the newer state."""

from __future__ import annotations

import logging
from typing import Any

import aiosqlite

from studio_state import execute, fetch_value, write_transaction

from .._schedules.store import set_enabled

logger = logging.getLogger("studio_scheduler_core")

GITHUB_AUTH = "schedule.disabled.github_auth"
AUTH_DISABLE_AFTER = 5


async def move_next(
    conn: aiosqlite.Connection, sid: str, *, expect: float, to: float, now: float
) -> bool:
    async with write_transaction(conn):
        changed = await execute(
            conn,
            "UPDATE schedules SET next_fire_at = ?, updated_at = ? "
            "WHERE id = ? AND enabled = 1 AND next_fire_at = ?",
            (to, now, sid, expect),
        )
    return changed == 1


async def stamp_healthy(conn: aiosqlite.Connection, sid: str, now: float) -> None:
    async with write_transaction(conn):
        await execute(
            conn,
            "UPDATE schedules SET last_healthy_poll_at = ?, poller_consecutive_401 = 0 "
            "WHERE id = ?",
            (now, sid),
        )


async def count_401(conn: aiosqlite.Connection, sid: str, repo: str, now: float) -> None:
    async with write_transaction(conn):
        await execute(
            conn,
            "UPDATE schedules SET poller_consecutive_401 = poller_consecutive_401 + 1 WHERE id = ?",
            (sid,),
        )
        count = int(
            await fetch_value(
                conn, "SELECT poller_consecutive_401 FROM schedules WHERE id = ?", (sid,)
            )
            or 0
        )
        logger.warning("github poll of %s: 401 Unauthorized (%d in a row)", repo, count)
        if count >= AUTH_DISABLE_AFTER:
            disabled = await set_enabled(
                conn,
                sid,
                enabled=False,
                reason_code=GITHUB_AUTH,
                reason_summary=(
                    f"GitHub answered 401 Unauthorized to {count} consecutive polls of {repo}; "
                    "check the token (GITHUB_TOKEN) and re-enable the schedule"
                ),
                disabled_reason=GITHUB_AUTH,
                now=now,
                metadata={"github_repo": repo, "poller_consecutive_401": count},
            )
            if disabled:
                logger.error("schedule %s disabled: %d consecutive 401s from %s", sid, count, repo)


async def quiet(
    conn: aiosqlite.Connection,
    sid: str,
    *,
    planned: float,
    old: Any,
    new: Any,
    etag: str | None,
    now: float,
) -> None:
    """Nothing to fire: move the cursor past filtered-out events and keep the ETag."""
    async with write_transaction(conn):
        await execute(
            conn,
            "UPDATE schedules SET github_cursor = ?, github_etag = ?, updated_at = ? "
            "WHERE id = ? AND enabled = 1 AND next_fire_at = ? "
            "AND github_cursor IS NOT DISTINCT FROM ?",
            (new, etag, now, sid, planned, old),
        )


async def arm(
    conn: aiosqlite.Connection, sid: str, *, planned: float, due: float, cursor: Any
) -> bool:
    """Make the row due again for its held batch (guarded: unchanged since the poll began)."""
    async with write_transaction(conn):
        changed = await execute(
            conn,
            "UPDATE schedules SET next_fire_at = ? "
            "WHERE id = ? AND enabled = 1 AND next_fire_at = ? "
            "AND github_cursor IS NOT DISTINCT FROM ?",
            (due, sid, planned, cursor),
        )
    return changed == 1
