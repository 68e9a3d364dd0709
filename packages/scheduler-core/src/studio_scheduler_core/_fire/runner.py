"""Tracked fire tasks: run a committed fire, its follow-up chain, and the terminal bookkeeping.

A top-level fire holds its reservation (overlap registration, global slot) until its whole
chain has finished; its max_runs claim is dropped the moment its terminal row commits.
Follow-ups are awaited inline, take no slot or max_runs claim and never touch the schedule
row's cadence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from .._admission.gates import MAX_RUNS, Reservation
from .._admission.store import fired_run_count
from .._schedules.followups import apply_overlay, child_context, select_follow_up
from .._schedules.store import get_run, get_schedule, set_enabled
from ..abc import RunTerminalHook
from .chain_budget import follow_up_refused
from .env import FireEnv, Outcome, Prepared
from .execute import execute
from .finish import finish
from .occurrence import ScheduleClaim
from .pipeline import fire
from .retry import RETRYABLE, pause_after_last_attempt, retry_planned

logger = logging.getLogger("studio_scheduler_core")


class FireRunner:
    """Starts and tracks fire tasks; cancels them (and sweeps their runs) on shutdown."""

    def __init__(
        self,
        env: FireEnv,
        *,
        on_terminal: RunTerminalHook | None = None,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self._env = env
        self._on_terminal = on_terminal
        self._wake = wake
        self._tasks: set[asyncio.Task[None]] = set()
        self._executing: dict[str, asyncio.Task[None]] = {}
        """run id → the chain task whose child runs it now (for an operator's cancel)."""

    def tasks(self) -> list[asyncio.Task[None]]:
        """The fire tasks still tracked."""
        return list(self._tasks)

    def start(self, fire: Prepared, reservation: Reservation | None) -> None:
        """Run a committed fire (and its chain) as a tracked background task; a fire
        committed ``queued`` only parks its reservation (a worker runs it)."""
        if fire.queued:
            if reservation is not None:
                reservation.park(fire.run_id)
            if self._wake is not None:
                self._wake()  # this node's worker may claim it at once
            return
        task = asyncio.create_task(self._run(fire, reservation), name=f"fire-{fire.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_all(self) -> None:
        """Cancel every tracked fire, await them, then cancel runs that never got that far."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        # What is still committed and not terminal never started its child (a fire task
        # cancelled first, or a commit that landed as its caller was cancelled).
        for prepared in list(self._env.committed.values()):
            prepared.discard()
            with contextlib.suppress(Exception):
                await finish(
                    self._env,
                    prepared,
                    status="cancelled",
                    reason_code="run.cancelled.shutdown",
                    summary="cancelled by scheduler shutdown before its child started",
                    exit_code=None,
                    error_detail=None,
                )

    async def revoke(self, run_id: str) -> bool:
        """Stop the child of a run this runner executes (its row is already terminal).

        Cancels the run's chain task (the launcher sends SIGTERM to the group, waits 5 s, then
        SIGKILL, descendants too) and awaits it; returns whether this runner executed the run.
        """
        task = self._executing.get(run_id)
        if task is None:
            return False
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True

    async def run_claimed(self, fire: Prepared) -> None:
        """Run a fire a worker claimed from the queue (and its chain) in the caller's task;
        its reservation, if any, is the leader's."""
        await self._chain(fire, None)

    async def _run(self, fire: Prepared, reservation: Reservation | None) -> None:
        try:
            await self._chain(fire, reservation)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("fire %s failed unexpectedly", fire.run_id)
        finally:
            if reservation is not None:
                reservation.release()
            if self._wake is not None:
                self._wake()

    async def _chain(self, fire: Prepared, reservation: Reservation | None) -> None:
        current = fire
        while True:
            release = reservation.release_max_runs if current is fire and reservation else None
            if current.setup_error is not None:
                if release is not None:
                    release()
                outcome = Outcome("failed", current.setup_error[0], None, True)
            else:
                task = asyncio.current_task()
                if task is not None:
                    self._executing[current.run_id] = task
                try:
                    outcome = await execute(self._env, current, on_commit=release)
                finally:
                    self._executing.pop(current.run_id, None)
            if outcome.applied:
                await self._terminal(current, outcome.status)
            overlay = select_follow_up(current.schedule, outcome.status, current.chain_depth)
            if overlay is not None and await retry_planned(self._env.conn, current.run_id):
                overlay = None  # on_fail follows the last attempt only
            if not outcome.applied or overlay is None:
                return
            context = child_context(
                current.trigger_context,
                parent_run_id=current.run_id,
                exit_code=outcome.exit_code,
                status=outcome.status,
            )
            if await follow_up_refused(self._env, current, overlay, context):
                return
            child = await fire_follow_up(self._env, current, overlay, outcome)
            if child is None or child.queued:
                return  # gone, or queued for any node's worker
            current = child

    async def _terminal(self, fire: Prepared, status: str) -> None:
        """Post-terminal bookkeeping: the max_runs disable, the pause after a last failed
        attempt and the notification hook (``status``: what this fire's terminal write set)."""
        sid = child_sid(fire)
        try:
            if fire.chain_depth == 0 and fire.schedule.max_runs is not None:
                schedule = await get_schedule(self._env.conn, sid)
                max_runs = None if schedule is None else schedule.max_runs
                if schedule is not None and schedule.enabled and max_runs is not None:
                    fired = await fired_run_count(self._env.conn, sid)
                    if fired >= int(max_runs):
                        await set_enabled(
                            self._env.conn,
                            sid,
                            enabled=False,
                            reason_code=MAX_RUNS,
                            reason_summary=f"max_runs reached ({fired} of {max_runs})",
                            now=self._env.clock(),
                            metadata={"max_runs": max_runs, "fired": fired},
                        )
            if fire.chain_depth == 0 and status in RETRYABLE:
                await pause_after_last_attempt(
                    self._env.conn, fire.run_id, sid, now=self._env.clock()
                )
            if self._on_terminal is not None:
                row = await get_run(self._env.conn, fire.run_id)
                if row is not None:
                    await self._on_terminal(self._env.conn, fire.schedule, row)
        except Exception:
            logger.exception("terminal bookkeeping of run %s failed", fire.run_id)


def child_sid(fire: Prepared) -> str:
    """The schedule id a fire belongs to."""
    return fire.schedule.id


async def fire_follow_up(
    env: FireEnv, parent: Prepared, overlay: Mapping[str, Any], outcome: Outcome
) -> Prepared | None:
    """Commit the follow-up of ``parent`` (overlay applied, chain context, depth + 1); ``None``
    when its schedule is gone."""
    context = child_context(
        parent.trigger_context,
        parent_run_id=parent.run_id,
        exit_code=outcome.exit_code,
        status=outcome.status,
    )
    return await fire(
        env,
        apply_overlay(parent.schedule, overlay),
        context,
        kind="follow_up",
        claim=lambda: ScheduleClaim("follow_up", child_sid(parent)),
        reservation=None,
        chain_depth=parent.chain_depth + 1,
        chain_parent_id=parent.run_id,
    )
