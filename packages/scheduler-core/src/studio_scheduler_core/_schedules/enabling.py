"""Checks of an update beyond its fields' validation: whether a disabled schedule may be
enabled (the limits it used up, a one-shot ``at`` whose occurrence is behind it), and the
GitHub cursor an update sets.

Enabling re-arms a schedule from now. A schedule that reached ``max_runs`` or its budget
would be disabled again by its next fire, so it is refused until the limit is raised. An
``at`` schedule whose one occurrence was handled (fired, or its missed fire skipped:
``schedule.disabled.once``) and whose instant has passed would fire that old instant again
at once: refused (:class:`ScheduleAtPassed`, naming ``at``) unless the same change gives it
a new ``at``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final, Literal

import aiosqlite

from .._admission.store import fired_run_count, schedule_spend
from .._exceptions import ScheduleAtPassed, ScheduleValidationError
from .._triggers.once import ONCE, parse_at


class _Keep(enum.Enum):
    KEEP = "keep"


Keep = Literal[_Keep.KEEP]
"""The type of :data:`KEEP`."""
KEEP: Final = _Keep.KEEP
"""An update argument left as it is (``None`` is a value: a reset)."""


def check_rearm(current: Mapping[str, Any], new: Mapping[str, Any], *, now: float) -> None:
    """Refuse to enable (``current`` → ``new``) an ``at`` schedule whose occurrence was
    handled and whose instant has passed, unless ``new`` holds another ``at``."""
    if new.get("trigger_type") != "at" or current.get("disabled_reason") != ONCE:
        return
    at = new.get("at")
    if not isinstance(at, str) or at != current.get("at"):
        return
    try:
        instant = parse_at(at)
    except ValueError:
        return  # the validation names a malformed instant
    if instant <= now:
        raise ScheduleAtPassed(str(current.get("id")), at)


async def check_enable(
    conn: aiosqlite.Connection,
    current: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    now: float,
) -> None:
    """Refuse to enable the schedule ``current`` as ``new`` (its row once enabled; ``current``
    again for a plain enable): an ``at`` already handled, ``max_runs`` reached, a budget spent.
    """
    check_rearm(current, new, now=now)
    schedule = {**current, **new}
    max_runs = schedule.get("max_runs")
    if max_runs is not None:
        fired = await fired_run_count(conn, str(schedule["id"]))
        if fired >= int(max_runs):
            raise ScheduleValidationError(
                "max_runs",
                f"already reached ({fired} of {max_runs} runs fired); raise it first",
            )
    budget_usd, budget_tokens = schedule.get("budget_usd"), schedule.get("budget_tokens")
    if budget_usd is not None or budget_tokens is not None:
        cost, tokens = await schedule_spend(conn, str(schedule["id"]))
        if budget_usd is not None and cost >= float(budget_usd):
            raise ScheduleValidationError(
                "budget_usd", f"exhausted (spent {cost:.4f} of {budget_usd}); raise it first"
            )
        if budget_tokens is not None and tokens >= int(budget_tokens):
            raise ScheduleValidationError(
                "budget_tokens", f"exhausted (used {tokens} of {budget_tokens}); raise it first"
            )


def cursor_change(
    row: Mapping[str, Any], current: Mapping[str, Any], cursor: str | None
) -> dict[str, str | None]:
    """The column an update setting ``cursor`` (normalised; ``None`` resets) writes on the
    schedule ``current`` becoming ``row``: nothing when unchanged. Refused, naming
    ``github_cursor``, unless ``row`` polls GitHub."""
    if row.get("trigger_type") != "github_poll":
        raise ScheduleValidationError(
            "github_cursor",
            f"applies only to github_poll schedules, not {row.get('trigger_type')!r}",
        )
    if cursor == current.get("github_cursor"):
        return {}
    return {"github_cursor": cursor}
