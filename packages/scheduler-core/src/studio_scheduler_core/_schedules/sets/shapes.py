"""The shapes of a ``ScheduleSet`` document's trigger blocks: what the reader accepts
(:mod:`.blocks` takes each block's keys from here) and what an export writes."""

from __future__ import annotations

from typing import TypedDict

from ..trigger_rules import ThresholdConfig


class CronBlock(TypedDict):
    """``cron: {expression, timezone}``."""

    expression: str | None
    timezone: str


class GithubBlock(TypedDict, total=False):
    """``github: {repo, filter?, poll_interval_sec?}``."""

    repo: str | None
    filter: dict[str, object]
    poll_interval_sec: int


class ThresholdBlock(ThresholdConfig, total=False):
    """``threshold:``: the stored ``threshold_config`` (``metric``, ``op``, ``value``,
    ``window_minutes``) and how often it is checked (``every`` or ``cron``)."""

    every: int | None
    cron: CronBlock


class TriggerBlock(TypedDict, total=False):
    """A member's ``trigger:`` block: exactly one key."""

    cron: CronBlock
    every: int | None
    at: str | None
    github: GithubBlock
    threshold: ThresholdBlock


def keys(shape: type) -> tuple[str, ...]:
    """The keys of a block shape, in the order they are written (and listed in errors)."""
    return tuple(shape.__annotations__)
