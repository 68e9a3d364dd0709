"""Studio's scheduler engine: schedules, triggers, admission gates, fires, follow-ups and recovery.

:class:`SchedulerEngine` runs the loop (ADR-0070 D1-D4, DESIGN §5); :class:`ScheduleService`
is the create/validate/update/enable/disable/delete surface the API and CLI share;
:func:`report_usage` writes a child's usage evidence; :func:`ensure_schema` migrates every
table Studio needs.
"""

from __future__ import annotations

from .__about__ import __version__
from ._adhoc import AdhocRunService
from ._cadence import preview_fire_times
from ._engine import SchedulerEngine
from ._exceptions import (
    DatabaseUnavailable,
    EngineLocked,
    FireRefused,
    InvalidSettings,
    RunNotCancellable,
    RunNotFound,
    ScheduleNameTaken,
    ScheduleNotFound,
    SchedulerError,
    ScheduleValidationError,
)
from ._followups import MAX_CHAIN_DEPTH, OVERLAY_KEYS
from ._github import GithubPollSource
from ._orphans import OrphanReaper
from ._schema import ensure_schema
from ._service import ScheduleService
from ._settings import SchedulerSettings
from ._threshold import MetricThreshold
from ._triggers import CadenceTrigger, TriggerRegistry
from ._usage import report_usage
from ._worker import AdhocWorker

__all__ = [
    "AdhocRunService",
    "AdhocWorker",
    "CadenceTrigger",
    "DatabaseUnavailable",
    "EngineLocked",
    "FireRefused",
    "GithubPollSource",
    "InvalidSettings",
    "MAX_CHAIN_DEPTH",
    "MetricThreshold",
    "OVERLAY_KEYS",
    "OrphanReaper",
    "RunNotCancellable",
    "RunNotFound",
    "ScheduleNameTaken",
    "ScheduleNotFound",
    "ScheduleService",
    "ScheduleValidationError",
    "SchedulerEngine",
    "SchedulerError",
    "SchedulerSettings",
    "TriggerRegistry",
    "__version__",
    "ensure_schema",
    "preview_fire_times",
    "report_usage",
]
