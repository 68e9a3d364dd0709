"""The engine's wake-ups on PostgreSQL: ``LISTEN`` on a connection of its own.

Triggers of the schema ``NOTIFY`` :data:`~.._schema_pg.WAKE_CHANNEL` when a write gives the
engines work sooner (a schedule created or due earlier, a run queued) and the outbox's
channel when a dispatch is enqueued, each when the writing transaction commits, whichever
program wrote. :class:`WakeListener` holds the ``LISTEN`` and calls ``wake`` on every
notification, so every node's loop ticks at once instead of at its next poll.

The listener never stops the engine: a lost connection (a restarted server, a terminated
session, a cut network) is reopened after a pause that doubles up to
:data:`MAX_RECONNECT_SECONDS`, and the loop polls meanwhile (:attr:`WakeListener.listening`
is false). Each (re)connection wakes the loop once: a write may have landed while no one
listened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._schema import WAKE_CHANNEL
from . import store

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("studio_scheduler_core")

RECONNECT_SECONDS: Final = 1.0
"""The first pause before reopening a lost listening connection."""
MAX_RECONNECT_SECONDS: Final = 30.0
"""The longest pause between two attempts to reopen it."""
CHECK_SECONDS: Final = 10.0
"""How long the connection may stay silent before a ``SELECT 1`` proves it still answers."""

# Unless the URL says otherwise: a server that vanished without closing the socket is
# noticed by the client's keepalives (and the probe's timeout) instead of never.
_CONNECT_DEFAULTS: Final = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def channels() -> tuple[str, ...]:
    """What the engine listens on: its own wake-ups and the outbox's enqueues."""
    from studio_outbox.postgres import CHANNEL  # psycopg is only needed on PostgreSQL

    return (WAKE_CHANNEL, CHANNEL)


class WakeListener:
    """``LISTEN`` on :func:`channels` on a dedicated autocommit connection; ``wake()`` on each
    notification. Started by :meth:`start`, closed by :meth:`aclose`."""

    def __init__(
        self,
        url: str,
        *,
        wake: Callable[[], None],
        application_name: str,
        check_seconds: float = CHECK_SECONDS,
    ) -> None:
        self._url = url
        self._wake = wake
        self._application_name = application_name
        self._check_seconds = check_seconds
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connected = False
        self.listening = False
        """Whether ``LISTEN`` holds on a live connection now (the loop polls otherwise)."""
        self.reconnects = 0
        """How many times the connection was reopened after it was lost."""

    @property
    def backend_pid(self) -> int | None:
        """The server process of the listening connection (``None`` while not connected)."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    def start(self) -> None:
        """Listen in a task of its own (the first ``LISTEN`` lands shortly after)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="studio-wake-listener")

    async def aclose(self) -> None:
        """Stop listening and close the connection."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._drop()

    async def _run(self) -> None:
        pause = RECONNECT_SECONDS
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the listener end: the loop polls meanwhile
                if self.listening:
                    pause = RECONNECT_SECONDS
                    logger.warning(
                        "wake-up listener lost its connection (%s: %s); polling until it is back",
                        type(exc).__name__,
                        exc,
                    )
            self.listening = False
            await self._drop()
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_RECONNECT_SECONDS)

    async def _listen(self) -> None:
        """Connect, ``LISTEN``, and wake on each notification; returns only by raising."""
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        given = conninfo_to_dict(self._url)
        options: dict[str, Any] = {k: v for k, v in _CONNECT_DEFAULTS.items() if k not in given}
        conn = self._conn = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, application_name=self._application_name, **options
        )
        await store.listen(conn, channels())
        if self._connected:
            self.reconnects += 1
            logger.info("wake-up listener is listening again")
        self._connected = self.listening = True
        self._wake()  # what was written while no one listened
        while True:
            async for _ in conn.notifies(timeout=self._check_seconds):
                self._wake()
            async with asyncio.timeout(self._check_seconds):
                await store.answer(conn)

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
