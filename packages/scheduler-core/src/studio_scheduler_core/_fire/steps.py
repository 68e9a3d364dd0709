"""One fire: prepare the argv, commit the occurrence, spawn, record the outcome.

Setup (argv, executable, cwd) runs before the occurrence transaction, so a refusal is recorded
in that same transaction as a ``failed`` run (and never re-fires every tick). After the commit
the child is spawned through the launcher; every outcome ends in one guarded terminal
transaction for the run and its invocation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiosqlite

from studio_launcher import (
    CwdUnavailable,
    DeadlineExceeded,
    ExecutableNotFound,
    LaunchError,
    SpawnFailed,
    build_argv,
    process_start_time,
    render_template,
    require_li_executable,
    resolve_cwd,
    spawn_and_wait,
)
from studio_state import Clock, Transition, new_id, write_transaction

from .._dbfile import StorageHealth
from .._notify import notify_run
from .._policies.retry import plan_retry
from .._runlog import run_log_path
from .._settings import SchedulerSettings
from .._terminal import StatusChange, apply, clip
from .occurrence import ScheduleClaim, commit_fire

logger = logging.getLogger("studio_scheduler_core")

_FIRED_REASON = {
    "scheduled": "schedule.fired.due",
    "manual": "schedule.fired.manual",
    "missed_fire": "schedule.fired.missed_fire",
    "follow_up": "schedule.fired.follow_up",
}
_PROMPT_KINDS = frozenset({"agent", "flow", "fanout", "play"})
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


@dataclass
class FireEnv:
    """What every fire needs: the writer connection, settings, clock and the database path."""

    conn: aiosqlite.Connection
    settings: SchedulerSettings
    clock: Clock
    db_path: str
    live: dict[str, tuple[int, float | None]] = field(default_factory=dict)
    """run id → (child pid, start time) of children this process is running."""
    committed: set[str] = field(default_factory=set)
    """Runs committed ``running`` by this process and not yet terminal."""
    storage: StorageHealth = field(default_factory=StorageHealth)
    """Where a terminal write reports a storage fault (shared with the engine's health)."""
    closing: bool = False
    """Set at shutdown: a failing terminal write is then given up (start-up reconciles it)."""

    def child_env(self, invocation_id: str) -> dict[str, str]:
        """The child's environment: base env + LIONAGI_INVOCATION_ID + LIONAGI_STUDIO_DB."""
        base = self.settings.child_env
        env = dict(os.environ if base is None else base)
        env["LIONAGI_INVOCATION_ID"] = invocation_id
        env["LIONAGI_STUDIO_DB"] = self.db_path
        return env


@dataclass
class Prepared:
    """A fire ready to commit: ids, the action row, argv (or the setup refusal)."""

    run_id: str
    invocation_id: str
    schedule: Mapping[str, Any]
    trigger_context: dict[str, Any]
    kind: str
    chain_depth: int = 0
    chain_parent_id: str | None = None
    argv: list[str] = field(default_factory=list)
    tmp_path: str | None = None
    cwd: str | None = None
    prompt: str | None = None
    setup_error: tuple[str, str] | None = None
    run_guards: dict[str, Any] = field(default_factory=dict)
    """Further ``column = value`` guards of the terminal run write (an ad-hoc run's lease)."""

    def discard(self) -> None:
        """Remove the flow_yaml temp file of a fire that will not spawn."""
        if self.tmp_path:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp_path)
            self.tmp_path = None


@dataclass
class Outcome:
    """How a run ended, and whether this fire's terminal write won."""

    status: str
    reason_code: str
    exit_code: int | None
    applied: bool


def prepare(
    env: FireEnv,
    schedule: Mapping[str, Any],
    trigger_context: Mapping[str, Any],
    *,
    kind: str,
    run_id: str | None = None,
    chain_depth: int = 0,
    chain_parent_id: str | None = None,
) -> Prepared:
    """Build the argv and resolve executable and cwd; a refusal becomes ``setup_error``."""
    fire = Prepared(
        run_id=run_id or new_id(),
        invocation_id=new_id(),
        schedule=schedule,
        trigger_context=dict(trigger_context),
        kind=kind,
        chain_depth=chain_depth,
        chain_parent_id=chain_parent_id,
    )
    settings = env.settings
    try:
        action_kind = schedule.get("action_kind")
        prefix = None
        if action_kind != "command":
            prefix = require_li_executable(
                configured=settings.li_executable,
                environ=os.environ if settings.child_env is None else settings.child_env,
            )
        fire.argv, fire.tmp_path = build_argv(
            schedule,
            fire.trigger_context,
            executable_prefix=prefix,
            command_allowlist=settings.command_allowlist,
        )
        fire.cwd = resolve_cwd(
            schedule, project_paths=settings.project_paths, fallback=settings.default_cwd
        )
        prompt = schedule.get("action_prompt")
        if action_kind in _PROMPT_KINDS and isinstance(prompt, str) and prompt:
            fire.prompt = render_template(prompt, fire.trigger_context)
        elif action_kind == "play":
            fire.prompt = schedule.get("action_playbook")
    except CwdUnavailable as exc:
        fire.setup_error = ("run.failed.missing_cwd", str(exc))
    except (ExecutableNotFound, SpawnFailed) as exc:
        fire.setup_error = ("run.failed.spawn_error", str(exc))
    except LaunchError as exc:
        fire.setup_error = ("run.failed.invalid_action", str(exc))
    if fire.setup_error is not None:
        fire.discard()
        fire.argv = []
    return fire


async def commit(env: FireEnv, fire: Prepared, claim: ScheduleClaim) -> bool:
    """The occurrence transaction. ``False``: the guard was lost and nothing was written."""
    now = env.clock()
    schedule = fire.schedule
    sid = str(schedule["id"])
    failed = fire.setup_error is not None
    run_status = "failed" if failed else "running"
    fired_reason = _FIRED_REASON[fire.kind]
    reason_code, summary = (
        fire.setup_error if fire.setup_error is not None else (fired_reason, "the trigger was due")
    )
    run = {
        "id": fire.run_id,
        "schedule_id": sid,
        "invocation_id": fire.invocation_id,
        "trigger_context": fire.trigger_context,
        "action_kind": schedule.get("action_kind"),
        "action_args": fire.argv,
        "status": run_status,
        "chain_parent_id": fire.chain_parent_id,
        "chain_depth": fire.chain_depth,
        "fired_at": now,
        "ended_at": now if failed else None,
        "error_detail": clip(summary) if failed else None,
        "created_at": now,
        "updated_at": now,
        "status_reason_code": reason_code,
        "status_reason_summary": clip(summary),
        "status_evidence_refs": [{"kind": "schedule", "id": sid}],
    }
    invocation = {
        "id": fire.invocation_id,
        "schedule_run_id": fire.run_id,
        "skill": f"scheduled:{schedule.get('name')}",
        "status": run_status,
        "prompt": fire.prompt,
        "started_at": now,
        "ended_at": now if failed else None,
        "status_reason_code": reason_code if failed else "run.started.ok",
        "status_reason_summary": clip(summary) if failed else None,
        "created_at": now,
        "updated_at": now,
    }
    meta = {"trigger_context": fire.trigger_context, "chain_depth": fire.chain_depth}
    transitions = [
        Transition(
            entity_type="schedule_run",
            entity_id=fire.run_id,
            status="running",
            reason_code=fired_reason,
            reason_summary="the trigger was due",
            evidence_refs=[{"kind": "schedule", "id": sid}],
            actor="scheduler",
            metadata=meta,
            created_at=now,
        ),
        Transition(
            entity_type="invocation",
            entity_id=fire.invocation_id,
            status="running",
            reason_code="run.started.ok",
            evidence_refs=[{"kind": "schedule_run", "id": fire.run_id}],
            actor="scheduler",
            created_at=now,
        ),
    ]
    if failed:
        transitions += [
            Transition(
                entity_type=t.entity_type,
                entity_id=t.entity_id,
                previous_status="running",
                status="failed",
                reason_code=reason_code,
                reason_summary=clip(summary),
                actor="scheduler",
                created_at=now,
            )
            for t in transitions
        ]
    won = await commit_fire(
        env.conn, claim=claim, run=run, invocation=invocation, transitions=transitions, now=now
    )
    if not won:
        fire.discard()
    elif not failed:
        env.committed.add(fire.run_id)
    return won


def _resolve_invocation(session_statuses: list[str], fallback: str) -> tuple[str, bool]:
    present = set(session_statuses)
    for status in _SESSION_PRECEDENCE:
        if status in present:
            return status, True
    return fallback, False


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
    storage fault reported through ``env.storage`` until a write succeeds. At shutdown
    (``env.closing``) a failing write is given up and raised; start-up reconciles the row.
    """
    delay = _RETRY_FIRST
    failures = 0
    while True:
        try:
            won = await _finish_once(
                env,
                fire,
                status=status,
                reason_code=reason_code,
                summary=summary,
                exit_code=exit_code,
                error_detail=error_detail,
                on_commit=on_commit,
            )
        except sqlite3.Error as exc:
            problem = env.storage.failed(exc)
            busy = getattr(exc, "sqlite_errorcode", None) in (5, 6)  # BUSY, LOCKED
            if (problem is None and not busy) or env.closing:
                raise
            failures += 1
            logger.error(
                "terminal write of run %s (%s) failed %d time(s): %s; retrying in %.2fs",
                fire.run_id,
                status,
                failures,
                problem or exc,
                delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RETRY_MAX)
            continue
        env.storage.succeeded()
        if failures:
            logger.warning(
                "terminal write of run %s landed after %d failure(s)", fire.run_id, failures
            )
        return won


async def _finish_once(
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
    """One attempt of the terminal transaction (guarded on running).

    The invocation's status is resolved from its sessions (timed_out > failed > aborted >
    cancelled > completed_empty > completed), else from the run's outcome. ``on_commit`` runs
    right after the commit, before any other task can run. Returns whether the run write won.
    """
    now = env.clock()
    sessions = list(
        await env.conn.execute_fetchall(
            "SELECT status FROM sessions WHERE invocation_id = ?", (fire.invocation_id,)
        )
    )
    inv_fallback = "completed" if status == "completed" else status
    inv_status, from_sessions = _resolve_invocation([s["status"] for s in sessions], inv_fallback)
    inv_reason = f"run.{inv_status}.session_evidence" if from_sessions else reason_code
    meta = {"exit_code": exit_code}
    statuses = [s["status"] for s in sessions]
    run_change = StatusChange(
        "schedule_runs",
        fire.run_id,
        status,
        reason_code,
        summary,
        "scheduler",
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
        "scheduler",
        now,
        sets={"ended_at": now},
        evidence_refs=[{"kind": "schedule_run", "id": fire.run_id}],
        metadata={**meta, "session_statuses": statuses},
    )
    async with write_transaction(env.conn):
        run_won, _ = await apply(env.conn, [run_change, invocation_change])
        if run_won:
            await notify_run(env.conn, fire.run_id, now=now)
            await plan_retry(
                env.conn,
                run_id=fire.run_id,
                schedule=fire.schedule,
                context=fire.trigger_context,
                status=status,
                chain_depth=fire.chain_depth,
                now=now,
            )
    env.committed.discard(fire.run_id)
    if on_commit is not None:
        on_commit()
    return run_won


async def _ended(env: FireEnv, run_id: str) -> bool:
    cursor = await env.conn.execute("SELECT status FROM schedule_runs WHERE id = ?", (run_id,))
    row = await cursor.fetchone()
    await cursor.close()
    return row is not None and row[0] != "running"


async def _record_child(env: FireEnv, fire: Prepared, pid: int) -> None:
    started = process_start_time(pid)
    env.live[fire.run_id] = (pid, started)
    async with write_transaction(env.conn):
        cursor = await env.conn.execute(
            "UPDATE schedule_runs SET child_pid = ?, child_started_at = ? "
            "WHERE id = ? AND status = 'running'",
            (pid, started, fire.run_id),
        )
    if cursor.rowcount == 0 and await _ended(env, fire.run_id):
        # Cancelled (by another process) before its child was recorded: stop the child now;
        # the launcher then ends whatever it left behind.
        logger.info("run %s ended before its child %d was recorded: stopping it", fire.run_id, pid)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)


def run_deadline(schedule: Mapping[str, Any], settings: SchedulerSettings) -> float:
    """The schedule's own ``timeout_sec``, else the invocation deadline setting."""
    own = schedule.get("timeout_sec")
    return float(own) if own else settings.invocation_deadline_seconds


async def execute(
    env: FireEnv, fire: Prepared, *, on_commit: Callable[[], None] | None = None
) -> Outcome:
    """Spawn the committed fire's child, wait for it, and write the terminal status."""
    settings = env.settings
    status, reason, exit_code, detail = "failed", "run.failed.exception", None, None
    summary = ""
    try:
        try:
            exit_code, tail = await spawn_and_wait(
                fire.argv,
                fire.invocation_id,
                tmp_path=fire.tmp_path,
                cwd=fire.cwd,
                env=env.child_env(fire.invocation_id),
                deadline_seconds=run_deadline(fire.schedule, settings),
                on_spawn=lambda pid: _record_child(env, fire, pid),
                kill_descendants=True,
                log_path=run_log_path(env.db_path, settings, fire.run_id),
                log_bytes=settings.run_log_bytes,
            )
            fire.tmp_path = None
            if exit_code == 0:
                status, reason, summary = "completed", "run.completed.ok", "exit code 0"
            else:
                status, reason, detail = "failed", "run.failed.exit_nonzero", tail
                summary = f"the child exited with code {exit_code}"
        except DeadlineExceeded as exc:
            status, reason, summary = "timed_out", "run.timed_out.deadline", str(exc)
            detail = f"{exc}\n{exc.stderr_tail}".strip()
        except SpawnFailed as exc:
            status, reason, summary, detail = "failed", "run.failed.spawn_error", str(exc), str(exc)
        except CwdUnavailable as exc:
            status, reason, summary, detail = "failed", "run.failed.missing_cwd", str(exc), str(exc)
        except asyncio.CancelledError:
            await asyncio.shield(
                finish(
                    env,
                    fire,
                    status="cancelled",
                    reason_code="run.cancelled.shutdown",
                    summary="cancelled by scheduler shutdown",
                    exit_code=None,
                    error_detail=None,
                    on_commit=on_commit,
                )
            )
            raise
        except Exception as exc:
            logger.exception("fire %s of schedule %s failed", fire.run_id, fire.schedule.get("id"))
            summary = detail = f"{type(exc).__name__}: {exc}"
    finally:
        env.live.pop(fire.run_id, None)
        fire.discard()
    won = await finish(
        env,
        fire,
        status=status,
        reason_code=reason,
        summary=summary,
        exit_code=exit_code,
        error_detail=detail,
        on_commit=on_commit,
    )
    return Outcome(status=status, reason_code=reason, exit_code=exit_code, applied=won)
