"""Value checks shared by the schedule validators: each refusal names the field."""

from __future__ import annotations

import math
from typing import Any

from .._exceptions import ScheduleValidationError


def err(field: str, message: str) -> ScheduleValidationError:
    """The refusal of ``field``."""
    return ScheduleValidationError(field, message)


def positive_int(field: str, value: Any, maximum: float) -> int:
    """``value`` if it is an integer in ``1..maximum``; else a refusal naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise err(field, f"must be an integer, got {value!r}")
    if not 1 <= value <= maximum:
        # str() of a huge int raises (Python's digit limit): describe it by its size instead.
        shown = (
            str(value) if value.bit_length() < 64 else f"an integer of {value.bit_length()} bits"
        )
        raise err(field, f"must be between 1 and {maximum:.0f}, got {shown}")
    return value


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` (not a number, NaN, infinite, too large)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def str_list(field: str, value: Any) -> list[str]:
    """A list of strings (``None`` is the empty list)."""
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise err(field, "must be a list of strings")
    return list(value)
