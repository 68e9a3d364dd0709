"""The SQL of admission's holds on runs that any node's worker runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite

from studio_state import fetch_all, fetch_ids_in

_IN_FLIGHT = "status IN ('queued', 'running')"


async def unfinished(conn: aiosqlite.Connection, run_ids: Sequence[str]) -> set[str]:
    """Which of ``run_ids`` are still queued or running."""
    return await fetch_ids_in(
        conn, f"SELECT id FROM schedule_runs WHERE id IN ({{marks}}) AND {_IN_FLIGHT}", run_ids
    )


async def top_level_in_flight(conn: aiosqlite.Connection) -> list[dict[str, Any]]:
    """Top-level scheduled runs queued or running under a worker's lease: the fires a
    previous leader admitted that still hold their slot."""
    return await fetch_all(
        conn,
        "SELECT id, schedule_id, fired_at FROM schedule_runs "
        f"WHERE {_IN_FLIGHT} AND schedule_id IS NOT NULL AND chain_depth = 0 "
        "AND (status = 'queued' OR leased_by IS NOT NULL) ORDER BY fired_at, id",
    )
