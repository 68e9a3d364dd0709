"""Built-in trigger sources (cron, interval), the registry, and the no-op default seams."""

from __future__ import annotations

from collections.abc import Iterable

import aiosqlite

from .._records.schedule import Schedule
from ..abc import Closeable, Occurrence, TriggerSource
from .cadence import advance
from .once import OnceTrigger


class CadenceTrigger:
    """cron or interval: one occurrence per due ``next_fire_at``; the missed-fire policy applies."""

    missed_fire_applies = True

    def __init__(self, trigger_type: str) -> None:
        self.trigger_type = trigger_type

    def next_fire_at(
        self, schedule: Schedule, *, due: float | None, now: float, timezone: str
    ) -> float | None:
        """cron: the next instant after now; interval: the next slot after now (no drift)."""
        return advance(schedule, due=due, now=now, timezone=timezone)

    async def occurrences(
        self,
        conn: aiosqlite.Connection,
        schedule: Schedule,
        *,
        now: float,
        timezone: str,
    ) -> list[Occurrence]:
        """The single occurrence due at the schedule's ``next_fire_at``."""
        due = schedule.next_fire_at
        context = {"scheduled": True, "fired_at": now, "due_at": due}
        return [Occurrence(schedule=schedule, due_at=due, trigger_context=context)]


class TriggerRegistry:
    """``trigger_type`` → :class:`TriggerSource`; the engine evaluates only registered types."""

    def __init__(self, sources: Iterable[TriggerSource] = ()) -> None:
        self._sources: dict[str, TriggerSource] = {}
        for source in sources:
            self.register(source)

    def register(self, source: TriggerSource) -> None:
        """Add (or replace) the source of ``source.trigger_type``."""
        self._sources[source.trigger_type] = source

    def get(self, trigger_type: str) -> TriggerSource | None:
        """The source for ``trigger_type``, if one is registered."""
        return self._sources.get(trigger_type)

    def types(self) -> tuple[str, ...]:
        """Registered trigger types, sorted."""
        return tuple(sorted(self._sources))

    def closeables(self) -> list[Closeable]:
        """The registered sources that hold resources (closed by the engine on stop)."""
        found: list[Closeable] = []
        for trigger_type in self.types():
            source = self._sources[trigger_type]
            if isinstance(source, Closeable):
                found.append(source)
        return found


def default_registry() -> TriggerRegistry:
    """cron, interval and at (github_poll registers its own source)."""
    return TriggerRegistry([CadenceTrigger("cron"), CadenceTrigger("interval"), OnceTrigger()])
