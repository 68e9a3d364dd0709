"""The ``Run`` record: one field per ``schedule_runs`` column, in column order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .column import column, from_row, to_row


@dataclass(frozen=True, kw_only=True)
class Run:
    """A ``schedule_runs`` row: a schedule's fire, a follow-up, or an ad-hoc run.

    ``create`` marks what an ad-hoc run takes besides the :class:`Action` fields.
    """

    id: str = field(metadata=column())
    schedule_id: str | None = field(default=None, metadata=column())
    invocation_id: str | None = field(default=None, metadata=column())
    trigger_context: Any = field(default=None, metadata=column(json=True))
    action_kind: str = field(metadata=column())
    action_args: Any = field(default=None, metadata=column(json=True))
    status: str = field(metadata=column())
    exit_code: int | None = field(default=None, metadata=column())
    chain_parent_id: str | None = field(default=None, metadata=column())
    chain_depth: int = field(default=0, metadata=column())
    fired_at: float | None = field(default=None, metadata=column())
    ended_at: float | None = field(default=None, metadata=column())
    error_detail: str | None = field(default=None, metadata=column())
    created_at: float | None = field(default=None, metadata=column())
    updated_at: float | None = field(default=None, metadata=column())
    status_reason_code: str | None = field(default=None, metadata=column())
    status_reason_summary: str | None = field(default=None, metadata=column())
    status_evidence_refs: Any = field(default=None, metadata=column(json=True))
    queued_at: float | None = field(default=None, metadata=column())
    leased_by: str | None = field(default=None, metadata=column())
    lease_expires_at: float | None = field(default=None, metadata=column())
    concurrency_key: str | None = field(default=None, metadata=column(create=True))
    lease_attempts: int = field(default=0, metadata=column())
    required_capabilities: Any = field(default=None, metadata=column(json=True))
    execution_target: str | None = field(default=None, metadata=column())
    library_ref: str | None = field(default=None, metadata=column())
    library_content_hash: str | None = field(default=None, metadata=column())
    child_pid: int | None = field(default=None, metadata=column())
    child_started_at: float | None = field(default=None, metadata=column())
    notify: Mapping[str, Any] | None = field(
        default=None, metadata=column(create=True, json=True, own_check=True)
    )
    retry_of: str | None = field(default=None, metadata=column())
    """The run this one re-runs (a retry), or ``None``."""
    attempt: int | None = field(default=None, metadata=column())
    """The attempt number of a run under a retry policy (1 = the first)."""
    node_id: str | None = field(default=None, metadata=column())
    """The node that started the run's child (its log is there); ``None`` before that."""
    error_class: str | None = field(default=None, metadata=column())
    """What kind of failure a ``failed``/``timed_out`` run had (one of ``ERROR_CLASSES``)."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Run:
        """The record of a decoded ``schedule_runs`` row."""
        return from_row(cls, row)

    def to_row(self) -> dict[str, Any]:
        """The record as the public dict the service returns."""
        return to_row(self)


@dataclass(frozen=True, kw_only=True)
class RunWithChain(Run):
    """A :class:`Run` with ``chain_children``: every follow-up below it, by depth."""

    chain_children: tuple[Run, ...] = field(default=(), metadata=column(public=False))
