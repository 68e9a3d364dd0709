"""Leader election on PostgreSQL: a session advisory lock held on a dedicated connection.

Exactly one candidate holds the lock at a time. The lock belongs to the session, so PostgreSQL
releases it when the holder's session ends. A candidate :meth:`~LeaderElection.tick`\\ s every
``tick_seconds`` (1 s by default): a follower tries the lock, a leader confirms its session.

How long each side waits, so that two leaders never act at once:

- A process that dies (``kill -9``, a crash) closes its sockets: the server ends the session
  at once and a follower takes over at its next attempt, within ``tick_seconds``.
- A holder that hangs (a stopped process, a cut network, a frozen host) keeps its socket
  open. The server ends such a session ``session_timeout_seconds`` (10 s) after the last query
  it answered: ``idle_session_timeout`` (a stopped process whose kernel still acknowledges
  TCP), ``tcp_user_timeout`` and TCP keepalives (a peer that no longer acknowledges), all set
  on the election session itself.
- A leader leads only while its lease lasts: ``lease_seconds`` (5 s) from the moment it sent
  the last query that confirmed its session. The server cannot end that session before
  ``session_timeout_seconds`` have passed since then, so a leader that cannot confirm stops
  leading (``is_leader`` turns false by the clock alone, with no query) at least
  ``session_timeout_seconds - lease_seconds`` before another candidate can win. A leader
  whose lease lapsed closes its session and competes again as a follower.

A session ended abruptly while its holder still runs (an operator's
``pg_terminate_backend``, a server restart) is noticed at the holder's next tick; work done
under leadership must stay safe over such a short overlap (Studio's scheduled fires are
guarded by their occurrence key).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ._exceptions import InvalidSetting
from ._node import APPLICATION_PREFIX, check_node_id, default_node_id

SCHEDULER_LOCK_KEY: Final = 0x5354_5544_4C45  # "STUDLE": schedule evaluation's leader
"""The advisory lock key of schedule evaluation's leader."""

ATTEMPT_SECONDS: Final = 1.0
"""How often a candidate ticks by default: a follower tries the lock, a leader confirms."""
LEASE_SECONDS: Final = 5.0
"""How long after its last confirmed query a leader still leads, by default."""
SESSION_TIMEOUT_SECONDS: Final = 10
"""After how long the server ends a hung election session, by default."""

# The clock of the lease. CLOCK_BOOTTIME keeps counting while the host is suspended (the
# server's timers do too); CLOCK_MONOTONIC elsewhere.
_BOOTTIME: Final = getattr(time, "CLOCK_BOOTTIME", None)


def lease_clock() -> float:
    """Seconds on the clock the lease is measured with (never goes back)."""
    return time.monotonic() if _BOOTTIME is None else time.clock_gettime(_BOOTTIME)


def _positive(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidSetting(f"{name} must be a positive number, got {value!r}")
    return float(value)


class LeaderElection:
    """One candidate for leadership: call :meth:`tick` every ``tick_seconds``, or :meth:`run` it.

    ``conninfo`` is a libpq URL or key/value string; the candidate opens its own dedicated
    connection (autocommit, ``application_name = studio:<node_id>``, TCP keepalives and
    ``tcp_user_timeout`` on both ends, ``idle_session_timeout`` on the server) and reopens it
    after a failure. ``key`` names what is led (default: schedule evaluation). Timings must
    satisfy ``tick_seconds < lease_seconds < session_timeout_seconds`` (see the module).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        node_id: str | None = None,
        key: int = SCHEDULER_LOCK_KEY,
        tick_seconds: float = ATTEMPT_SECONDS,
        connect_timeout: int = 5,
        lease_seconds: float = LEASE_SECONDS,
        session_timeout_seconds: int = SESSION_TIMEOUT_SECONDS,
    ) -> None:
        self._node_id = check_node_id(default_node_id() if node_id is None else node_id)
        if isinstance(key, bool) or not isinstance(key, int) or not -(2**63) <= key < 2**63:
            raise InvalidSetting(f"key must be a 64-bit int, got {key!r}")
        self._tick = _positive("tick_seconds", tick_seconds)
        self._lease = _positive("lease_seconds", lease_seconds)
        if isinstance(session_timeout_seconds, bool) or not isinstance(
            session_timeout_seconds, int
        ):
            raise InvalidSetting(
                f"session_timeout_seconds must be a whole number, got {session_timeout_seconds!r}"
            )
        if not self._tick < self._lease < session_timeout_seconds:
            raise InvalidSetting(
                "tick_seconds < lease_seconds < session_timeout_seconds must hold, got "
                f"{tick_seconds!r}, {lease_seconds!r}, {session_timeout_seconds!r}"
            )
        if not isinstance(conninfo, str) or not conninfo:
            raise InvalidSetting("conninfo must be a non-empty libpq connection string")
        self._conninfo = conninfo
        self._key = key
        self._session_timeout = session_timeout_seconds
        self._connect_timeout = connect_timeout
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._leader = False
        self._lease_until = 0.0

    @property
    def node_id(self) -> str:
        """This candidate's node id (``application_name`` is ``studio:<node_id>``)."""
        return self._node_id

    @property
    def tick_seconds(self) -> float:
        """How often :meth:`run` ticks (a follower's attempts, a leader's confirmations)."""
        return self._tick

    @property
    def lease_seconds(self) -> float:
        """How long after its last confirmed query a leader still leads."""
        return self._lease

    @property
    def session_timeout_seconds(self) -> int:
        """After how long without an answer the server ends this candidate's session."""
        return self._session_timeout

    @property
    def is_leader(self) -> bool:
        """Whether this candidate holds the lock and its lease has not lapsed (read from the
        clock: a leader that could not confirm in time is no longer one, without a query)."""
        return self._leader and lease_clock() < self._lease_until

    @property
    def backend_pid(self) -> int | None:
        """The server process of the dedicated connection (None when not connected)."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    def _connect_options(self) -> dict[str, Any]:
        timeout = self._session_timeout
        idle = max(1, timeout // 2)
        options: dict[str, Any] = {
            # This end notices a silent server too (the lease does not depend on it).
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": 1,
            "keepalives_count": max(1, timeout - idle),
            # The server's end: a peer that stops acknowledging is dropped after `timeout`.
            "options": (
                f"{conninfo_to_dict(self._conninfo).get('options') or ''} "
                f"-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval=1 "
                f"-c tcp_keepalives_count={max(1, timeout - idle)}"
            ).strip(),
        }
        if psycopg.pq.version() >= 120000:  # libpq knows tcp_user_timeout from 12 on
            options["tcp_user_timeout"] = timeout * 1000
        return options

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = self._conn
        if conn is None or conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo,
                autocommit=True,
                application_name=APPLICATION_PREFIX + self._node_id,
                connect_timeout=self._connect_timeout,
                **self._connect_options(),
            )
            self._conn = conn
            try:
                await self._limit_session(conn)
            except BaseException:
                await self._drop()
                raise
        return conn

    async def _limit_session(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """The server ends this session when it hangs (the parameters exist from 12 and 14)."""
        millis = self._session_timeout * 1000
        version = conn.info.server_version
        if version >= 120000:
            await conn.execute(f"SET tcp_user_timeout = {millis}")
        if version >= 140000:
            # A stopped process's kernel still acknowledges TCP: only this notices it.
            await conn.execute(f"SET idle_session_timeout = {millis}")

    async def tick(self) -> bool:
        """One round: a leader confirms its session, a follower tries the lock.

        Returns whether this candidate is the leader now. A lost or unreachable connection
        makes it a follower (never an exception); the next tick reconnects. A leader whose
        lease lapsed before this round gives the session up and is a follower.
        """
        try:
            # A peer that stops answering (a cut network) must not stall the tick.
            bound = (
                max(self._lease_until - lease_clock(), 0.05)  # no confirmation after the lease
                if self._leader
                else self._connect_timeout + self._tick
            )
            async with asyncio.timeout(bound):
                await self._round()
        except (psycopg.Error, OSError, TimeoutError):
            self._leader = False
            await self._drop()
        return self.is_leader

    async def _round(self) -> None:
        if self._leader and not self.is_leader:
            # Not confirmed within the lease: the server may end the session (and another
            # candidate win) any moment now. Let go of it; the next round competes afresh.
            self._leader = False
            await self._drop()
            return
        conn = await self._connect()
        sent = lease_clock()
        if self._leader:
            # The lock lives as long as the session: a session that still answers holds it.
            await conn.execute("SELECT 1")
        else:
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,))
            row = await cursor.fetchone()
            self._leader = bool(row and row[0])
        if self._leader:
            # The server answered a query sent at `sent`: it cannot end the session before
            # `sent + session_timeout_seconds`, so leading until `sent + lease` is safe.
            self._lease_until = sent + self._lease

    async def run(
        self,
        stop: asyncio.Event,
        on_change: Callable[[bool], Awaitable[None] | None] | None = None,
    ) -> None:
        """Tick every ``tick_seconds`` until ``stop`` is set, then :meth:`close`.

        ``on_change(is_leader)`` is called (and awaited if it returns an awaitable) each time
        leadership is gained or lost.
        """
        was = self.is_leader
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
