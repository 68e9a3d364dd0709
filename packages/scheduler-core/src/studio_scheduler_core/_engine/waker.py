"""The loop's sleep: until a target time, an in-process wake-up, or another process's write.

Another process (the CLI) writing to the database is noticed through ``PRAGMA data_version``,
read once a second while asleep; ``wake()`` interrupts the sleep at once. On PostgreSQL a
:class:`~.listener.WakeListener` calls ``wake()`` on each notification; while it listens, the
poll is not needed and is skipped (it resumes while the listener reconnects).
"""

from __future__ import annotations

import asyncio

import aiosqlite

from studio_state import Clock

from . import store
from .listener import WakeListener

DATA_VERSION_EVERY = 1.0
"""Seconds between two reads of ``PRAGMA data_version`` while the loop sleeps."""


class Waker:
    """The wake-up event, the last ``data_version`` seen, and whether the loop is closing."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._event = asyncio.Event()
        self._data_version = 0
        self._listener: WakeListener | None = None
        self.closed = False

    def wake(self) -> None:
        """End the current (or the next) sleep now."""
        self._event.set()

    def begin_tick(self) -> None:
        """A tick starts: wake-ups before this point are served by it."""
        self._event.clear()

    def close(self) -> None:
        """The engine stops: end every sleep, start no tick."""
        self.closed = True
        self._event.set()

    def listen(self, listener: WakeListener) -> WakeListener:
        """Start ``listener`` (PostgreSQL): while it listens, sleeps skip the poll."""
        self._listener = listener
        listener.start()
        return listener

    @property
    def listening(self) -> bool:
        """Whether notifications wake the loop now (no poll needed)."""
        return self._listener is not None and self._listener.listening

    async def open(self, conn: aiosqlite.Connection) -> None:
        """The engine starts: remember the current ``data_version``."""
        self.closed = False
        self._data_version = await _data_version(conn)

    async def sleep_until(
        self, conn: aiosqlite.Connection, target: float, *, failed: bool = False
    ) -> None:
        """Sleep until ``target``, a wake-up, a close, or a write by another process.

        ``failed``: the tick failed. While listening (no poll), one read then raises if the
        connection broke, ending the loop as the poll's read would.
        """
        if failed and self.listening:
            self._data_version = await _data_version(conn)
        while not self.closed:
            remaining = target - self._clock()
            if remaining <= 0 or self._event.is_set():
                return
            try:
                await asyncio.wait_for(
                    self._event.wait(), timeout=min(remaining, DATA_VERSION_EVERY)
                )
                return
            except TimeoutError:
                pass
            if self.listening:
                continue
            version = await _data_version(conn)
            if version != self._data_version:
                self._data_version = version
                return


async def _data_version(conn: aiosqlite.Connection) -> int:
    return await store.data_version(conn)
