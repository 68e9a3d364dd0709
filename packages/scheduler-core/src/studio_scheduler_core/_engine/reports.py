"""The shapes of what an engine reports about itself (``health()``, ``limits()``): JSON
objects with known keys, which the API's health and limits routes serialise as they are."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from .._admission.gates import SlotHolder
from .._recovery.store import WalCheckpoint

TransportName = Literal["argv", "webhook"]
"""A delivery transport: the notify template's argv, or an HTTP webhook."""


ConcernName = Literal[
    "children", "reapers", "checkpoint", "dispatch", "worker", "dispatched", "cancels", "schedules"
]
"""A tick's concerns (:meth:`Running.concerns`), the keys of its :class:`TickReport`."""


class TickReport(TypedDict, total=False):
    """What one tick reported: each concern that ran, by name (``None``: nothing was due, or
    the concern failed and was logged); ``leader`` is ``False`` on a node that does not lead;
    a tick the database refused reports only ``database`` (why)."""

    children: int | None
    reapers: int | None
    checkpoint: WalCheckpoint | None
    dispatch: str | None
    worker: None
    dispatched: dict[str, int] | None
    cancels: int | None
    schedules: dict[str, int] | None
    leader: bool
    database: str


class TransportState(TypedDict):
    """One delivery transport: ``active`` or ``paused``, and why (webhooks: whether signed)."""

    state: str
    reason: str | None
    signed: NotRequired[bool]


class Transports(TypedDict):
    """The state of each delivery transport."""

    argv: TransportState
    webhook: TransportState


class Limits(TypedDict):
    """The global cap, the fires holding its slots, and the ad-hoc pool's figures."""

    max_scheduled_concurrent: int
    in_flight: int
    holders: list[SlotHolder]
    max_adhoc_concurrent: int
    adhoc_in_flight: int


class EngineHealth(TypedDict):
    """Liveness and backlog figures (see ``SchedulerEngine.health``)."""

    status: str
    running: bool
    last_tick_at: float | None
    last_tick_error: str | None
    in_flight: int
    due_backlog: int
    scheduling_lag_seconds: float
    coalesced_slots: int
    dispatch_backlog: int
    delivery_paused: bool
    delivery_paused_transports: list[TransportName]
    delivery_paused_dispatches: dict[str, int]
    delivery_paused_reason: str | None
    transports: Transports
    database_error: str | None
    global_cap: int
    holders: list[SlotHolder]
    node_id: str
    leader: bool
    backend: str
    wake_listening: bool | None
