"""The engine's settings object (studio-api builds it from the environment)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from studio_outbox import InvalidWebhookSecret, parse_webhook_secret

from ._exceptions import InvalidSettings


@dataclass(frozen=True, kw_only=True)
class SchedulerSettings:
    """Everything the scheduler core needs to know about its host; never read from env here.

    ``timezone`` is taken as given (studio-api validates it and falls back to UTC).
    ``child_env`` is the base environment of every child (``None``: the parent's).
    """

    tick_seconds: float = 30.0
    max_scheduled_concurrent: int = 4
    max_adhoc_concurrent: int = 4
    invocation_deadline_seconds: float = 7200.0
    reaper_interval_seconds: float = 300.0
    checkpoint_interval_seconds: float = 3600.0
    timezone: str = "UTC"
    default_cwd: str | None = None
    command_allowlist: tuple[str, ...] = ()
    li_executable: str | None = None
    notify_template: tuple[str, ...] | None = None
    github_api_url: str = "https://api.github.com"
    github_token: str | None = None
    project_paths: Mapping[str, str] = field(default_factory=dict)
    child_env: Mapping[str, str] | None = None
    run_log_dir: str | None = None
    """Where run logs go (``<run_id>.log``); ``None``: ``runs/`` beside the database."""
    node_url: str | None = None
    """The base URL this node's API answers on (``http://host:port``), recorded for other nodes
    on the same database: a node asked for a run's log that another node ran fetches it there."""
    run_log_bytes: int = 1024 * 1024
    """The bound of one run log (at least 1024 bytes)."""
    retention_days: float = 30.0
    """Terminal runs older than this many days are deleted (0: keep forever); also the window
    of dispatches whose own window is ``None``."""
    dispatch_retention_days: float | None = None
    """The window of ``delivered``/``acked`` dispatches (``None``: ``retention_days``)."""
    dead_letter_retention_days: float | None = None
    """The window of ``dead_letter``/``expired`` dispatches (``None``: ``retention_days``)."""
    audit_retention_days: float = 365.0
    """The window of audit rows (operator actors) whose entity is gone (0: keep forever)."""
    archive_dir: str | None = None
    """Where retention archives what it deletes before deleting it (``None``: no archive)."""
    scheduled_on_any_node: bool | None = None
    """Scheduled fires are committed ``queued`` by the leader and run by whichever node's
    worker claims them (leased, like ad-hoc runs); ``False``: the leader runs them itself;
    ``None``: on for a PostgreSQL database (several nodes may share it), off for SQLite."""
    webhook_secret: str | None = field(default=None, repr=False)
    """``whsec_<base64>`` key that signs webhook deliveries (``None``: sent unsigned)."""

    def __post_init__(self) -> None:
        for name in (
            "tick_seconds",
            "invocation_deadline_seconds",
            "reaper_interval_seconds",
            "checkpoint_interval_seconds",
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise InvalidSettings(name, f"must be a positive number, got {value!r}")
        for name in (
            "retention_days",
            "dispatch_retention_days",
            "dead_letter_retention_days",
            "audit_retention_days",
        ):
            days = getattr(self, name)
            if days is None and name in ("dispatch_retention_days", "dead_letter_retention_days"):
                continue
            if (
                isinstance(days, bool)
                or not isinstance(days, int | float)
                or not math.isfinite(days)
                or not 0 <= days <= 36500
            ):
                raise InvalidSettings(name, f"must be between 0 and 36500, got {days!r}")
        if self.archive_dir is not None and not (
            isinstance(self.archive_dir, str) and self.archive_dir.strip()
        ):
            raise InvalidSettings(
                "archive_dir", f"must be a directory path, got {self.archive_dir!r}"
            )
        for name in ("max_scheduled_concurrent", "max_adhoc_concurrent"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidSettings(name, f"must be an integer >= 1, got {value!r}")
        if not (self.scheduled_on_any_node is None or isinstance(self.scheduled_on_any_node, bool)):
            raise InvalidSettings(
                "scheduled_on_any_node",
                f"must be true, false or None, got {self.scheduled_on_any_node!r}",
            )
        value = self.run_log_bytes
        if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
            raise InvalidSettings("run_log_bytes", f"must be an integer >= 1024, got {value!r}")
        # Accept any sequence (a list from JSON) but store tuples: the object stays hashable.
        object.__setattr__(self, "command_allowlist", tuple(self.command_allowlist))
        if self.notify_template is not None:
            object.__setattr__(self, "notify_template", tuple(self.notify_template))
        if self.webhook_secret is not None:
            try:
                parse_webhook_secret(self.webhook_secret, field="webhook_secret")
            except InvalidWebhookSecret as exc:
                raise InvalidSettings("webhook_secret", str(exc).partition(": ")[2]) from None
