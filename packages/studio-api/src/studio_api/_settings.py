"""``StudioSettings``: every environment setting of a Studio host, validated once at startup."""

from __future__ import annotations

import contextvars
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pydantic
from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ._exceptions import SettingsError
from ._setting_types import (
    ArchiveDir,
    CommandNames,
    DbPath,
    Directory,
    EnvNames,
    GithubUrl,
    Host,
    LiPath,
    NodeId,
    NodeUrl,
    ProjectPaths,
    Synchronous,
    Template,
    Token,
    WebhookSecret,
    Zone,
    env_field,
)
from ._setting_values import is_loopback_host, is_postgres_url, redact_url

if TYPE_CHECKING:
    from studio_scheduler_core import SchedulerSettings

logger = logging.getLogger("studio_api")

DEFAULT_DB = "~/.lionagi/studio/state.db"
DEFAULT_RUNS_DIR = "~/.lionagi/studio/runs"
"""Run logs on PostgreSQL without ``LIONAGI_STUDIO_RUN_LOG_DIR`` (beside the default database)."""
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765

# Secrets are never echoed back in an error message.
_SECRET_FIELDS = frozenset({"auth_token", "github_token", "webhook_secret"})
SECRET_ENV_VARS = ("GITHUB_TOKEN", "LIONAGI_STUDIO_AUTH_TOKEN", "LIONAGI_STUDIO_WEBHOOK_SECRET")
"""Removed from the environment of every child and notify transport (the API's bearer token is
for the operator's clients, the GitHub token for the poller, the webhook secret for signing),
unless ``LIONAGI_SCHEDULER_CHILD_ENV_PASS`` names them."""

DEFAULT_MAX_BODY_BYTES = 1024 * 1024

# When False, construction reads only its keyword arguments (``from_env`` with an explicit
# mapping passes the variables that way); the default reads ``os.environ`` too.
_READ_OS_ENVIRON: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "studio_api_read_os_environ", default=True
)


class StudioSettings(BaseSettings):
    """The settings of a Studio host, read from the environment.

    Build it once at startup (``StudioSettings()`` or :meth:`from_env`) and pass it down; the
    library packages never read the environment. Keyword arguments use the field names
    (``StudioSettings(port=0, db=path)``) and win over the environment. An invalid value raises
    :class:`SettingsError` naming the environment variable, except ``LIONAGI_SCHEDULER_TZ``:
    an unknown zone logs a warning and falls back to UTC.
    """

    model_config = SettingsConfigDict(
        case_sensitive=True,
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        validate_default=True,
    )

    db: DbPath = Field(default=Path(DEFAULT_DB), validation_alias="LIONAGI_STUDIO_DB")
    host: Host = Field(default=DEFAULT_HOST, validation_alias="LIONAGI_STUDIO_HOST")
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, validation_alias="LIONAGI_STUDIO_PORT")
    auth_token: Token = env_field("LIONAGI_STUDIO_AUTH_TOKEN")
    tick_seconds: float = Field(
        default=30.0,
        gt=0,
        le=86400,
        allow_inf_nan=False,
        validation_alias="LIONAGI_STUDIO_TICK_SECONDS",
    )
    max_scheduled_concurrent: int = Field(
        default=4, ge=1, le=10_000, validation_alias="LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT"
    )
    max_adhoc_concurrent: int = Field(
        default=4, ge=1, le=10_000, validation_alias="LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT"
    )
    invocation_deadline_seconds: float = Field(
        default=7200.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias="LIONAGI_STUDIO_INVOCATION_DEADLINE_SECONDS",
    )
    reaper_interval_seconds: float = Field(
        default=300.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias="LIONAGI_STUDIO_REAPER_INTERVAL_SECONDS",
    )
    checkpoint_interval_seconds: float = Field(
        default=3600.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias="LIONAGI_STUDIO_CHECKPOINT_INTERVAL_SECONDS",
    )
    timezone: Zone = Field(default="", validation_alias="LIONAGI_SCHEDULER_TZ")
    default_cwd: Directory = env_field("LIONAGI_SCHEDULER_CWD")
    project_paths: ProjectPaths = Field(
        default_factory=dict, validation_alias="LIONAGI_SCHEDULER_PROJECTS"
    )
    command_allowlist: CommandNames = Field(
        default=(), validation_alias="LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"
    )
    li_executable: LiPath = env_field("LIONAGI_LI_EXECUTABLE")
    notify_template: Template = env_field("LIONAGI_STUDIO_NOTIFY_TEMPLATE")
    github_api_url: GithubUrl = Field(
        default="https://api.github.com", validation_alias="LIONAGI_STUDIO_GITHUB_API_URL"
    )
    github_token: Token = env_field("GITHUB_TOKEN")
    webhook_secret: WebhookSecret = env_field("LIONAGI_STUDIO_WEBHOOK_SECRET")
    synchronous: Synchronous = Field(default="full", validation_alias="LIONAGI_STUDIO_SYNCHRONOUS")
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES,
        ge=1,
        le=1024**3,
        validation_alias="LIONAGI_STUDIO_MAX_BODY_BYTES",
    )
    child_env_pass: EnvNames = Field(
        default=(), validation_alias="LIONAGI_SCHEDULER_CHILD_ENV_PASS"
    )
    run_log_dir: Path | None = Field(default=None, validation_alias="LIONAGI_STUDIO_RUN_LOG_DIR")
    run_log_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        le=1024**3,
        validation_alias="LIONAGI_STUDIO_RUN_LOG_BYTES",
    )
    scheduled_on_any_node: bool | None = Field(
        default=None, validation_alias="LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE"
    )
    retention_days: float = Field(
        default=30.0,
        ge=0,
        le=36500,
        allow_inf_nan=False,
        validation_alias="LIONAGI_STUDIO_RETENTION_DAYS",
    )
    dispatch_retention_days: float = Field(
        default=7.0,
        ge=0,
        le=36500,
        allow_inf_nan=False,
        validation_alias="LIONAGI_STUDIO_DISPATCH_RETENTION_DAYS",
    )
    dead_letter_retention_days: float = Field(
        default=30.0,
        ge=0,
        le=36500,
        allow_inf_nan=False,
        validation_alias="LIONAGI_STUDIO_DEAD_LETTER_RETENTION_DAYS",
    )
    audit_retention_days: float = Field(
        default=365.0,
        ge=0,
        le=36500,
        allow_inf_nan=False,
        validation_alias="LIONAGI_STUDIO_AUDIT_RETENTION_DAYS",
    )
    archive_dir: ArchiveDir = env_field("LIONAGI_STUDIO_ARCHIVE_DIR")
    log_format: Literal["text", "json"] = Field(
        default="text", validation_alias="LIONAGI_STUDIO_LOG_FORMAT"
    )
    metrics_public: bool = Field(default=False, validation_alias="LIONAGI_STUDIO_METRICS_PUBLIC")
    node_id: NodeId = env_field("LIONAGI_STUDIO_NODE_ID")
    node_url: NodeUrl = env_field("LIONAGI_STUDIO_NODE_URL")

    #: field name -> environment variable name
    ENV_VARS: ClassVar[dict[str, str]] = {}

    def __init__(self, **values: Any) -> None:
        by_alias = {self.ENV_VARS.get(key, key): value for key, value in values.items()}
        try:
            super().__init__(**by_alias)
        except pydantic.ValidationError as exc:
            raise _settings_error(exc) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if _READ_OS_ENVIRON.get():
            return (init_settings, env_settings)
        return (init_settings,)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> StudioSettings:
        """Build the settings from ``environ`` (default ``os.environ``) plus field overrides.

        Overrides (field names, e.g. ``port=0``) win over the environment; ``None`` overrides are
        ignored so a CLI can pass its optional flags straight through.
        """
        given = {key: value for key, value in overrides.items() if value is not None}
        unknown = sorted(set(given) - set(cls.ENV_VARS))
        if unknown:
            raise TypeError(f"unknown StudioSettings field(s): {', '.join(unknown)}")
        if environ is None:
            return cls(**given)
        values: dict[str, Any] = {
            env_name: environ[env_name]
            for env_name in cls.ENV_VARS.values()
            if environ.get(env_name, "") != ""
        }
        values.update({cls.ENV_VARS[key]: value for key, value in given.items()})
        token = _READ_OS_ENVIRON.set(False)
        try:
            return cls(**values)
        finally:
            _READ_OS_ENVIRON.reset(token)

    def with_overrides(self, **overrides: Any) -> StudioSettings:
        """A validated copy with some fields replaced (``None`` values are ignored)."""
        given = {key: value for key, value in overrides.items() if value is not None}
        if not given:
            return self
        token = _READ_OS_ENVIRON.set(False)
        try:
            return type(self)(**{**self.model_dump(), **given})
        finally:
            _READ_OS_ENVIRON.reset(token)

    # -- use --------------------------------------------------------------------------------

    @property
    def backend(self) -> Literal["sqlite", "postgresql"]:
        """``postgresql`` when ``db`` is a ``postgresql://`` URL, else ``sqlite``."""
        return "sqlite" if isinstance(self.db, Path) else "postgresql"

    @property
    def db_file(self) -> Path | None:
        """The SQLite database file (``None`` on PostgreSQL: there is no file to probe)."""
        return self.db if isinstance(self.db, Path) else None

    @property
    def runs_dir(self) -> Path:
        """Where run logs go: ``run_log_dir``, else ``runs/`` beside the SQLite file, else (on
        PostgreSQL, which has no file) ``~/.lionagi/studio/runs``."""
        if self.run_log_dir is not None:
            return self.run_log_dir
        if isinstance(self.db, Path):
            return self.db.parent / "runs"
        return Path(DEFAULT_RUNS_DIR).expanduser()

    @property
    def node(self) -> str:
        """This node's name: ``node_id``, else ``hostname:pid``."""
        from studio_state import default_node_id

        return self.node_id if self.node_id is not None else default_node_id()

    @property
    def auth_enabled(self) -> bool:
        """Whether the API requires ``Authorization: Bearer``."""
        return self.auth_token is not None

    def check_bind(self) -> None:
        """Refuse (``SettingsError``) to serve on a non-loopback host without an auth token."""
        if not is_loopback_host(self.host) and not self.auth_enabled:
            raise SettingsError(
                "LIONAGI_STUDIO_HOST",
                f"refusing to serve on non-loopback address {self.host!r} without "
                "LIONAGI_STUDIO_AUTH_TOKEN: set a token or bind 127.0.0.1",
            )

    def to_scheduler_settings(self) -> SchedulerSettings:
        """The ``studio_scheduler_core.SchedulerSettings`` these settings describe."""
        from studio_scheduler_core import SchedulerSettings

        return SchedulerSettings(
            tick_seconds=self.tick_seconds,
            max_scheduled_concurrent=self.max_scheduled_concurrent,
            max_adhoc_concurrent=self.max_adhoc_concurrent,
            invocation_deadline_seconds=self.invocation_deadline_seconds,
            reaper_interval_seconds=self.reaper_interval_seconds,
            checkpoint_interval_seconds=self.checkpoint_interval_seconds,
            timezone=self.timezone,
            default_cwd=self.default_cwd,
            project_paths=dict(self.project_paths),
            command_allowlist=self.command_allowlist,
            li_executable=self.li_executable,
            notify_template=self.notify_template,
            github_api_url=self.github_api_url,
            github_token=(
                self.github_token.get_secret_value() if self.github_token is not None else None
            ),
            child_env=self.child_environment(),
            # On SQLite the engine finds runs/ beside the file itself; PostgreSQL has no file.
            run_log_dir=(
                None
                if self.run_log_dir is None and self.backend == "sqlite"
                else str(self.runs_dir)
            ),
            run_log_bytes=self.run_log_bytes,
            node_url=self.node_url,
            scheduled_on_any_node=self.scheduled_on_any_node,
            retention_days=self.retention_days,
            dispatch_retention_days=self.dispatch_retention_days,
            dead_letter_retention_days=self.dead_letter_retention_days,
            audit_retention_days=self.audit_retention_days,
            archive_dir=self.archive_dir,
            webhook_secret=(
                self.webhook_secret.get_secret_value() if self.webhook_secret is not None else None
            ),
        )

    def stripped_secrets(self) -> frozenset[str]:
        """The secret variables children and transports do not get (those not passed through)."""
        return frozenset(SECRET_ENV_VARS) - frozenset(self.child_env_pass)

    def child_environment(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment children and notify transports inherit: ``environ`` (default
        ``os.environ``) minus :data:`SECRET_ENV_VARS` not named in ``child_env_pass``."""
        drop = self.stripped_secrets()
        source = os.environ if environ is None else environ
        return {key: value for key, value in source.items() if key not in drop}


StudioSettings.ENV_VARS = {
    name: str(field.validation_alias) for name, field in StudioSettings.model_fields.items()
}


def _settings_error(exc: pydantic.ValidationError) -> SettingsError:
    env_by_alias = set(StudioSettings.ENV_VARS.values())
    field_by_env = {env: name for name, env in StudioSettings.ENV_VARS.items()}
    problems: dict[str, str] = {}
    for error in exc.errors(include_url=False):
        loc = str(error["loc"][0]) if error["loc"] else ""
        variable = loc if loc in env_by_alias else StudioSettings.ENV_VARS.get(loc, loc)
        message = str(error["msg"]).removeprefix("Value error, ")
        field = field_by_env.get(variable, "")
        raw = error.get("input")
        if (
            field not in _SECRET_FIELDS
            and isinstance(raw, str | int | float)
            and not (isinstance(raw, float) and math.isnan(raw))
        ):
            shown = repr(redact_url(raw) if isinstance(raw, str) and is_postgres_url(raw) else raw)
            message = f"{message} (got {shown[:80]})"
        problems.setdefault(variable or "settings", message)
    first = next(iter(problems))
    return SettingsError(first, problems[first], problems=problems)
