"""The injectable clock.

Every time-based decision in Studio reads time through a :data:`Clock`, a zero-argument callable
returning UTC epoch seconds, so tests can move time without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]
"""A callable returning the current time as UTC epoch seconds."""


def system_clock() -> float:
    """Return the wall-clock time (``time.time()``)."""
    return time.time()


class ManualClock:
    """A clock that only moves when told to. Calling it returns the current value."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` and return the new time."""
        if seconds < 0:
            raise ValueError(f"seconds must not be negative, got {seconds!r}")
        self._now += seconds
        return self._now

    def set(self, when: float) -> None:
        """Set the clock to ``when`` (may move backwards, as a wall clock can)."""
        self._now = float(when)
