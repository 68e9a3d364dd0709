"""Studio's scheduler engine: schedules, triggers, admission gates, fires, follow-ups and recovery.

:class:`SchedulerEngine` runs the loop (docs/architecture.md describes the tick);
:class:`ScheduleService` is the create/validate/update/enable/disable/delete surface the API
and CLI share; :func:`report_usage` writes a child's usage evidence; :func:`ensure_schema`
migrates every table Studio needs. :class:`Schedule`, :class:`Action` and :class:`Run` are the
records the stores return and the services take and return (their field metadata is
:func:`record_specs`); ``TRIGGER_TYPES``, ``ACTION_KINDS``,
``RUN_STATUSES`` and the policies are the vocabularies, defined once here. The ``read_*``
functions are the views the API and the CLI show (run status, slots, dashboard, metric figures):
hosts read the database through them, never with SQL of their own.
:func:`validate_schedule_sets` checks ``ScheduleSet`` documents (schedules kept as files)
without a database.
"""

from __future__ import annotations

from .__about__ import __version__
from ._adhoc.service import AdhocRunService
from ._adhoc.worker import AdhocWorker
from ._admission.usage import report_usage
from ._engine.engine import SchedulerEngine
from ._engine.leadership import FileLockLeadership, PostgresLeadership
from ._engine.reports import EngineHealth, Limits, TickReport
from ._exceptions import (
    DatabaseUnavailable,
    EngineLocked,
    FireRefused,
    InvalidSettings,
    InvalidStatsQuery,
    RunNotCancellable,
    RunNotFound,
    ScheduleAtPassed,
    ScheduleHasRunningRuns,
    ScheduleNameTaken,
    ScheduleNotFound,
    SchedulerError,
    ScheduleValidationError,
)
from ._fire.dbfile import storage_fault
from ._fire.logcopy import read_stored_run_log
from ._fire.runlog import read_run_log, run_log_dir, run_log_path
from ._github.cursor import normalize_cursor, set_github_cursor
from ._github.source import GithubPollSource
from ._notify.service import (
    DEFAULT_NOTIFY_ON,
    NOTIFY_EVENTS,
    check_notify,
    notify_run,
    notify_schedule_disabled,
)
from ._observe.events import EVENTS_LOGGER
from ._observe.health import (
    HEALTH_VERDICTS,
    ScheduleHealth,
    read_health_counts,
    read_health_counts_sync,
    read_schedule_health,
)
from ._observe.stats import (
    ACTIVITY_WINDOWS,
    SPEND_GROUPS,
    Activity,
    ActivityBucket,
    Spend,
    SpendRow,
    read_activity,
    read_spend,
)
from ._observe.status import LastRun, ScheduleStatus, read_schedule_status
from ._observe.store import (
    HeldSlot,
    NextFire,
    NodeInfo,
    Overview,
    RunLine,
    RunState,
    latest_transition_seq,
    read_dispatch_counts,
    read_dispatch_outcomes,
    read_github_polls,
    read_node,
    read_overview,
    read_run_status,
    read_runs_page,
    read_slot_holders,
    schedules_have_zones,
)
from ._records.column import Column, Spec, record_specs
from ._records.run import Run, RunWithChain
from ._records.schedule import Action, Schedule
from ._records.schedule_input import ScheduleInput
from ._records.vocab import (
    ACTION_KIND_ALIASES,
    ACTION_KINDS,
    ENGINE_ACTOR,
    ERROR_CLASSES,
    FINAL_RUN_STATUSES,
    MISSED_FIRE_POLICIES,
    OVERLAP_POLICIES,
    RUN_STATUSES,
    TRIGGER_TYPES,
    ActionKindName,
    MissedFirePolicy,
    OverlapPolicy,
    RunStatus,
    TriggerType,
)
from ._recovery.orphans import OrphanReaper
from ._schedules.enabling import KEEP
from ._schedules.followups import MAX_CHAIN_DEPTH, OVERLAY_KEYS
from ._schedules.jitter import JitteredEntry
from ._schedules.service import ScheduleService
from ._schedules.sets.apply import (
    ScheduleSetApplied,
    ScheduleSetChanged,
    ScheduleSetRefused,
    apply_schedule_plan,
)
from ._schedules.sets.durations import parse_duration
from ._schedules.sets.export import ScheduleSetExport, export_schedule_set
from ._schedules.sets.loader import MAX_DOCUMENT_BYTES, MAX_MEMBERS, ScheduleSetUnreadable
from ._schedules.sets.plan import plan_schedule_sets
from ._schedules.sets.records import (
    ScheduleSetChange,
    ScheduleSetMember,
    ScheduleSetPlan,
    ScheduleSetProblem,
    ScheduleSetReport,
)
from ._schedules.sets.resolve import validate_schedule_set_text, validate_schedule_sets
from ._schedules.store import ADHOC_PAGE_KEY, RUN_PAGE_KEY
from ._schema import ensure_schema
from ._settings import SchedulerSettings
from ._triggers.cadence import PreviewEntry, preview_fire_times
from ._triggers.registry import CadenceTrigger, TriggerRegistry
from ._triggers.threshold import MetricThreshold

__all__ = [
    "ACTION_KINDS",
    "ACTION_KIND_ALIASES",
    "ACTIVITY_WINDOWS",
    "ADHOC_PAGE_KEY",
    "Action",
    "ActionKindName",
    "Activity",
    "ActivityBucket",
    "AdhocRunService",
    "AdhocWorker",
    "CadenceTrigger",
    "Column",
    "DEFAULT_NOTIFY_ON",
    "DatabaseUnavailable",
    "ENGINE_ACTOR",
    "ERROR_CLASSES",
    "EVENTS_LOGGER",
    "EngineHealth",
    "EngineLocked",
    "FINAL_RUN_STATUSES",
    "FileLockLeadership",
    "FireRefused",
    "GithubPollSource",
    "HEALTH_VERDICTS",
    "HeldSlot",
    "InvalidSettings",
    "InvalidStatsQuery",
    "JitteredEntry",
    "KEEP",
    "LastRun",
    "Limits",
    "MAX_CHAIN_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_MEMBERS",
    "MISSED_FIRE_POLICIES",
    "MetricThreshold",
    "MissedFirePolicy",
    "NOTIFY_EVENTS",
    "NextFire",
    "NodeInfo",
    "OVERLAP_POLICIES",
    "OVERLAY_KEYS",
    "OrphanReaper",
    "OverlapPolicy",
    "Overview",
    "PostgresLeadership",
    "PreviewEntry",
    "RUN_PAGE_KEY",
    "RUN_STATUSES",
    "Run",
    "RunLine",
    "RunNotCancellable",
    "RunNotFound",
    "RunState",
    "RunStatus",
    "RunWithChain",
    "SPEND_GROUPS",
    "Schedule",
    "ScheduleAtPassed",
    "ScheduleHasRunningRuns",
    "ScheduleHealth",
    "ScheduleInput",
    "ScheduleNameTaken",
    "ScheduleNotFound",
    "ScheduleService",
    "ScheduleSetApplied",
    "ScheduleSetChange",
    "ScheduleSetChanged",
    "ScheduleSetExport",
    "ScheduleSetMember",
    "ScheduleSetPlan",
    "ScheduleSetProblem",
    "ScheduleSetRefused",
    "ScheduleSetReport",
    "ScheduleSetUnreadable",
    "ScheduleStatus",
    "ScheduleValidationError",
    "SchedulerEngine",
    "SchedulerError",
    "SchedulerSettings",
    "Spec",
    "Spend",
    "SpendRow",
    "TRIGGER_TYPES",
    "TickReport",
    "TriggerRegistry",
    "TriggerType",
    "__version__",
    "apply_schedule_plan",
    "check_notify",
    "ensure_schema",
    "export_schedule_set",
    "latest_transition_seq",
    "normalize_cursor",
    "notify_run",
    "notify_schedule_disabled",
    "parse_duration",
    "plan_schedule_sets",
    "preview_fire_times",
    "read_activity",
    "read_dispatch_counts",
    "read_dispatch_outcomes",
    "read_github_polls",
    "read_health_counts",
    "read_health_counts_sync",
    "read_node",
    "read_overview",
    "read_run_log",
    "read_run_status",
    "read_runs_page",
    "read_schedule_health",
    "read_schedule_status",
    "read_slot_holders",
    "read_spend",
    "read_stored_run_log",
    "record_specs",
    "report_usage",
    "run_log_dir",
    "run_log_path",
    "schedules_have_zones",
    "set_github_cursor",
    "storage_fault",
    "validate_schedule_set_text",
    "validate_schedule_sets",
]
