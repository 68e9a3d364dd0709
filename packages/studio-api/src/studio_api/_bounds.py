"""Upper bounds of the numeric schedule fields, shared by the API's request models and the CLI.

A value beyond its bound is refused naming the field (422 from the API, exit 1 from the CLI)
before anything is stored: an interval of a billion years is a typo, and SQLite's 64-bit
integers or a float timestamp would overflow on it further down.
"""

from __future__ import annotations

import math

DAY_SECONDS = 86_400
MAX_INTERVAL_SEC = 366 * DAY_SECONDS
MAX_POLL_INTERVAL_SEC = DAY_SECONDS
MAX_COUNT = 2**31 - 1
MAX_BUDGET_USD = 1e9

FIELD_LIMITS: dict[str, float] = {
    "interval_sec": MAX_INTERVAL_SEC,
    "poll_interval_sec": MAX_POLL_INTERVAL_SEC,
    "max_runs": MAX_COUNT,
    "budget_tokens": MAX_COUNT,
    "budget_usd": MAX_BUDGET_USD,
}
"""Field name → the largest value accepted (inclusive)."""

MIN_COUNT = -(2**31)
"""Lowest value the integer fields' type accepts; whether it is meaningful (a positive
interval, at least one run) is the schedule service's to judge, with its own message."""


def check_field_limit(field: str, value: float) -> float:
    """Return ``value`` if it is finite and within ``field``'s bounds; else ``ValueError``."""
    limit = FIELD_LIMITS[field]
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    if value > limit:
        raise ValueError(f"must be at most {limit:.0f}")
    if value < MIN_COUNT:
        raise ValueError(f"must be at least {MIN_COUNT}")
    return value
