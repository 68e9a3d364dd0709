"""Which node leads now, as any session of the database sees it: the session that holds the
election's advisory lock (``pg_locks``) is named ``studio:<node_id>`` (its
``application_name``)."""

from __future__ import annotations

import aiosqlite

from ._node import APPLICATION_PREFIX
from ._pg_leader import SCHEDULER_LOCK_KEY
from ._query import fetch_one

_LEADER_SESSION = (
    "SELECT a.application_name AS application_name FROM pg_locks l "
    "JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND ((l.classid::bigint << 32) | l.objid::bigint) = ? LIMIT 1"
)


async def leading_node(conn: aiosqlite.Connection, *, key: int = SCHEDULER_LOCK_KEY) -> str | None:
    """The id of the node whose election session holds the leader lock ``key`` of the
    PostgreSQL database ``conn`` is on, or ``None`` (no leader now, or a lock holder that is
    not a Studio election session)."""
    row = await fetch_one(conn, _LEADER_SESSION, (key,))
    name = "" if row is None else str(row["application_name"] or "")
    if not name.startswith(APPLICATION_PREFIX):
        return None
    return name[len(APPLICATION_PREFIX) :]
