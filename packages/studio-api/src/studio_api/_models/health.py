"""Health and limits models: ``GET /api/health`` and ``GET /api/schedules/limits``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import ResponseModel


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
    scheduling_lag_seconds: float = 0.0
    """How far behind its due time the oldest due enabled schedule is now (0: none late)."""
    coalesced_slots: int = 0
    """Interval slots folded into a later fire since the server started (overload shows here)."""


class TransportHealth(ResponseModel):
    """One transport: ``active`` or ``paused``, why (``None`` when nothing to say), signing."""

    state: Literal["active", "paused"]
    reason: str | None = None
    signed: bool | None = None


class DispatchHealth(ResponseModel):
    """Outbox delivery: rows waiting, whether delivery is paused, and each transport's state
    (``argv``, ``webhook``)."""

    backlog: int
    delivery_paused: bool
    """Some ``pending`` dispatch cannot be delivered by this node: its transport is missing
    (an argv row with no ``notify_template``, a URL row without httpx)."""
    delivery_paused_transports: list[Literal["argv", "webhook"]] = Field(default_factory=list)
    """The missing transports that ``pending`` dispatches wait for (empty when not paused)."""
    delivery_paused_dispatches: dict[str, int] = Field(default_factory=dict)
    """How many ``pending`` dispatches wait for each missing transport."""
    delivery_paused_reason: str | None = None
    """Why delivery is paused, e.g. ``no notify_template (LIONAGI_STUDIO_NOTIFY_TEMPLATE) for
    3 argv dispatches``; ``null`` when it is not."""
    transports: dict[str, TransportHealth] = Field(default_factory=dict)


class DatabaseHealth(ResponseModel):
    """The database: its durability mode, and the storage fault writes meet now (if any)."""

    synchronous: str
    problem: str | None = None
    problem_since: float | None = None


class RetentionHealth(ResponseModel):
    """Retention's archive: where it writes (``null``: no archive) and why the last pass's
    archive failed (``null``: it did not), e.g. ``archive to /var/archive failed: No space
    left on device``; a failed archive deletes nothing and the next pass tries again."""

    archive_dir: str | None = None
    archive_problem: str | None = None


class HealthOut(ResponseModel):
    """``GET /api/health``: ``status`` is ``ok``, or ``degraded`` when the tick is not healthy,
    writes to the database fail (``database.problem``) or retention's last archive failed
    (``retention.archive_problem``)."""

    status: Literal["ok", "degraded"]
    version: str
    node_id: str
    """This node's name (``LIONAGI_STUDIO_NODE_ID``, default ``hostname:pid``)."""
    leader: bool
    """Whether this node evaluates schedules now: on SQLite while it holds the database
    file's lock (always, once started); on PostgreSQL while it holds the leader lock."""
    backend: Literal["sqlite", "postgresql"]
    """The database this node runs on."""
    wake_listening: bool | None = None
    """On PostgreSQL: whether this node's ``LISTEN`` connection holds, so work written by
    other nodes and programs wakes it at once; ``false`` while it reconnects (the loop then
    polls once a second). ``null`` on SQLite."""
    scheduler: SchedulerHealth
    dispatch: DispatchHealth
    database: DatabaseHealth
    retention: RetentionHealth = Field(default_factory=RetentionHealth)
