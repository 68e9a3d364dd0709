"""The field types of ``StudioSettings``: each setting's type with its own check attached.

"Before" checks parse what the environment gives (a string); "after" checks see the typed value.
The checks themselves live in ``_setting_values``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr
from pydantic_settings import NoDecode

from ._setting_values import (
    archive_dir,
    command_names,
    db_path,
    directory,
    env_names,
    github_url,
    host_name,
    li_path,
    node_id,
    node_url,
    notify_template,
    printable_token,
    project_paths,
    synchronous_level,
    webhook_secret,
    zone_name,
)

DbPath = Annotated[Path | str, BeforeValidator(db_path)]
NodeId = Annotated[str | None, AfterValidator(node_id)]
NodeUrl = Annotated[str | None, AfterValidator(node_url)]
Host = Annotated[str, AfterValidator(host_name)]
Token = Annotated[SecretStr | None, AfterValidator(printable_token)]
WebhookSecret = Annotated[SecretStr | None, AfterValidator(webhook_secret)]
Zone = Annotated[str, AfterValidator(zone_name)]
Directory = Annotated[str | None, AfterValidator(directory)]
ProjectPaths = Annotated[dict[str, str], NoDecode, BeforeValidator(project_paths)]
CommandNames = Annotated[tuple[str, ...], NoDecode, BeforeValidator(command_names)]
LiPath = Annotated[str | None, AfterValidator(li_path)]
Template = Annotated[tuple[str, ...] | None, NoDecode, BeforeValidator(notify_template)]
GithubUrl = Annotated[str, AfterValidator(github_url)]
Synchronous = Annotated[str, BeforeValidator(synchronous_level)]
EnvNames = Annotated[tuple[str, ...], NoDecode, BeforeValidator(env_names)]
ArchiveDir = Annotated[str | None, AfterValidator(archive_dir)]


def env_field(name: str) -> Any:
    """A setting read from the variable ``name`` with no default (``None`` when unset)."""
    return Field(default=None, validation_alias=name)
