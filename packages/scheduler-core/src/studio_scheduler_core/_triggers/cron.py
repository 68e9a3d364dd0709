"""Cron in a configured time zone, with an explicit DST rule.

croniter iterates local wall-clock times. Given a tz-aware start it fires an ambiguous
local time (the fall-back hour) twice and moves a non-existent one (the spring-forward gap)
to whatever the arithmetic gives. Here croniter only walks *naive* wall-clock times, and each
one is mapped to exactly one instant:

- an ambiguous local time fires once, at its first occurrence (``fold=0``);
- a local time inside a gap fires once, at the first instant after the gap (the transition);
- an instant is only ever returned when it is strictly after the reference time, so several
  wall times that collapse onto one instant (``*/15`` inside a gap) fire once.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from .._exceptions import SchedulerError

_MACROS = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
_MAX_CANDIDATES = 2000


class CronError(SchedulerError, ValueError):
    """A cron expression is invalid or never fires (validation reports it per field)."""


@functools.lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """The :class:`ZoneInfo` for ``name`` (cached)."""
    return ZoneInfo(name)


def check_expression(expr: str) -> None:
    """Raise :class:`CronError` unless ``expr`` is a 5-field cron expression or a macro."""
    text = expr.strip()
    if not text:
        raise CronError("must not be empty")
    if text.startswith("@"):
        if text.lower() not in _MACROS:
            raise CronError(f"unknown macro {text!r} (use one of {', '.join(sorted(_MACROS))})")
    elif len(text.split()) != 5:
        raise CronError(f"must have 5 fields (minute hour day month weekday), got {text!r}")
    try:
        valid = croniter.is_valid(text)
    except (CroniterError, ValueError, TypeError):
        valid = False
    if not valid:
        raise CronError(f"not a valid cron expression: {text!r}")


def _offset(tz: ZoneInfo, epoch: float) -> timedelta:
    offset = datetime.fromtimestamp(epoch, tz).utcoffset()
    assert offset is not None
    return offset


def _to_instant(naive: datetime, tz: ZoneInfo) -> float:
    """Map a wall-clock time to one instant: first occurrence, or the end of a gap."""
    first = naive.replace(tzinfo=tz, fold=0)
    epoch = first.timestamp()
    if datetime.fromtimestamp(epoch, tz).replace(tzinfo=None) == naive:
        return epoch
    # Inside a gap: fold=0 and fold=1 land on either side of the transition. Bisect to the
    # first second that has the later offset: that is the first instant after the gap.
    a = first.timestamp()
    b = naive.replace(tzinfo=tz, fold=1).timestamp()
    lo, hi = (a, b) if a < b else (b, a)
    after = _offset(tz, hi)
    lo_i, hi_i = int(lo), int(hi) + 1
    while hi_i - lo_i > 1:
        mid = (lo_i + hi_i) // 2
        if _offset(tz, mid) == after:
            hi_i = mid
        else:
            lo_i = mid
    return float(hi_i)


def next_after(expr: str, tz_name: str, after: float) -> float:
    """The first fire instant of ``expr`` in ``tz_name`` strictly after epoch ``after``."""
    tz = zone(tz_name)
    start = datetime.fromtimestamp(after, tz).replace(tzinfo=None)
    try:
        it = croniter(expr.strip(), start)
        for _ in range(_MAX_CANDIDATES):
            candidate = it.get_next(datetime)
            instant = _to_instant(candidate, tz)
            if instant > after:
                return instant
    except CroniterBadDateError as exc:
        raise CronError(f"{expr!r} never fires") from exc
    except (CroniterBadCronError, CroniterError, ValueError) as exc:
        raise CronError(f"not a valid cron expression: {expr!r}") from exc
    raise CronError(f"{expr!r} found no fire time after {after}")


def iso(epoch: float, tz_name: str = "UTC") -> str:
    """ISO-8601 text of ``epoch`` in ``tz_name`` (``Z`` suffix for UTC)."""
    if tz_name == "UTC":
        return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")
    return datetime.fromtimestamp(epoch, zone(tz_name)).isoformat()
