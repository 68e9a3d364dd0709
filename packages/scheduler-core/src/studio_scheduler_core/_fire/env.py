"""What a fire carries: the shared :class:`FireEnv`, a :class:`Prepared` fire and its
:class:`Outcome`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiosqlite

from studio_state import Clock

from .._records.schedule import Action, Schedule
from .._settings import SchedulerSettings
from .dbfile import StorageHealth
from .grouped import WriteGroup
from .target import child_db_value


@dataclass
class FireEnv:
    """What every fire needs: the writer connection, settings, clock and the database path."""

    conn: aiosqlite.Connection
    settings: SchedulerSettings
    clock: Clock
    db_path: str
    live: dict[str, tuple[int, float | None]] = field(default_factory=dict)
    """run id → (child pid, start time) of children this process is running."""
    committed: dict[str, Prepared] = field(default_factory=dict)
    """Runs committed ``running`` by this process and not yet terminal (swept at shutdown)."""
    storage: StorageHealth = field(default_factory=StorageHealth)
    """Where a terminal write reports a storage fault (shared with the engine's health)."""
    terminal_writes: WriteGroup | None = None
    """The terminal writes of fires that end in the same loop turn, committed together."""
    child_records: WriteGroup | None = None
    """The child records (:func:`~studio_scheduler_core._fire.store.record_child_sync`) of
    fires that spawn in the same loop turn, committed together at ``synchronous=NORMAL``."""
    closing: bool = False
    """Set at shutdown: a failing terminal write is then given up (start-up reconciles it)."""
    node_id: str | None = None
    """The node running these fires, written on each run with its child (its log is here)."""
    queue_fires: bool = False
    """Fires commit ``queued`` for any node's worker to claim (``scheduled_on_any_node``)."""

    def grouped(self) -> WriteGroup:
        """The group the terminal writes on :attr:`conn` share (made on first use)."""
        if self.terminal_writes is None:
            self.terminal_writes = WriteGroup(self.conn)
        return self.terminal_writes

    def child_writes(self) -> WriteGroup:
        """The group the child records on :attr:`conn` share (made on first use)."""
        if self.child_records is None:
            self.child_records = WriteGroup(self.conn, synchronous="normal")
        return self.child_records

    def child_env(self, invocation_id: str) -> dict[str, str]:
        """The child's environment: base env + LIONAGI_INVOCATION_ID + LIONAGI_STUDIO_DB."""
        base = self.settings.child_env
        env = dict(os.environ if base is None else base)
        env["LIONAGI_INVOCATION_ID"] = invocation_id
        env["LIONAGI_STUDIO_DB"] = child_db_value(self.db_path)
        return env


@dataclass
class Prepared:
    """A fire ready to commit: ids, the action, argv (or the setup refusal)."""

    run_id: str
    invocation_id: str
    action: Action
    """What runs: the schedule (a :class:`Schedule` is an :class:`Action`; a follow-up's has
    its overlay applied), or an ad-hoc run's own :class:`Action`."""
    trigger_context: dict[str, Any]
    """The run's trigger context: JSON, stored as it is."""
    kind: str
    chain_depth: int = 0
    chain_parent_id: str | None = None
    argv: list[str] = field(default_factory=list)
    tmp_path: str | None = None
    cwd: str | None = None
    prompt: str | None = None
    setup_error: tuple[str, str] | None = None
    run_guards: Mapping[str, str | int | None] = field(default_factory=dict)
    """Further ``column = value`` guards of the terminal run write (an ad-hoc run's lease:
    ``leased_by``, ``lease_attempts``)."""
    queued: bool = False
    """Committed ``queued`` for a worker to claim: this process does not run it."""
    timeout_sec: int | None = None
    """The run's own deadline (the schedule's ``timeout_sec``, or an ad-hoc run's)."""

    @property
    def schedule(self) -> Schedule:
        """The schedule this fire belongs to (its follow-up overlay applied);
        ``TypeError`` for an ad-hoc run, which has none."""
        if isinstance(self.action, Schedule):
            return self.action
        raise TypeError(f"run {self.run_id} is an ad-hoc run: it has no schedule")

    @property
    def schedule_id(self) -> str | None:
        """The schedule's id (``None`` for an ad-hoc run)."""
        return self.action.id if isinstance(self.action, Schedule) else None

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
