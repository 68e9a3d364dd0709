"""Durations: ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` (or an integer) as whole seconds."""

from __future__ import annotations

import re

from ..checks import err

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
"""The unit suffixes and their seconds."""
MAX_DURATION_SEC = 3660 * 86_400
"""The longest duration parsed (about ten years); each field then applies its own bound."""
_DURATION = re.compile(r"([0-9]{1,10})([smhd]?)")


def parse_duration(field: str, value: object) -> int:
    """``value`` in whole seconds: an integer (or its digits), or a number with a unit suffix.

    Raises :class:`~studio_scheduler_core.ScheduleValidationError` naming ``field`` for
    anything else (a float, a negative number, an unknown unit, a value beyond
    :data:`MAX_DURATION_SEC`).
    """
    if isinstance(value, bool):
        raise err(field, f"must be a duration such as '90s', '15m', '2h', '1d', got {value!r}")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value.strip())):
        seconds = int(match.group(1)) * UNITS[match.group(2) or "s"]
    else:
        raise err(
            field,
            f"must be whole seconds (an integer) or a duration such as '90s', '15m', '2h', "
            f"'1d', got {value!r}",
        )
    if not 0 <= seconds <= MAX_DURATION_SEC:
        shown = seconds if seconds.bit_length() < 64 else f"{seconds.bit_length()} bits"
        raise err(field, f"must be between 0 and {MAX_DURATION_SEC} seconds, got {shown}")
    return seconds


def parse_minutes(field: str, value: object) -> int:
    """Whole minutes: an integer as given, or a duration that is a whole number of minutes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    seconds = parse_duration(field, value)
    if seconds % 60:
        raise err(field, f"must be whole minutes, got {value!r}")
    return seconds // 60
