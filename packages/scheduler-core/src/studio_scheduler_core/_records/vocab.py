"""The closed vocabularies of schedules and runs, and the bounds of their numeric fields.

Each vocabulary is written once, as a ``Literal`` type; the tuple beside it is derived from the
type, so the schema's CHECK constraints, the service's validation, the API's request models and
the CLI's choices cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, get_args

TriggerType = Literal["cron", "interval", "github_poll", "at"]
TRIGGER_TYPES: Final[tuple[str, ...]] = get_args(TriggerType)
"""Every ``schedules.trigger_type``."""

ActionKindName = Literal["agent", "flow", "fanout", "play", "playbook", "flow_yaml", "command"]
"""Every spelling of an action kind that input accepts (aliases included)."""

ACTION_KIND_ALIASES: Final[Mapping[str, str]] = {"playbook": "play"}
"""Accepted spellings stored under another name."""

ACTION_KINDS: Final[tuple[str, ...]] = tuple(
    kind for kind in get_args(ActionKindName) if kind not in ACTION_KIND_ALIASES
)
"""Every stored ``action_kind`` (aliases resolved)."""

MissedFirePolicy = Literal["skip", "run_once"]
MISSED_FIRE_POLICIES: Final[tuple[str, ...]] = get_args(MissedFirePolicy)

OverlapPolicy = Literal["skip", "allow", "buffer_one", "buffer_all", "cancel_other"]
OVERLAP_POLICIES: Final[tuple[str, ...]] = get_args(OverlapPolicy)
"""What an occurrence does while the schedule's last run still runs."""

RunStatus = Literal[
    "queued",
    "waiting_dependency",
    "running",
    "retry_wait",
    "completed",
    "failed",
    "timed_out",
    "skipped",
    "cancelled",
]
RUN_STATUSES: Final[tuple[str, ...]] = get_args(RunStatus)
"""Every ``schedule_runs.status``, in lifecycle order."""

FIRED_END_STATUSES: Final[tuple[str, ...]] = ("completed", "failed", "timed_out", "cancelled")
"""Statuses of a run that fired and ended (``skipped`` never fired)."""

FINAL_RUN_STATUSES: Final[tuple[str, ...]] = (*FIRED_END_STATUSES, "skipped")
"""Statuses a run never leaves."""

INVOCATION_STATUSES: Final[tuple[str, ...]] = (
    "running",
    "completed",
    "completed_empty",
    "failed",
    "timed_out",
    "aborted",
    "cancelled",
)
SESSION_STATUSES: Final[tuple[str, ...]] = INVOCATION_STATUSES

DAY_SECONDS: Final = 86_400
MAX_INTERVAL_SEC: Final = 366 * DAY_SECONDS
"""The longest ``interval_sec`` a schedule (or a preview) takes: 366 days."""
MAX_POLL_INTERVAL_SEC: Final = DAY_SECONDS
MAX_TIMEOUT_SEC: Final = 7 * DAY_SECONDS
"""The bound of a schedule's ``timeout_sec`` (7 days)."""
MAX_COUNT: Final = 2**31 - 1
"""The bound of ``max_runs`` and ``budget_tokens``."""
MAX_BUDGET_USD: Final = 1e9

ErrorClass = Literal[
    "spawn_failed",
    "timeout",
    "nonzero_exit",
    "killed",
    "permission",
    "not_found",
    "node_lost",
    "unclassified",
]
ERROR_CLASSES: Final[tuple[str, ...]] = get_args(ErrorClass)
"""Every ``schedule_runs.error_class``: what kind of failure a failed or timed-out run had."""

ENGINE_ACTOR: Final = "studio"
"""The actor of every ``status_transitions`` row the engine writes on its own (fires, retries,
finishes, reaping and reconciliation, notifications, its outbox delivery); which part of the
engine acted is in the row's reason code and metadata, not its actor. An operator's change
names the operator instead (a token's name, ``cli:<user>``, ``set:<owner>``)."""
