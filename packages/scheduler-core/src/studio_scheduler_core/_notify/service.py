"""Run and schedule notifications: the dispatches Studio itself produces.

A schedule (or an ad-hoc run) may carry ``notify``::

    {"deliver_to": str, "on": [...], "ack_required": false, "max_attempts": 8}

When a run reaches a terminal status listed in ``on``, :func:`notify_run` enqueues one
dispatch in the caller's open transaction, so the notification commits (or rolls back) with
the terminal write itself: a crash can neither lose nor duplicate it, and the ``dedup_key``
``run:<run_id>:<kind>`` makes a repeated call a no-op. ``recovered`` is the first
``completed`` top-level run after one or more ``failed``/``timed_out`` top-level runs of the
same schedule; it is sent as ``run.recovered`` instead of ``run.completed``. A schedule that
a gate disables (budget, max_runs, github_auth) enqueues ``schedule.disabled`` through
:func:`notify_schedule_disabled`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict
from urllib.parse import urlsplit

import aiosqlite

from studio_outbox import enqueue_dispatch

from .._exceptions import ScheduleValidationError
from .._records.codec import _loads
from .._records.run import Run
from .._records.vocab import ENGINE_ACTOR
from . import store

NOTIFY_KEYS = ("deliver_to", "on", "ack_required", "max_attempts")
NOTIFY_EVENTS = ("completed", "failed", "timed_out", "cancelled", "disabled", "recovered")
DEFAULT_NOTIFY_ON = ("failed", "timed_out", "disabled")
DEFAULT_MAX_ATTEMPTS = 8
MAX_NOTIFY_ATTEMPTS = 1000
MAX_DELIVER_TO = 2000
GATE_DISABLES = frozenset(
    {
        "schedule.budget.exhausted",
        "schedule.disabled.max_runs",
        "schedule.disabled.github_auth",
        "schedule.disabled.failure",  # pause_on_failure, after a run's last attempt
        "schedule.disabled.once",  # an ``at`` schedule after its one occurrence
    }
)
"""Reason codes of the gates whose disable is notified (an operator's disable is not)."""

_RUN_EVENTS = frozenset({"completed", "failed", "timed_out", "cancelled"})
_TAIL = 2000


def _check_url(field: str, value: str) -> None:
    scheme, colon, rest = value.partition(":")
    if not colon or scheme.lower() not in ("http", "https"):
        return
    if any(ch.isspace() or ord(ch) < 0x20 or ch == "\x7f" for ch in value):
        raise ScheduleValidationError(field, "a webhook URL must not contain whitespace")
    if not rest.startswith("//"):
        raise ScheduleValidationError(
            field, f"a webhook URL must be absolute: {scheme.lower()}://host[:port]/path"
        )
    parts = urlsplit(value)
    if not parts.hostname:
        raise ScheduleValidationError(field, "the webhook URL has no host")
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise ScheduleValidationError(field, "the webhook URL has an invalid port") from None


class StoredNotify(TypedDict):
    """A validated ``notify`` object as stored (the ``notify`` JSON column), defaults filled in."""

    deliver_to: str
    on: list[str]
    ack_required: bool
    max_attempts: int


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    """A stored ``notify`` object as read back: where to deliver, which events, and how."""

    deliver_to: str
    on: frozenset[str]
    ack_required: bool
    max_attempts: int


def check_notify(value: Any, *, field: str = "notify") -> StoredNotify | None:
    """Validate a ``notify`` object into its stored form (defaults filled in), or ``None``.

    Raises :class:`ScheduleValidationError` naming the key (``notify.on``, ``notify.deliver_to``
    …): unknown keys or ``on`` values, an empty ``on``, ``max_attempts`` < 1, a ``deliver_to``
    with the ``http:``/``https:`` prefix that is not an absolute URL.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ScheduleValidationError(field, f"must be an object, got {type(value).__name__}")
    for key in value:
        if key not in NOTIFY_KEYS:
            raise ScheduleValidationError(
                f"{field}.{key}", f"unknown key (allowed: {', '.join(NOTIFY_KEYS)})"
            )
    deliver_to = value.get("deliver_to")
    if not isinstance(deliver_to, str) or not deliver_to.strip():
        raise ScheduleValidationError(f"{field}.deliver_to", "is required (a non-blank string)")
    if len(deliver_to) > MAX_DELIVER_TO:
        raise ScheduleValidationError(
            f"{field}.deliver_to", f"must be at most {MAX_DELIVER_TO} characters"
        )
    _check_url(f"{field}.deliver_to", deliver_to)
    on = value.get("on", list(DEFAULT_NOTIFY_ON))
    if on is None:
        on = list(DEFAULT_NOTIFY_ON)
    if not isinstance(on, list | tuple) or not all(isinstance(v, str) for v in on):
        raise ScheduleValidationError(f"{field}.on", "must be a list of event names")
    if not on:
        raise ScheduleValidationError(
            f"{field}.on", f"must name at least one of {', '.join(NOTIFY_EVENTS)}"
        )
    for event in on:
        if event not in NOTIFY_EVENTS:
            raise ScheduleValidationError(
                f"{field}.on", f"unknown event {event!r} (one of {', '.join(NOTIFY_EVENTS)})"
            )
    ack = value.get("ack_required", False)
    if not isinstance(ack, bool):
        raise ScheduleValidationError(f"{field}.ack_required", "must be a boolean")
    attempts = value.get("max_attempts", DEFAULT_MAX_ATTEMPTS)
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise ScheduleValidationError(f"{field}.max_attempts", "must be an integer")
    if not 1 <= attempts <= MAX_NOTIFY_ATTEMPTS:
        raise ScheduleValidationError(
            f"{field}.max_attempts", f"must be between 1 and {MAX_NOTIFY_ATTEMPTS}"
        )
    ordered = [event for event in NOTIFY_EVENTS if event in set(on)]
    return {"deliver_to": deliver_to, "on": ordered, "ack_required": ack, "max_attempts": attempts}


def _config(raw: Any) -> NotifyConfig | None:
    """The stored ``notify`` JSON as a :class:`NotifyConfig` (``None``: none, or no address);
    a key a row written before its default existed takes that default."""
    value = _loads(raw)
    if not isinstance(value, Mapping) or not value.get("deliver_to"):
        return None
    return NotifyConfig(
        deliver_to=str(value["deliver_to"]),
        on=frozenset(value.get("on") or DEFAULT_NOTIFY_ON),
        ack_required=bool(value.get("ack_required", False)),
        max_attempts=int(value.get("max_attempts", DEFAULT_MAX_ATTEMPTS)),
    )


async def _recovered(conn: aiosqlite.Connection, run: Run) -> bool:
    """True when the latest earlier ended top-level run of the schedule failed or timed out
    (an attempt followed by a planned retry does not count: its series had not ended)."""
    if run.schedule_id is None:
        return False
    previous = await store.previous_series_status(conn, run.schedule_id, run.id)
    return previous in ("failed", "timed_out")


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def run_body(run: Run, schedule_name: str | None) -> dict[str, Any]:
    """The notification body (JSON) of a terminal run (also what the recipes document)."""
    fired, ended = _finite(run.fired_at), _finite(run.ended_at)
    # From the fire, as everywhere else: the child's recorded start is only good enough to
    # tell a process apart (its boot-time base has whole-second precision).
    duration = None if ended is None or fired is None else round(max(0.0, ended - fired), 3)
    detail = run.error_detail
    return {
        "run_id": run.id,
        "schedule_id": run.schedule_id,
        "schedule_name": schedule_name,
        "status": run.status,
        "reason_code": run.status_reason_code,
        "reason_summary": run.status_reason_summary,
        "exit_code": run.exit_code,
        "stderr_tail": detail[-_TAIL:] if isinstance(detail, str) else None,
        "error_class": run.error_class,
        "fired_at": fired,
        "ended_at": ended,
        "duration_seconds": duration,
        "chain_depth": run.chain_depth,
        "chain_parent_id": run.chain_parent_id,
        "run_attempt": run.attempt or 1,
        "trigger_context": _loads(run.trigger_context),
        "log_url": f"/api/schedules/runs/{run.id}/log",
    }


async def notify_run(conn: aiosqlite.Connection, run_id: str, *, now: float) -> str | None:
    """Enqueue the notification of a run that just reached a terminal status, if wanted.

    Call it inside the transaction of the terminal write, after the run row is updated: the
    dispatch joins that transaction. Returns the dispatch id, or ``None`` when the run's
    ``notify`` (its own, else its schedule's) does not ask for this status, or when the run
    failed or timed out with a later attempt already planned (only the last attempt's failure
    is notified; its body's ``run_attempt`` says which attempt that was).
    """
    found = await store.run_with_schedule(conn, run_id)
    if found is None or found.run.status not in _RUN_EVENTS:
        return None
    run = found.run
    if run.status in ("failed", "timed_out") and await store.retry_planned(conn, run_id):
        return None
    config = _config(run.notify) or _config(found.schedule_notify)
    if config is None:
        return None
    wanted = config.on
    status = run.status
    event = status
    if (
        status == "completed"
        and "recovered" in wanted
        and run.schedule_id is not None
        and int(run.chain_depth or 0) == 0
        and await _recovered(conn, run)
    ):
        event = "recovered"
    if event not in wanted:
        return None
    kind = f"run.{event}"
    return await enqueue_dispatch(
        conn,
        kind=kind,
        deliver_to=config.deliver_to,
        body=run_body(run, found.schedule_name),
        dedup_key=f"run:{run_id}:{kind}",
        ack_required=config.ack_required,
        max_attempts=config.max_attempts,
        schedule_run_id=run_id,
        clock=lambda: now,
        actor=ENGINE_ACTOR,
    )


async def notify_schedule_disabled(
    conn: aiosqlite.Connection,
    schedule_id: str,
    *,
    reason_code: str,
    reason_summary: str | None,
    now: float,
) -> str | None:
    """Enqueue ``schedule.disabled`` for a gate's disable, inside the disabling transaction.

    Call it right after the disable's transition row is written: the dedup key names that
    transition. Returns the dispatch id, or ``None`` (not a gate, or not asked for).
    """
    if reason_code not in GATE_DISABLES:
        return None
    row = await store.schedule_notify(conn, schedule_id)
    config = None if row is None else _config(row.notify)
    if row is None or config is None:
        return None
    if "disabled" not in config.on:
        return None
    transition_id = await store.latest_disable_transition(conn, schedule_id)
    return await enqueue_dispatch(
        conn,
        kind="schedule.disabled",
        deliver_to=config.deliver_to,
        body={
            "schedule_id": schedule_id,
            "schedule_name": row.name,
            "reason_code": reason_code,
            "reason_summary": reason_summary,
            "disabled_at": now,
        },
        dedup_key=f"schedule:{schedule_id}:disabled:{transition_id}",
        ack_required=config.ack_required,
        max_attempts=config.max_attempts,
        clock=lambda: now,
        actor=ENGINE_ACTOR,
    )
