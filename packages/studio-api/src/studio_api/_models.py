"""Request and response models of the HTTP API (extra keys are refused everywhere).

Request models check only shape: types, SQLite's integer range, finite numbers, the upper bound
of each numeric schedule field (``_bounds``), strings SQLite can store (valid UTF-8) and a
bounded nesting depth. The meaning of a value (a valid cron
expression, a positive interval, an allowed command …) is the schedule service's to judge, so
the API and the CLI refuse the same things with the same messages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ._bounds import MAX_BUDGET_USD, MAX_COUNT, MAX_INTERVAL_SEC, MAX_POLL_INTERVAL_SEC, MIN_COUNT
from ._policy_models import OverlapPolicy, PolicyFields, RunPolicyFields

SQLITE_INT_MAX = 2**63 - 1
MAX_NESTING = 32

TriggerType = Literal["cron", "interval", "github_poll"]
ActionKind = Literal["agent", "flow", "fanout", "play", "playbook", "flow_yaml", "command"]
MissedFirePolicy = Literal["skip", "run_once"]
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
DispatchStatus = Literal["pending", "delivering", "delivered", "acked", "dead_letter", "expired"]

IntervalSec = Annotated[int, Field(ge=MIN_COUNT, le=MAX_INTERVAL_SEC)]
PollIntervalSec = Annotated[int, Field(ge=MIN_COUNT, le=MAX_POLL_INTERVAL_SEC)]
Count = Annotated[int, Field(ge=MIN_COUNT, le=MAX_COUNT)]
BudgetUsd = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_BUDGET_USD, le=MAX_BUDGET_USD)]

M = TypeVar("M", bound=BaseModel)


def check_storable(value: Any, *, depth: int = 0) -> Any:
    """Refuse values that SQLite or a JSON response cannot carry; return ``value`` unchanged.

    Raises ``ValueError`` for a string that is not valid UTF-8 (lone surrogates), a
    non-finite float, an integer outside SQLite's 64-bit range, or nesting deeper than 32.
    """
    if depth > MAX_NESTING:
        raise ValueError(f"nested deeper than {MAX_NESTING} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("must be valid UTF-8 text") from None
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        if not -SQLITE_INT_MAX - 1 <= value <= SQLITE_INT_MAX:
            raise ValueError("integer out of range (64-bit)")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_storable(key, depth=depth + 1)
            check_storable(item, depth=depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            check_storable(item, depth=depth + 1)
    return value


class RequestModel(BaseModel):
    """Base of request bodies: unknown keys are refused, every value must be storable."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return check_storable(value)


class ResponseModel(BaseModel):
    """Base of response bodies; build them with :meth:`of` so unknown row keys are dropped."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def of(cls: type[M], row: Mapping[str, Any], **extra: Any) -> M:
        """Validate the model's own keys of ``row`` (plus ``extra``)."""
        values = {name: row[name] for name in cls.model_fields if name in row}
        values.update(extra)
        return cls.model_validate(values)


# -- requests ---------------------------------------------------------------------------------


class _ActionFields(RequestModel):
    action_model: str | None = None
    action_prompt: str | None = None
    action_agent: str | None = None
    action_playbook: str | None = None
    action_flow_yaml: str | None = None
    action_project: str | None = None
    action_cwd: str | None = None
    action_extra_args: list[str] | None = None
    action_command: str | None = None
    action_command_args: list[str] | None = None


class _ScheduleFields(_ActionFields, PolicyFields):
    description: str | None = None
    cron_expr: str | None = None
    interval_sec: IntervalSec | None = None
    github_repo: str | None = None
    github_filter: dict[str, Any] | None = None
    poll_interval_sec: PollIntervalSec | None = None
    on_success: dict[str, Any] | None = None
    on_fail: dict[str, Any] | None = None
    max_runs: Count | None = None
    budget_usd: BudgetUsd | None = None
    budget_tokens: Count | None = None
    project: str | None = None
    threshold_config: dict[str, Any] | None = None
    notify: dict[str, Any] | None = None
    """``{"deliver_to", "on", "ack_required", "max_attempts"}``: who is told of which outcomes."""
    timezone: str | None = None
    timeout_sec: int | None = None


class ScheduleCreate(_ScheduleFields):
    """Body of ``POST /api/schedules`` (the create model, plus cwd, command, enabled)."""

    name: str
    trigger_type: TriggerType
    action_kind: ActionKind
    missed_fire_policy: MissedFirePolicy = "skip"
    overlap_policy: OverlapPolicy = "skip"
    enabled: bool = True


class ScheduleUpdate(_ScheduleFields):
    """Body of ``PATCH /api/schedules/{id}``: only the keys sent are changed (null clears)."""

    name: str | None = None
    trigger_type: TriggerType | None = None
    action_kind: ActionKind | None = None
    missed_fire_policy: MissedFirePolicy | None = None
    overlap_policy: OverlapPolicy | None = None


class RunCreate(_ActionFields):
    """Body of ``POST /api/runs``: an ad-hoc run (a schedule's action fields, no trigger)."""

    action_kind: ActionKind
    concurrency_key: str | None = None
    notify: dict[str, Any] | None = None
    """Like a schedule's ``notify`` (``disabled``/``recovered`` never apply to an ad-hoc run)."""


class DispatchCreate(RequestModel):
    """Body of ``POST /api/dispatch``: :func:`studio_outbox.enqueue_dispatch`'s arguments."""

    kind: str
    deliver_to: str
    body: dict[str, Any] | None = None
    dedup_key: str | None = None
    ack_required: bool = False
    max_attempts: Count = 8
    expires_at: float | None = None
    session_id: str | None = None
    schedule_run_id: str | None = None


class DisableRequest(RequestModel):
    """Optional body of ``POST /api/schedules/{id}/disable``."""

    reason: str | None = None


class AckRequest(RequestModel):
    """Body of ``POST /api/dispatch/{id}/ack``."""

    token: str


# -- responses --------------------------------------------------------------------------------


class ErrorOut(ResponseModel):
    """Every error body: ``detail`` names the field at fault when there is one."""

    detail: str
    field: str | None = None
    reason_code: str | None = None
    errors: list[dict[str, Any]] | None = None


class ScheduleOut(ResponseModel, PolicyFields):
    """A stored schedule (every column; JSON columns decoded)."""

    id: str
    name: str
    description: str | None = None
    enabled: bool
    trigger_type: str
    cron_expr: str | None = None
    interval_sec: int | None = None
    github_repo: str | None = None
    github_filter: dict[str, Any] | None = None
    github_cursor: str | None = None
    poll_interval_sec: int | None = None
    action_kind: str
    action_model: str | None = None
    action_prompt: str | None = None
    action_agent: str | None = None
    action_playbook: str | None = None
    action_flow_yaml: str | None = None
    action_project: str | None = None
    action_cwd: str | None = None
    action_extra_args: list[str] = Field(default_factory=list)
    action_command: str | None = None
    action_command_args: list[str] = Field(default_factory=list)
    on_success: dict[str, Any] | None = None
    on_fail: dict[str, Any] | None = None
    last_fired_at: float | None = None
    next_fire_at: float | None = None
    last_evaluated_at: float | None = None
    missed_fire_policy: str
    overlap_policy: str
    max_runs: int | None = None
    budget_usd: float | None = None
    budget_tokens: int | None = None
    project: str | None = None
    threshold_config: dict[str, Any] | None = None
    last_alert_at: float | None = None
    last_healthy_poll_at: float | None = None
    poller_consecutive_401: int = 0
    disabled_reason: str | None = None
    timezone: str | None = None
    timeout_sec: int | None = None
    created_at: float
    updated_at: float
    notify: dict[str, Any] | None = None


class ScheduleList(ResponseModel):
    """One page of schedules; ``total`` counts every match, not just this page."""

    schedules: list[ScheduleOut]
    total: int
    limit: int
    offset: int


class RunOut(ResponseModel, RunPolicyFields):
    """A schedule run (every column of ``schedule_runs``; JSON columns decoded)."""

    id: str
    schedule_id: str | None = None
    invocation_id: str | None = None
    trigger_context: Any = None
    action_kind: str
    action_args: Any = None
    status: str
    exit_code: int | None = None
    chain_parent_id: str | None = None
    chain_depth: int = 0
    fired_at: float | None = None
    ended_at: float | None = None
    error_detail: str | None = None
    created_at: float | None = None
    updated_at: float | None = None
    status_reason_code: str | None = None
    status_reason_summary: str | None = None
    status_evidence_refs: Any = None
    queued_at: float | None = None
    leased_by: str | None = None
    lease_expires_at: float | None = None
    concurrency_key: str | None = None
    lease_attempts: int = 0
    required_capabilities: Any = None
    execution_target: str | None = None
    library_ref: str | None = None
    library_content_hash: str | None = None
    child_pid: int | None = None
    child_started_at: float | None = None
    notify: dict[str, Any] | None = None


class RunDetail(RunOut):
    """One run with the runs its follow-ups started (``chain_children``)."""

    chain_children: list[RunOut] = Field(default_factory=list)


class RunList(ResponseModel):
    """One page of a schedule's runs, newest first; ``total`` counts every match."""

    runs: list[RunOut]
    total: int
    limit: int
    offset: int


class TriggerOut(ResponseModel):
    """Answer of a manual trigger: the id of the run it started."""

    run_id: str


class FireTime(ResponseModel):
    """One upcoming fire time, as epoch seconds, UTC and local ISO-8601."""

    at: float
    utc: str
    local: str
    jitter_sec: float | None = None
    """The delay this occurrence waits after ``at`` (its jitter)."""


class PreviewOut(ResponseModel):
    """The next ``n`` fire times of a schedule."""

    schedule_id: str
    timezone: str
    fire_times: list[FireTime]


class Holder(ResponseModel):
    """A fire holding one of the global scheduled slots."""

    schedule_id: str | None = None
    run_id: str | None = None
    since: float | None = None


class LimitsOut(ResponseModel):
    """Concurrency caps and what holds them now."""

    max_scheduled_concurrent: int
    in_flight: int
    holders: list[Holder] = Field(default_factory=list)
    max_adhoc_concurrent: int
    adhoc_in_flight: int = 0


class SchedulerHealth(ResponseModel):
    """The engine's view: is the tick running, when did it last run, what is waiting."""

    running: bool
    last_tick_at: float | None = None
    seconds_since_last_tick: float | None = None
    last_tick_error: str | None = None
    tick_seconds: float
    in_flight: int
    due_backlog: int
    global_cap: int
    holders: list[Holder] = Field(default_factory=list)
    fire_lag_last_seconds: float | None = None
    """Due → fire lag of the latest scheduled fire (this process)."""
    fire_lag_max_seconds: float | None = None
    """The largest due → fire lag since the server started."""


class TransportHealth(ResponseModel):
    """One transport: ``active`` or ``paused``, why (``None`` when nothing to say), signing."""

    state: Literal["active", "paused"]
    reason: str | None = None
    signed: bool | None = None


class DispatchHealth(ResponseModel):
    """Outbox delivery: rows waiting, whether argv delivery is paused for lack of a template,
    and each transport's state (``argv``, ``webhook``)."""

    backlog: int
    delivery_paused: bool
    transports: dict[str, TransportHealth] = Field(default_factory=dict)


class DatabaseHealth(ResponseModel):
    """The database: its durability mode, and the storage fault writes meet now (if any)."""

    synchronous: str
    problem: str | None = None
    problem_since: float | None = None


class HealthOut(ResponseModel):
    """``GET /api/health``: ``status`` is ``ok``, or ``degraded`` when the tick is not healthy
    or writes to the database fail (``database.problem``)."""

    status: Literal["ok", "degraded"]
    version: str
    scheduler: SchedulerHealth
    dispatch: DispatchHealth
    database: DatabaseHealth


class DispatchOut(ResponseModel):
    """An outbox row. The ack token is never shown (neither as a column nor in the payload)."""

    id: str
    kind: str
    deliver_to: str
    payload: dict[str, Any] | None = None
    dedup_key: str | None = None
    status: str
    attempt: int
    max_attempts: int
    next_attempt_at: float | None = None
    ack_required: bool
    session_id: str | None = None
    schedule_run_id: str | None = None
    last_error: str | None = None
    created_at: float
    expires_at: float | None = None
    updated_at: float | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DispatchOut:
        """The public view of a dispatch row: ``ack_token`` removed everywhere."""
        values = dict(row)
        values.pop("ack_token", None)
        payload = values.get("payload")
        if isinstance(payload, Mapping):
            values["payload"] = {k: v for k, v in payload.items() if k != "ack_token"}
        elif payload is not None:
            values["payload"] = None
        values["ack_required"] = bool(values.get("ack_required"))
        return cls.of(values)


class DispatchCreated(ResponseModel):
    """Answer of ``POST /api/dispatch``: the row's id; ``created`` false on a dedup hit."""

    id: str
    created: bool


class DispatchList(ResponseModel):
    """One page of outbox rows; ``total`` counts every match."""

    dispatches: list[DispatchOut]
    total: int
    limit: int
    offset: int
