"""Executing a committed fire: spawn its child through the launcher, record the child, wait,
and write the outcome through :func:`~studio_scheduler_core._fire.finish.finish`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sqlite3
from collections.abc import Callable

from studio_launcher import (
    CwdUnavailable,
    DeadlineExceeded,
    SpawnFailed,
    process_start_time,
    spawn_and_wait,
)

from .._settings import SchedulerSettings
from . import store
from .ending import report_end
from .env import FireEnv, Outcome, Prepared
from .finish import finish
from .logcopy import copy_run_log
from .runlog import run_log_path

logger = logging.getLogger("studio_scheduler_core")


async def _record_child(env: FireEnv, fire: Prepared, pid: int) -> None:
    started = process_start_time(pid)
    env.live[fire.run_id] = (pid, started)

    def write(db: sqlite3.Connection) -> bool:
        return store.record_child_sync(db, fire.run_id, pid, started, env.node_id)

    # With the records of the other children spawned in this loop turn: one trip, one commit.
    if await env.child_writes().run(write):
        # Cancelled (by another process) before its child was recorded: stop the child now;
        # the launcher then ends whatever it left behind.
        logger.info("run %s ended before its child %d was recorded: stopping it", fire.run_id, pid)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)


def run_deadline(fire: Prepared, settings: SchedulerSettings) -> float:
    """The run's own ``timeout_sec``, else the invocation deadline setting."""
    own = fire.timeout_sec
    return float(own) if own else settings.invocation_deadline_seconds


async def execute(
    env: FireEnv, fire: Prepared, *, on_commit: Callable[[], None] | None = None
) -> Outcome:
    """Spawn the committed fire's child, wait for it, and write the terminal status.

    Emits the run's ``outcome`` event: its own write's, or an operator's cancel that ended the
    run first (:func:`~studio_scheduler_core._fire.ending.report_end`).
    """
    settings = env.settings
    started = env.clock()
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
                deadline_seconds=run_deadline(fire, settings),
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
            won = await asyncio.shield(
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
            shutdown = Outcome("cancelled", "run.cancelled.shutdown", None, won)
            await report_end(env, fire, shutdown, started)
            raise
        except Exception as exc:
            logger.exception("fire %s of schedule %s failed", fire.run_id, fire.schedule_id)
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
    outcome = Outcome(status=status, reason_code=reason, exit_code=exit_code, applied=won)
    await report_end(env, fire, outcome, started)
    # After the terminal write, never in its way: every node serves the stored copy.
    await copy_run_log(
        env.conn, db_path=env.db_path, settings=settings, run_id=fire.run_id, now=env.clock()
    )
    return outcome
