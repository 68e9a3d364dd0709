"""The validation of a schedule's policy fields.

Every field is optional (``None`` keeps the behaviour of a schedule without it). The fields
themselves are columns of the ``Schedule`` and ``Run`` records (marked ``own_check``: these
checks judge them); the row codec, the field sets and the API models come from the records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any, TypedDict

from .._exceptions import ScheduleValidationError
from .._records.vocab import OVERLAP_POLICIES

RETRY_KEYS = ("max_attempts", "backoff_sec", "backoff_factor", "max_backoff_sec")
RETRY_DEFAULTS: Mapping[str, int | float] = {
    "backoff_sec": 10,
    "backoff_factor": 2.0,
    "max_backoff_sec": 3600,
}
"""The retry keys' defaults (``max_attempts`` is required)."""
MAX_ATTEMPTS = 10
MAX_BACKOFF_SEC = 86_400
MAX_BACKOFF_FACTOR = 10
MAX_CATCHUP_WINDOW_SEC = 366 * 86_400
MAX_JITTER_SEC = 86_400
RATE_LIMIT_KEYS = ("max_fires", "window_sec")
MAX_RATE_WINDOW_SEC = 366 * 86_400
MAX_RATE_FIRES = 1_000_000


class RetryPolicy(TypedDict):
    """A validated ``retry`` object: every key filled in."""

    max_attempts: int
    backoff_sec: int
    backoff_factor: float
    max_backoff_sec: int


class RateLimit(TypedDict):
    """A validated ``rate_limit`` object: at most ``max_fires`` fires in ``window_sec``."""

    max_fires: int
    window_sec: int


def _err(field: str, message: str) -> ScheduleValidationError:
    return ScheduleValidationError(field, message)


def _int(field: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(field, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise _err(field, f"must be between {low} and {high}, got {value}")
    return value


def _number(field: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _err(field, f"must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise _err(field, f"must be between {low:g} and {high:g}, got {value!r}")
    return number


def check_overlap_policy(value: Any) -> str:
    """One of :data:`OVERLAP_POLICIES`; the refusal lists them."""
    if value not in OVERLAP_POLICIES:
        raise _err("overlap_policy", f"must be one of {', '.join(OVERLAP_POLICIES)}, got {value!r}")
    return str(value)


def check_retry(value: Any, field: str = "retry") -> RetryPolicy | None:
    """A retry object with every key filled in (defaults), or ``None``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _err(field, f"must be an object, got {type(value).__name__}")
    for key in value:
        if key not in RETRY_KEYS:
            raise _err(f"{field}.{key}", f"unknown key (allowed: {', '.join(RETRY_KEYS)})")
    if "max_attempts" not in value:
        raise _err(f"{field}.max_attempts", f"is required (1..{MAX_ATTEMPTS})")
    given = {**RETRY_DEFAULTS, **value}
    out = RetryPolicy(
        max_attempts=_int(f"{field}.max_attempts", given["max_attempts"], 1, MAX_ATTEMPTS),
        backoff_sec=_int(f"{field}.backoff_sec", given["backoff_sec"], 1, MAX_BACKOFF_SEC),
        backoff_factor=_number(
            f"{field}.backoff_factor", given["backoff_factor"], 1, MAX_BACKOFF_FACTOR
        ),
        max_backoff_sec=_int(
            f"{field}.max_backoff_sec", given["max_backoff_sec"], 1, MAX_BACKOFF_SEC
        ),
    )
    if out["max_backoff_sec"] < out["backoff_sec"]:
        raise _err(f"{field}.max_backoff_sec", "must be at least backoff_sec")
    return out


def check_policies(row: MutableMapping[str, Any]) -> None:
    """Validate and normalise the policy fields of a schedule row in place.

    Runs after the trigger fields are checked (the jitter bound reads ``interval_sec``).
    """
    row["overlap_policy"] = check_overlap_policy(row.get("overlap_policy"))
    trigger = row.get("trigger_type")
    catchup = row.get("catchup_window_sec")
    if catchup is not None:
        row["catchup_window_sec"] = _int("catchup_window_sec", catchup, 1, MAX_CATCHUP_WINDOW_SEC)
    jitter = row.get("jitter_sec")
    if jitter is not None:
        jitter = row["jitter_sec"] = _int("jitter_sec", jitter, 0, MAX_JITTER_SEC)
        if trigger == "github_poll":
            raise _err("jitter_sec", "applies only to cron and interval schedules")
        interval = row.get("interval_sec")
        if trigger == "interval" and isinstance(interval, int) and jitter >= interval:
            raise _err(
                "jitter_sec",
                f"must be less than interval_sec ({interval}): it could never fire on time",
            )
    pause = row.get("pause_on_failure")
    if pause is not None and not isinstance(pause, bool):
        raise _err("pause_on_failure", f"must be a boolean, got {pause!r}")
    row["retry"] = check_retry(row.get("retry"))


def check_rate_limit(value: Any, field: str = "rate_limit") -> RateLimit | None:
    """``{"max_fires", "window_sec"}`` (both required, positive integers), or ``None``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _err(field, f"must be an object, got {type(value).__name__}")
    for key in value:
        if key not in RATE_LIMIT_KEYS:
            raise _err(f"{field}.{key}", f"unknown key (allowed: {', '.join(RATE_LIMIT_KEYS)})")
    for key in RATE_LIMIT_KEYS:
        if key not in value:
            raise _err(f"{field}.{key}", "is required")
    return RateLimit(
        max_fires=_int(f"{field}.max_fires", value["max_fires"], 1, MAX_RATE_FIRES),
        window_sec=_int(f"{field}.window_sec", value["window_sec"], 1, MAX_RATE_WINDOW_SEC),
    )
