"""The SQL of usage evidence: the invocation a report names, the ``sessions`` row it writes,
and the spend summed over a schedule's runs (what the budget gates compare)."""

from __future__ import annotations

from typing import Any

import aiosqlite

from studio_state import fetch_one


async def invocation_start(conn: aiosqlite.Connection, invocation_id: str) -> dict[str, Any] | None:
    """The invocation's ``id`` and ``started_at`` (``None``: no such invocation)."""
    return await fetch_one(
        conn, "SELECT id, started_at FROM invocations WHERE id = ?", (invocation_id,)
    )


async def insert_session(
    conn: aiosqlite.Connection,
    *,
    session_id: str,
    invocation_id: str,
    status: str,
    input_tokens: int | None,
    output_tokens: int | None,
    cost_usd: float | None,
    started_at: Any,
    ended_at: float | None,
    now: float,
) -> None:
    """Insert one ``sessions`` row (in the caller's open transaction)."""
    await conn.execute(
        "INSERT INTO sessions (id, invocation_id, status, input_tokens, output_tokens, "
        "total_cost_usd, started_at, ended_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session_id,
            invocation_id,
            status,
            input_tokens,
            output_tokens,
            cost_usd,
            started_at,
            ended_at,
            now,
        ),
    )


async def schedule_spend(conn: aiosqlite.Connection, schedule_id: str) -> tuple[float, int]:
    """``(cost_usd, tokens)`` summed over the sessions of every run of the schedule."""
    row = await fetch_one(
        conn,
        "SELECT COALESCE(SUM(s.total_cost_usd), 0) AS cost, "
        "COALESCE(SUM(COALESCE(s.input_tokens, 0) + COALESCE(s.output_tokens, 0)), 0) AS tokens "
        "FROM schedule_runs r JOIN sessions s ON s.invocation_id = r.invocation_id "
        "WHERE r.schedule_id = ? AND r.invocation_id IS NOT NULL",
        (schedule_id,),
    )
    assert row is not None
    return float(row["cost"]), int(row["tokens"])
