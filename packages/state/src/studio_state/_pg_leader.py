"""Leader election on PostgreSQL: a session advisory lock held on a dedicated connection.

Exactly one candidate holds the lock at a time. The lock belongs to the session, so it is
released by PostgreSQL the moment the holder's connection ends (its process died, its backend
was terminated, it closed): a candidate that tries every ``tick_seconds`` then takes over
within one tick. A leader learns that it lost its connection at its own next tick (the check
fails) and stops acting as leader; work done under leadership must therefore stay safe if two
nodes briefly overlap (Studio's scheduled fires carry a unique occurrence key for this).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any, Final

import psycopg

from ._exceptions import InvalidSetting
from ._node import APPLICATION_PREFIX, check_node_id, default_node_id

SCHEDULER_LOCK_KEY: Final = 0x5354_5544_4C45  # "STUDLE": schedule evaluation's leader
"""The advisory lock key of schedule evaluation's leader."""

# A peer that vanishes without closing its socket (a cut network, a frozen host) is found by
# the server's TCP keepalives after about idle + interval * count seconds.
_KEEPALIVE_OPTIONS: Final = (
    "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3"
)


class LeaderElection:
    """One candidate for leadership: call :meth:`tick` regularly, or :meth:`run` it.

    ``conninfo`` is a libpq URL or key/value string; the candidate opens its own dedicated
    connection (autocommit, ``application_name = studio:<node_id>``) and reopens it after a
    failure. ``key`` names what is led (default: schedule evaluation).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        node_id: str | None = None,
        key: int = SCHEDULER_LOCK_KEY,
        tick_seconds: float = 1.0,
        connect_timeout: int = 5,
    ) -> None:
        self._node_id = check_node_id(default_node_id() if node_id is None else node_id)
        if isinstance(key, bool) or not isinstance(key, int) or not -(2**63) <= key < 2**63:
            raise InvalidSetting(f"key must be a 64-bit int, got {key!r}")
        if (
            isinstance(tick_seconds, bool)
            or not isinstance(tick_seconds, int | float)
            or not math.isfinite(tick_seconds)
            or tick_seconds <= 0
        ):
            raise InvalidSetting(f"tick_seconds must be a positive number, got {tick_seconds!r}")
        if not isinstance(conninfo, str) or not conninfo:
            raise InvalidSetting("conninfo must be a non-empty libpq connection string")
        self._conninfo = conninfo
        self._key = key
        self._tick = float(tick_seconds)
        self._connect_timeout = connect_timeout
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._leader = False

    @property
    def node_id(self) -> str:
        """This candidate's node id (``application_name`` is ``studio:<node_id>``)."""
        return self._node_id

    @property
    def tick_seconds(self) -> float:
        """How often :meth:`run` ticks."""
        return self._tick

    @property
    def is_leader(self) -> bool:
        """Whether the last tick found this candidate holding the lock."""
        return self._leader

    @property
    def backend_pid(self) -> int | None:
        """The server process of the dedicated connection (None when not connected)."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = self._conn
        if conn is None or conn.closed:
            conn = self._conn = await psycopg.AsyncConnection.connect(
                self._conninfo,
                autocommit=True,
                application_name=APPLICATION_PREFIX + self._node_id,
                connect_timeout=self._connect_timeout,
                options=_KEEPALIVE_OPTIONS,
            )
        return conn

    async def tick(self) -> bool:
        """One round: a leader checks its session is alive, a follower tries the lock.

        Returns whether this candidate is the leader now. A lost or unreachable connection
        makes it a follower (never an exception); the next tick reconnects.
        """
        try:
            # A peer that stops answering (a cut network) must not stall the tick.
            async with asyncio.timeout(self._connect_timeout + self._tick):
                await self._round()
        except (psycopg.Error, OSError, TimeoutError):
            self._leader = False
            await self._drop()
        return self._leader

    async def _round(self) -> None:
        conn = await self._connect()
        if self._leader:
            # The lock lives as long as the session: a session that still answers holds it.
            await conn.execute("SELECT 1")
        else:
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,))
            row = await cursor.fetchone()
            self._leader = bool(row and row[0])

    async def run(
        self,
        stop: asyncio.Event,
        on_change: Callable[[bool], Awaitable[None] | None] | None = None,
    ) -> None:
        """Tick every ``tick_seconds`` until ``stop`` is set, then :meth:`close`.

        ``on_change(is_leader)`` is called (and awaited if it returns an awaitable) each time
        leadership is gained or lost.
        """
        was = self._leader
        try:
            while not stop.is_set():
                now = await self.tick()
                if now != was and on_change is not None:
                    result = on_change(now)
                    if result is not None:
                        await result
                was = now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._tick)
        finally:
            await self.close()
            if was and on_change is not None:
                result = on_change(False)
                if result is not None:
                    await result

    async def close(self) -> None:
        """Give up leadership at once: unlock, then close the dedicated connection."""
        was, self._leader = self._leader, False
        conn = self._conn
        if was and conn is not None and not conn.closed:
            # Closing alone releases the lock too, but only once the server has noticed.
            with contextlib.suppress(psycopg.Error, OSError, TimeoutError):
                async with asyncio.timeout(self._tick + self._connect_timeout):
                    await conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))
        await self._drop()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
