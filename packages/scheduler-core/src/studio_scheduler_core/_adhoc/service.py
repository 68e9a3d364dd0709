"""Ad-hoc queued runs: enqueue, read, list and cancel.

An ad-hoc run is a ``schedule_runs`` row with ``schedule_id`` NULL that starts ``queued``
(``queued_at`` set, optional ``concurrency_key``); the host task worker
(:class:`~studio_scheduler_core.AdhocWorker`) claims and launches it. Its action fields are
validated by the same path as a schedule's (the schedule validation, so the launcher's
:func:`~studio_launcher.validate_action` too), and ``action_args`` stores the validated action
(``action_kind`` + fields) so the worker launches exactly what was accepted.

Cancelling a ``queued`` row makes it ``cancelled``. Cancelling a ``running`` row makes it (and
its invocation) ``cancelled`` in one guarded transaction, then stops its child: through the
in-process worker when it owns the run, else by terminating the recorded process group
(verified by pid and start time). The owning worker, in whatever process, sees the row is no
longer its own at its next lease check (about a second) and stops its child too, which covers
a child not yet recorded when the cancel was made.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiosqlite

from studio_launcher import LaunchError, is_same_process, terminate_process_group
from studio_state import Clock, lock_row, new_id, record_transition, write_transaction

from .._exceptions import RunNotCancellable, RunNotFound, ScheduleValidationError
from .._fire.ending import OPERATOR_CANCELLED, outcome_event, waiting_kind
from .._notify.service import StoredNotify, check_notify, notify_run
from .._records.codec import dumps
from .._records.run import Run
from .._records.terminal import StatusChange, apply
from .._records.vocab import ENGINE_ACTOR
from .._schedules.store import ADHOC_PAGE_KEY, get_run, page_runs
from .._schedules.validation import CREATE_FIELDS, normalize
from .._settings import SchedulerSettings
from ..abc import WorkerPass
from . import store

if TYPE_CHECKING:
    from .._fire.runner import FireRunner

logger = logging.getLogger("studio_scheduler_core")

ACTION_FIELDS = tuple(name for name in CREATE_FIELDS if name.startswith("action_"))
"""The schedule action fields an ad-hoc run takes (no trigger, no follow-ups)."""

ENQUEUE_FIELDS = (*ACTION_FIELDS, "timeout_sec", "concurrency_key", "notify")
"""Every key :meth:`AdhocRunService.enqueue` accepts."""

ENQUEUED = "run.queued.enqueued"
CANCELLED = OPERATOR_CANCELLED
CANCELLABLE = ("queued", "running", "retry_wait", "waiting_dependency")
"""The statuses an operator's cancel takes a run from."""
MAX_CONCURRENCY_KEY = 200

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A stand-in trigger so the schedule validation can be reused as is: never stored.
_SYNTHETIC = {"name": "adhoc", "trigger_type": "interval", "interval_sec": 60}

Runs = list[Run]
"""A page of runs (an alias: the service below has a method named ``list``)."""


def _check_concurrency_key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ScheduleValidationError("concurrency_key", "must be a non-blank string or null")
    if value != value.strip():
        raise ScheduleValidationError("concurrency_key", "must not start or end with whitespace")
    if len(value) > MAX_CONCURRENCY_KEY:
        raise ScheduleValidationError(
            "concurrency_key", f"must be at most {MAX_CONCURRENCY_KEY} characters"
        )
    if _CONTROL.search(value):
        raise ScheduleValidationError("concurrency_key", "must not contain control characters")
    return value


@dataclass(frozen=True, slots=True)
class AdhocInput:
    """Validated ad-hoc input, as :meth:`AdhocRunService.enqueue` stores it.

    ``action`` is the ``action`` JSON column: the action fields (``timeout_sec`` too when
    given), keyed by field name.
    """

    action: Mapping[str, Any]
    concurrency_key: str | None
    notify: StoredNotify | None


def normalize_adhoc(
    data: Mapping[str, Any], *, settings: SchedulerSettings, now: float
) -> AdhocInput:
    """Validate ad-hoc input into an :class:`AdhocInput`; nothing written.

    The action fields go through the schedule validation (types, enums, launcher rules,
    flow_yaml, cwd snapshot from a registered project); ``playbook`` is stored as ``play``.
    ``timeout_sec`` (1 .. the schedules' bound) is the run's own deadline, kept with the
    action (over the server's invocation deadline). Raises :class:`ScheduleValidationError`
    naming the field.
    """
    if not isinstance(data, Mapping):
        raise ScheduleValidationError("run", f"must be an object, got {type(data).__name__}")
    for key in data:
        if key not in ENQUEUE_FIELDS:
            raise ScheduleValidationError(
                str(key), "unknown field (an ad-hoc run takes the action fields only)"
            )
    action_input = {k: v for k, v in data.items() if k in (*ACTION_FIELDS, "timeout_sec")}
    row = normalize({**_SYNTHETIC, **action_input}, settings=settings, now=now)
    action = {field: row.get(field) for field in ACTION_FIELDS}
    if row.get("timeout_sec") is not None:
        action["timeout_sec"] = row["timeout_sec"]
    return AdhocInput(
        action=action,
        concurrency_key=_check_concurrency_key(data.get("concurrency_key")),
        notify=check_notify(data.get("notify")),
    )


class AdhocRunService:
    """Enqueue, read, list and cancel ad-hoc runs on any connection (API and CLI alike).

    ``on_change`` (the engine's ``wake``) is called after an enqueue or a cancel. ``worker``,
    when given, is the in-process worker: cancelling a run it executes stops the run at once.
    ``report_waiting``: emit the ``outcome`` event of a cancelled run that never started
    (``False`` where the engine reports those from their rows).
    """

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        settings: SchedulerSettings,
        clock: Clock = time.time,
        on_change: Callable[[], None] | None = None,
        worker: WorkerPass | None = None,
        runner: FireRunner | None = None,
        report_waiting: bool = True,
    ) -> None:
        self._conn = conn
        self._report_waiting = report_waiting
        self._settings = settings
        self._clock = clock
        self._on_change = on_change
        self._worker = worker
        self._runner = runner

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    async def validate(self, data: Mapping[str, Any]) -> AdhocInput:
        """The validated input ``enqueue`` would store."""
        return normalize_adhoc(data, settings=self._settings, now=self._clock())

    async def enqueue(self, data: Mapping[str, Any], *, actor: str | None = None) -> Run:
        """Validate and insert a ``queued`` run; return the run.

        ``actor``: the operator who queued it, named on its transition row (default: the
        service's own name).

        ``data`` holds the schedule action fields (``action_kind``, ``action_model``, …) and
        optionally ``concurrency_key``. Raises :class:`ScheduleValidationError` (nothing
        written).
        """
        now = self._clock()
        accepted = normalize_adhoc(data, settings=self._settings, now=now)
        action = accepted.action
        run_id = new_id()
        context = {"adhoc": True, "run_id": run_id, "queued_at": now}
        summary = f"ad-hoc {action['action_kind']} run queued"
        async with write_transaction(self._conn):
            await store.insert_queued(
                self._conn,
                run_id=run_id,
                context=dumps(context),
                action_kind=action["action_kind"],
                action=dumps(action),
                now=now,
                reason_code=ENQUEUED,
                summary=summary,
                concurrency_key=accepted.concurrency_key,
                notify=dumps(accepted.notify),
            )
            await record_transition(
                self._conn,
                entity_type="schedule_run",
                entity_id=run_id,
                status="queued",
                reason_code=ENQUEUED,
                reason_summary=summary,
                actor=actor or ENGINE_ACTOR,
                metadata={"concurrency_key": accepted.concurrency_key},
                now=now,
            )
        self._changed()
        return await self.get(run_id)

    async def get(self, run_id: str) -> Run:
        """One ad-hoc run (:class:`RunNotFound` for an unknown id or a scheduled run)."""
        run = await store.get_adhoc(self._conn, run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    async def list(
        self,
        *,
        status: str | None = None,
        limit: int = 100,
        offset: int = 0,
        after: Sequence[Any] | None = None,
    ) -> tuple[Runs, int]:
        """``(runs, total)`` of ad-hoc runs, newest first by :data:`ADHOC_PAGE_KEY`, optionally
        of one status. ``after``, the key of the previous page's last run, seeks past it
        instead of skipping ``offset`` rows. The total is exact and read from the trigger-kept
        per-status counts, so it costs the same whatever the history."""
        return await page_runs(
            self._conn,
            store.ADHOC_WHERE,
            [],
            key=ADHOC_PAGE_KEY,
            status=status,
            limit=limit,
            offset=offset,
            after=after,
            counted_adhoc=True,
        )

    async def cancel(self, run_id: str, *, actor: str | None = None) -> Run:
        """Cancel a queued, waiting or running run of any kind; return the run (now
        ``cancelled``). ``actor``: the operator who cancelled it, named on the transition
        rows (default ``operator``).

        Ad-hoc, scheduled and follow-up runs alike: a running run's child process group (and
        every descendant) is terminated before this returns when this process can reach it
        (the in-process worker or fire runner, or the recorded pid + start time). A planned
        retry (``retry_wait``) or a buffered/backfilled occurrence (``waiting_dependency``)
        has no process: cancelling it means it never starts (its start is guarded on the
        waiting status).
        Raises :class:`RunNotFound`, or :class:`RunNotCancellable` for a terminal run.

        The run's ``outcome`` event: a run with no process is reported here (unless the
        engine reports it from its row); a running run by the process that executes it, once
        its own terminal write finds the cancel (wherever the cancel was made).
        """
        now = self._clock()
        who = actor or "operator"
        async with write_transaction(self._conn):
            row = await get_run(self._conn, run_id)
            if row is None:
                raise RunNotFound(run_id)
            status = row.status
            if status not in CANCELLABLE:
                raise RunNotCancellable(run_id, status)
            summary = f"cancelled by the operator while {status}"
            guards: dict[str, str | int] = {}
            if status == "running" and row.leased_by is not None:
                guards = {"leased_by": row.leased_by, "lease_attempts": row.lease_attempts}
            changes = [
                StatusChange(
                    "schedule_runs", run_id, "cancelled", CANCELLED, summary, who, now,
                    previous=status, sets={"ended_at": now}, guards=guards,
                    metadata={"leased_by": row.leased_by, "child_pid": row.child_pid},
                )
            ]  # fmt: skip
            if status == "running" and row.invocation_id:
                # PostgreSQL: the invocation's row first, as the run's terminal write takes
                # them (invocation, then run): the two never wait on each other in a cycle.
                await lock_row(self._conn, "invocations", row.invocation_id)
                changes.append(
                    StatusChange(
                        "invocations", row.invocation_id, "cancelled", CANCELLED, summary,
                        who, now, sets={"ended_at": now},
                        evidence_refs=[{"kind": "schedule_run", "id": run_id}],
                    )
                )  # fmt: skip
            applied = (await apply(self._conn, changes))[0]
            if applied:
                await notify_run(self._conn, run_id, now=now)
        if applied and status != "running" and self._report_waiting:
            outcome_event(
                run_id=run_id,
                schedule_id=row.schedule_id,
                status="cancelled",
                reason_code=CANCELLED,
                exit_code=None,
                kind=waiting_kind(row.schedule_id, row.chain_depth),
                duration=None,
            )
        if status == "running":
            await self._stop_child(run_id, row.child_pid, row.child_started_at)
        self._changed()
        done = await get_run(self._conn, run_id)
        if done is None:  # deleted with its schedule since (another node, PostgreSQL)
            raise RunNotFound(run_id)
        return done

    async def stop_process(self, row: Mapping[str, Any]) -> None:
        """Stop the process of a run another transaction already cancelled (``row``: its
        ``id``, ``child_pid``, ``child_started_at``), as :meth:`cancel` stops its own."""
        await self._stop_child(str(row["id"]), row.get("child_pid"), row.get("child_started_at"))

    async def _stop_child(self, run_id: str, pid: int | None, started: float | None) -> None:
        if self._worker is not None and await self._worker.revoke(run_id):
            return
        if self._runner is not None and await self._runner.revoke(run_id):
            return
        if not pid or started is None or not is_same_process(int(pid), float(started)):
            return
        try:
            await terminate_process_group(int(pid))
        except (LaunchError, OSError) as exc:
            logger.warning("could not terminate process group %s of run %s: %s", pid, run_id, exc)
