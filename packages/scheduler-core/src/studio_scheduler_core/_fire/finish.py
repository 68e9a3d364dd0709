"""The terminal transaction of a running run and its invocation, retried until it lands.

The invocation's status comes from its sessions' evidence when there is any; the run's from
how its child ended. Both are written through :func:`~studio_scheduler_core._records.terminal.apply`
with the run's notification, in one transaction; the terminal writes of fires that end in the
same loop turn with nothing to notify or retry share one transaction (each in its savepoint).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from studio_state import (
    in_owned_transaction,
    run_to_completion,
    run_write_transaction,
    write_transaction,
)

from .._notify.service import notify_run
from .._records.terminal import StatusChange, apply_sync, clip
from .._records.vocab import ENGINE_ACTOR
from . import store
from .dbfile import StorageHalted, one_line
from .env import FireEnv, Prepared
from .retry import next_attempt, plan_retry

logger = logging.getLogger("studio_scheduler_core")

_SESSION_PRECEDENCE = (
    "timed_out",
    "failed",
    "aborted",
    "cancelled",
    "completed_empty",
    "completed",
)
_RETRY_FIRST = 0.05
_RETRY_MAX = 5.0
_HALTED_RECHECK = 1.0


class _Notifies(Exception):
    """The run (or its schedule) has a ``notify``: its end is written with the notification."""


def _resolve_invocation(session_statuses: list[str], fallback: str) -> tuple[str, bool]:
    present = set(session_statuses)
    for status in _SESSION_PRECEDENCE:
        if status in present:
            return status, True
    return fallback, False


@dataclass(frozen=True)
class _Ending:
    """How the run ended, as the terminal write records it."""

    status: str
    reason_code: str
    summary: str
    exit_code: int | None
    error_detail: str | None


async def finish(
    env: FireEnv,
    fire: Prepared,
    *,
    status: str,
    reason_code: str,
    summary: str,
    exit_code: int | None,
    error_detail: str | None,
    on_commit: Callable[[], None] | None = None,
) -> bool:
    """The terminal transaction of a running run and its invocation, retried until it lands.

    A storage fault (disk full, read-only, I/O error …) or a lock held past the busy timeout
    must not leave the run ``running`` with no process: the write is retried with backoff
    (each attempt bounded by the busy timeout, no bound in total), every failure logged and a
    storage fault reported through ``env.storage`` until a write succeeds (logged once, not
    per attempt; a retry goes at once when another write lands). While the database file or
    its ``-wal`` file is no longer the one opened (``env.storage.halted``) nothing is
    attempted. At shutdown (``env.closing``) a failing write is given up and raised;
    start-up reconciles the row.

    Cancelling the caller (shutdown, an operator's cancel) does not cancel the write: it runs
    to its end first, since a rolled-back terminal write would leave the run ``running``
    with no process; :class:`asyncio.CancelledError` is raised after it.
    """
    ending = _Ending(status, reason_code, summary, exit_code, error_detail)
    return await run_to_completion(_finish_retrying(env, fire, ending, on_commit))


async def _finish_retrying(
    env: FireEnv, fire: Prepared, ending: _Ending, on_commit: Callable[[], None] | None
) -> bool:
    delay = _RETRY_FIRST
    failures = 0
    while True:
        halted = env.storage.halted_now()
        if halted is not None:
            # The database or its log is no longer the file opened: a write would damage it.
            # Nothing is written; the row stays ``running`` for start-up to reconcile.
            if env.closing:
                raise StorageHalted(halted)
            await env.storage.wait(_HALTED_RECHECK)
            continue
        try:
            won = await _finish_once(env, fire, ending, on_commit)
        except sqlite3.Error as exc:
            problem = env.storage.failed(exc)
            busy = ((getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF) in (5, 6)  # BUSY*, LOCKED*
            if (problem is None and not busy) or env.closing:
                raise
            failures += 1
            if failures == 1 or problem is None:
                logger.error(
                    "terminal write of run %s (%s) failed: %s; retrying until it lands",
                    fire.run_id,
                    ending.status,
                    problem or one_line(exc),
                )
            # Wait outside this block: the exception's traceback (its frames, any statement
            # still open in them) must not outlive the attempt, or SQLite keeps the
            # connection in its error state and the next attempt fails the same way.
        else:
            env.storage.succeeded()
            if failures:
                logger.warning(
                    "terminal write of run %s landed after %d failure(s)", fire.run_id, failures
                )
            return won
        await env.storage.wait(delay)
        delay = min(delay * 2, _RETRY_MAX)


async def _finish_once(
    env: FireEnv, fire: Prepared, ending: _Ending, on_commit: Callable[[], None] | None
) -> bool:
    """One attempt of the terminal transaction (guarded on running).

    The invocation's status is resolved from its sessions (timed_out > failed > aborted >
    cancelled > completed_empty > completed), else from the run's outcome. ``on_commit`` runs
    right after the commit, before any other task can run. Returns whether the run write won.

    With no retry to plan and no ``notify`` on the run or its schedule, the write joins the
    other terminal writes of this loop turn (one transaction, one trip, one fsync).
    """
    status, reason_code, summary = ending.status, ending.reason_code, ending.summary
    exit_code, error_detail = ending.exit_code, ending.error_detail
    now = env.clock()
    outcome = (status, reason_code, summary, exit_code, error_detail)

    def changes(db: sqlite3.Connection) -> bool:
        # The evidence read and both guarded updates with their transition rows: one trip.
        statuses = store.session_statuses_sync(db, fire.invocation_id)
        return apply_sync(db, _terminal_changes(fire, statuses, now, outcome))[1]

    def alone(db: sqlite3.Connection) -> bool:
        run_won = changes(db)
        if run_won and store.notify_configured_sync(db, fire.run_id):
            raise _Notifies  # rolled back; the full transaction below enqueues it
        return run_won

    def committed() -> None:
        env.committed.pop(fire.run_id, None)
        if on_commit is not None:
            on_commit()

    retry = next_attempt(fire.action, fire.trigger_context, status) is not None
    if not retry and not in_owned_transaction(env.conn):
        # The common end (no retry to plan, nothing to notify): the writes in a single trip,
        # in one transaction with the other fires that end in this loop turn.
        with contextlib.suppress(_Notifies):
            return await env.grouped().run(alone, committed)
    async with write_transaction(env.conn):
        # The invocation first: the run's status, which readers of this connection wait
        # on, changes last, right before the commit.
        run_won = await run_write_transaction(env.conn, changes)
        if run_won:
            # The retry first: a failure with a later attempt planned is not notified.
            await plan_retry(
                env.conn,
                run_id=fire.run_id,
                action=fire.action,
                context=fire.trigger_context,
                status=status,
                chain_depth=fire.chain_depth,
                now=now,
                chain_parent_id=fire.chain_parent_id,
            )
            await notify_run(env.conn, fire.run_id, now=now)
    committed()
    return run_won


def _terminal_changes(
    fire: Prepared,
    statuses: list[str],
    now: float,
    outcome: tuple[str, str, str, int | None, str | None],
) -> list[StatusChange]:
    """The invocation's change (its status from the sessions' evidence when there is any),
    then the run's."""
    status, reason_code, summary, exit_code, error_detail = outcome
    inv_fallback = "completed" if status == "completed" else status
    inv_status, from_sessions = _resolve_invocation(statuses, inv_fallback)
    inv_reason = f"run.{inv_status}.session_evidence" if from_sessions else reason_code
    meta = {"exit_code": exit_code}
    run_change = StatusChange(
        "schedule_runs",
        fire.run_id,
        status,
        reason_code,
        summary,
        ENGINE_ACTOR,
        now,
        sets={
            "exit_code": exit_code,
            "ended_at": now,
            "error_detail": None if error_detail is None else clip(error_detail),
            "status_evidence_refs": f'[{{"kind":"invocation","id":"{fire.invocation_id}"}}]',
        },
        guards=fire.run_guards,
        evidence_refs=[{"kind": "invocation", "id": fire.invocation_id}],
        metadata=meta,
    )
    invocation_change = StatusChange(
        "invocations",
        fire.invocation_id,
        inv_status,
        inv_reason,
        summary,
        ENGINE_ACTOR,
        now,
        sets={"ended_at": now},
        evidence_refs=[{"kind": "schedule_run", "id": fire.run_id}],
        metadata={**meta, "session_statuses": statuses},
    )
    return [invocation_change, run_change]
