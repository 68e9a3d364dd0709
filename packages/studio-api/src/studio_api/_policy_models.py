"""The schedule-policy fields of the API's models (mixed into the schedule and run models).

Shape only: the schedule service judges the values (``retry.max_attempts`` 1..10, a jitter
below the interval …) with the same messages the CLI shows.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

OverlapPolicy = Literal["skip", "allow", "buffer_one", "buffer_all", "cancel_other"]


class PolicyFields(BaseModel):
    """``catchup_window_sec``, ``jitter_sec``, ``pause_on_failure``, ``retry`` (null: off)."""

    model_config = ConfigDict(extra="forbid")

    catchup_window_sec: int | None = None
    """A missed occurrence older than this many seconds is skipped, even under run_once."""
    jitter_sec: int | None = None
    """Each occurrence waits a deterministic delay in [0, jitter_sec) before it starts."""
    pause_on_failure: bool | None = None
    """Disable the schedule when a run fails after its last attempt."""
    retry: dict[str, Any] | None = None
    """``{"max_attempts", "backoff_sec", "backoff_factor", "max_backoff_sec"}``."""


class RunPolicyFields(BaseModel):
    """A run's retry lineage: the run it re-runs and its attempt number (1 = the first)."""

    model_config = ConfigDict(extra="forbid")

    retry_of: str | None = None
    attempt: int | None = None


class BackfillRequest(BaseModel):
    """Body of ``POST /api/schedules/{id}/backfill``: ISO 8601 or epoch seconds, [start, end)."""

    model_config = ConfigDict(extra="forbid")

    start: str | float
    end: str | float


class BackfillOut(BaseModel):
    """Answer of a backfill: how many runs it started."""

    model_config = ConfigDict(extra="forbid")

    runs: int
