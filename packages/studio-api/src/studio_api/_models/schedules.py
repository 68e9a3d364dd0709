"""Schedule and run models: bodies and answers of ``/api/schedules`` and ``/api/runs``.

The record-shaped models are derived from :class:`studio_scheduler_core.Schedule`,
:class:`~studio_scheduler_core.Action` and :class:`~studio_scheduler_core.Run`; the
vocabularies are scheduler-core's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from studio_scheduler_core import (
    Action,
    ActionKindName,
    MissedFirePolicy,
    OverlapPolicy,
    Run,
    RunStatus,
    Schedule,
    TriggerType,
    record_specs,
)

from .base import RequestModel, ResponseModel
from .derive import FieldView, of_specs, request_model, response_model
from .examples import schedule_create_examples
from .stats import HEALTH_VIEWS

__all__ = [
    "ActionKind",
    "BackfillOut",
    "BackfillRequest",
    "DisableRequest",
    "FireTime",
    "MissedFirePolicy",
    "OverlapPolicy",
    "PreviewOut",
    "RunCreate",
    "RunDetail",
    "RunList",
    "RunOut",
    "RunStatus",
    "ScheduleCreate",
    "ScheduleList",
    "ScheduleOut",
    "ScheduleUpdate",
    "TriggerOut",
    "TriggerType",
]

ActionKind = ActionKindName

_SCHEDULE = record_specs(Schedule)
_INPUT = of_specs(s for s in _SCHEDULE if s.meta.create)
_PATCH = of_specs(s for s in _SCHEDULE if s.updatable)
_ADHOC = of_specs(
    [*(s for s in record_specs(Action) if s.meta.create)]
    + [s for s in record_specs(Run) if s.meta.create]
)

if TYPE_CHECKING:

    class ScheduleCreate(RequestModel): ...

    class ScheduleUpdate(RequestModel): ...

    class RunCreate(RequestModel): ...

    class ScheduleOut(ResponseModel): ...

    class RunOut(ResponseModel): ...

else:
    ScheduleCreate = request_model(
        "ScheduleCreate",
        "Body of ``POST /api/schedules`` (the create model, plus cwd, command, enabled).",
        _INPUT,
        partial=False,
        examples=schedule_create_examples(),
    )
    ScheduleUpdate = request_model(
        "ScheduleUpdate",
        "Body of ``PATCH /api/schedules/{id}``: only the keys sent are changed (null clears; "
        "``github_cursor``: a github_poll schedule's cursor, null resets it).",
        [*_PATCH, FieldView("github_cursor", str | None, None, False)],
        partial=True,
    )
    RunCreate = request_model(
        "RunCreate",
        "Body of ``POST /api/runs``: an ad-hoc run (a schedule's action fields, no trigger).",
        _ADHOC,
        partial=False,
    )
    _ScheduleRecordOut = response_model(
        "ScheduleRecordOut",
        "A stored schedule (every column; JSON columns decoded) and, in the list and the "
        "one-schedule views, its health (``health`` holds the verdict).",
        [*of_specs(s for s in _SCHEDULE if s.meta.public), *HEALTH_VIEWS],
    )

    class ScheduleOut(_ScheduleRecordOut):
        """A stored schedule (every column; JSON columns decoded), whether a set-managed
        schedule has ``drifted`` from its set's last apply, and ``warnings`` saying so."""

        drifted: bool = False
        """Managed by a set and edited outside it since the set's last apply."""
        warnings: list[str] = Field(default_factory=list)
        """What the caller should know about the schedule (a drifted set-owned schedule)."""

        @model_validator(mode="after")
        def _warn_drift(self) -> ScheduleOut:
            if self.drifted and not self.warnings:
                self.warnings = [
                    f"managed by schedule set {self.owner_key!r} (member {self.set_member!r}) "
                    "and changed outside it: the next apply of the set restores the file's "
                    "version"
                ]
            return self

    RunOut = response_model(
        "RunOut",
        "A schedule run (every column of ``schedule_runs``; JSON columns decoded).",
        of_specs(record_specs(Run)),
    )


class DisableRequest(RequestModel):
    """Optional body of ``POST /api/schedules/{id}/disable``."""

    reason: str | None = None


class ScheduleList(ResponseModel):
    """One page of schedules; ``total`` counts every match, not just this page."""

    schedules: list[ScheduleOut]
    total: int
    limit: int
    offset: int


class RunDetail(RunOut):
    """One run with the runs its follow-ups started (``chain_children``)."""

    chain_children: list[RunOut] = Field(default_factory=list)


class RunList(ResponseModel):
    """One page of runs (a schedule's, or the ad-hoc runs), newest first; ``total`` counts
    every match."""

    runs: list[RunOut]
    total: int
    limit: int
    offset: int
    next_cursor: str | None = None
    """Pass as ``?cursor=`` for the next page (keyset: a deep page costs what the first
    does); ``None`` on the last page."""


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


class BackfillRequest(RequestModel):
    """Body of ``POST /api/schedules/{id}/backfill``: ISO 8601 or epoch seconds, [start, end)."""

    start: str | float
    end: str | float


class BackfillOut(ResponseModel):
    """Answer of a backfill: how many runs it started."""

    runs: int
