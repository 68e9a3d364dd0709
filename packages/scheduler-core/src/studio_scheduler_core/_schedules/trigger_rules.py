"""Validation of a schedule's trigger: cron, interval, or a GitHub poll with its filter; and of
the optional threshold gate."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypedDict

from .._records.column import maximum
from .._records.schedule import Schedule
from .._triggers.cron import CronError, check_expression, next_after
from .._triggers.once import parse_at
from .checks import err, finite, positive_int

TRIGGER_FIELDS: Mapping[str, tuple[str, ...]] = {
    "cron": ("cron_expr",),
    "interval": ("interval_sec",),
    "github_poll": ("github_repo", "github_filter", "poll_interval_sec"),
    "at": ("at",),
}
"""The fields each trigger type owns (refused under any other trigger type)."""
GITHUB_FILTER_KEYS = ("state", "base", "draft", "same_repo_only", "event")
GITHUB_EVENTS = ("pr_opened", "pr_updated", "pr_merged", "pr_closed")
THRESHOLD_KEYS = ("metric", "op", "value", "window_minutes")
THRESHOLD_METRICS = (
    "failed_runs",
    "failed_sessions",
    "total_cost_usd",
    "p95_latency_ms",
    "dead_letters",
    "pending_dispatch",
    "github_poll_healthy_age_minutes",
    "github_poll_consecutive_401",
)
THRESHOLD_OPS = ("gt", "gte", "lt", "lte")
MAX_WINDOW_MINUTES = 366 * 1440
DEFAULT_POLL_INTERVAL_SEC = 300


class GithubFilter(TypedDict, total=False):
    """A validated ``github_filter``: the keys the input set, each checked."""

    state: str
    base: str
    draft: bool
    same_repo_only: bool
    event: str


class ThresholdConfig(TypedDict):
    """A validated ``threshold_config``: fire when ``metric`` ``op`` ``value`` over the window."""

    metric: str
    op: str
    value: float
    window_minutes: int


class TriggerFields(TypedDict, total=False):
    """The trigger fields :func:`check_trigger` normalised (the trigger type's own, and the
    threshold gate)."""

    cron_expr: str
    interval_sec: int
    at: str
    github_filter: GithubFilter | None
    poll_interval_sec: int
    threshold_config: ThresholdConfig | None


_REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_BRANCH = re.compile(r"[A-Za-z0-9._/@+-]{1,255}")


def check_github_filter(value: Mapping[str, Any] | None) -> GithubFilter | None:
    """Validate github_filter keys and values."""
    if value is None:
        return None
    for key in value:
        if key not in GITHUB_FILTER_KEYS:
            raise err(
                f"github_filter.{key}",
                f"unknown key (allowed: {', '.join(GITHUB_FILTER_KEYS)})",
            )
    out = GithubFilter()
    if "state" in value:
        if value["state"] not in ("open", "closed", "all"):
            raise err("github_filter.state", "must be 'open', 'closed' or 'all'")
        out["state"] = value["state"]
    if "base" in value:
        if not isinstance(value["base"], str) or not _BRANCH.fullmatch(value["base"]):
            raise err("github_filter.base", "must be a branch name")
        out["base"] = value["base"]
    if "draft" in value:
        out["draft"] = _flag("draft", value["draft"])
    if "same_repo_only" in value:
        out["same_repo_only"] = _flag("same_repo_only", value["same_repo_only"])
    if "event" in value:
        if value["event"] not in GITHUB_EVENTS:
            raise err("github_filter.event", f"must be one of {', '.join(GITHUB_EVENTS)}")
        out["event"] = value["event"]
    if out.get("event") in ("pr_merged", "pr_closed") and out.get("state") == "open":
        raise err("github_filter.state", f"'open' never matches event {value['event']!r}")
    return out


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise err(f"github_filter.{key}", "must be a boolean")
    return value


def check_threshold(value: Mapping[str, Any] | None) -> ThresholdConfig | None:
    """Validate threshold_config: exactly metric, op, value, window_minutes."""
    if value is None:
        return None
    for key in value:
        if key not in THRESHOLD_KEYS:
            raise err(f"threshold_config.{key}", "unknown key")
    for key in THRESHOLD_KEYS:
        if key not in value:
            raise err(f"threshold_config.{key}", "is required")
    if value["metric"] not in THRESHOLD_METRICS:
        raise err("threshold_config.metric", f"must be one of {', '.join(THRESHOLD_METRICS)}")
    if value["op"] not in THRESHOLD_OPS:
        raise err("threshold_config.op", f"must be one of {', '.join(THRESHOLD_OPS)}")
    if finite(value["value"]) is None:
        raise err("threshold_config.value", "must be a finite number")
    return ThresholdConfig(
        metric=value["metric"],
        op=value["op"],
        value=value["value"],
        window_minutes=positive_int(
            "threshold_config.window_minutes", value["window_minutes"], MAX_WINDOW_MINUTES
        ),
    )


def _check_github(row: Mapping[str, Any]) -> TriggerFields:
    repo = row.get("github_repo")
    if not repo:
        raise err("github_repo", "is required for trigger_type 'github_poll'")
    name = repo.split("/", 1)[-1]
    if not _REPO.fullmatch(repo) or name in (".", ".."):
        raise err("github_repo", f"must be 'owner/name', got {repo!r}")
    github_filter = check_github_filter(row.get("github_filter"))
    poll = row.get("poll_interval_sec")
    poll_interval_sec = positive_int(
        "poll_interval_sec",
        DEFAULT_POLL_INTERVAL_SEC if poll is None else poll,
        maximum(Schedule, "poll_interval_sec"),
    )
    if row.get("threshold_config") is not None:
        raise err("threshold_config", "applies only to cron and interval schedules")
    return TriggerFields(github_filter=github_filter, poll_interval_sec=poll_interval_sec)


def _check_at(row: Mapping[str, Any], *, now: float, fresh: bool) -> str:
    value = row.get("at")
    if value is None:
        raise err("at", "is required for trigger_type 'at'")
    if not isinstance(value, str):
        raise err("at", f"must be an RFC 3339 string, got {type(value).__name__}")
    try:
        instant = parse_at(value)
    except ValueError as exc:
        raise err("at", str(exc)) from None
    if fresh and instant <= now and row.get("missed_fire_policy") != "run_once":
        raise err(
            "at",
            f"{value!r} is in the past (set missed_fire_policy 'run_once' to fire it at once)",
        )
    if row.get("threshold_config") is not None:
        raise err("threshold_config", "applies only to cron and interval schedules")
    return value.strip()


def check_trigger(
    row: Mapping[str, Any], *, timezone: str, now: float, fresh_at: bool = True
) -> TriggerFields:
    """Validate the trigger fields of input ``row`` and the threshold gate; return the fields
    normalised (the caller writes them over the row).

    ``fresh_at``: the ``at`` instant is new (create, or changed by an update), so an instant
    in the past is refused unless ``missed_fire_policy`` is ``run_once``.
    """
    trigger = row["trigger_type"]
    for other, fields in TRIGGER_FIELDS.items():
        if other == trigger:
            continue
        for field in fields:
            if row.get(field) is not None:
                raise err(field, f"does not apply to trigger_type {trigger!r}")
    if trigger == "cron":
        expr = row.get("cron_expr")
        if not expr:
            raise err("cron_expr", "is required for trigger_type 'cron'")
        try:
            check_expression(expr)
            next_after(expr, timezone, now)
        except CronError as exc:
            raise err("cron_expr", str(exc)) from None
        out = TriggerFields(cron_expr=expr.strip())
    elif trigger == "interval":
        if row.get("interval_sec") is None:
            raise err("interval_sec", "is required for trigger_type 'interval'")
        out = TriggerFields(
            interval_sec=positive_int(
                "interval_sec", row["interval_sec"], maximum(Schedule, "interval_sec")
            )
        )
    elif trigger == "at":
        out = TriggerFields(at=_check_at(row, now=now, fresh=fresh_at))
    else:
        out = _check_github(row)
    out["threshold_config"] = check_threshold(row.get("threshold_config"))
    return out
