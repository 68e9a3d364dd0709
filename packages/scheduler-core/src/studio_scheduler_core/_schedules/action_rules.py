"""Validation of a schedule's action, its working directory and its follow-up overlays."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import yaml

from studio_launcher import InvalidAction, validate_action

from .._records.vocab import ACTION_KIND_ALIASES, ACTION_KINDS
from .._settings import SchedulerSettings
from .checks import err, str_list
from .followups import (
    CONTINUATION_KEYS,
    MAX_CHAIN_DEPTH,
    OVERLAY_KEYS,
    overlay_input,
    unusable_keys,
)
from .policy_fields import check_retry


def check_action(row: Mapping[str, Any], *, settings: SchedulerSettings, prefix: str = "") -> None:
    """Launcher validation plus the flow_yaml mapping check; ``prefix`` qualifies field names."""
    try:
        validate_action(row, command_allowlist=settings.command_allowlist)
    except InvalidAction as exc:
        raise err(f"{prefix}{exc.field}", exc.reason) from None
    if row.get("action_kind") == "flow_yaml":
        try:
            parsed = yaml.safe_load(str(row.get("action_flow_yaml")))
        except yaml.YAMLError as exc:
            raise err(f"{prefix}action_flow_yaml", f"is not valid YAML: {exc}") from None
        if not isinstance(parsed, Mapping) or not all(isinstance(k, str) for k in parsed):
            raise err(f"{prefix}action_flow_yaml", "must be a YAML mapping with string keys")


def check_cwd(cwd: Any, project: Any, settings: SchedulerSettings) -> str | None:
    """``action_cwd`` must be an existing absolute directory; without one, a registered
    project's directory fills it (snapshotted once, at creation)."""
    if cwd is not None:
        if not os.path.isabs(cwd):
            raise err("action_cwd", f"must be an absolute path, got {cwd!r}")
        if not os.path.isdir(cwd):
            raise err("action_cwd", f"{cwd!r} is not an existing directory")
        return str(cwd)
    registered = settings.project_paths.get(project) if project else None
    if registered and os.path.isabs(registered) and os.path.isdir(registered):
        return registered
    return None


def _check_overlay_values(out: dict[str, object], field: str) -> None:
    """Check an overlay's keys and values in place (``out``: a copy of the JSON object given;
    its values are whatever the input held until checked here)."""
    for key, value in out.items():
        if key not in OVERLAY_KEYS:
            allowed = ", ".join(OVERLAY_KEYS)
            raise err(f"{field}.{key}", f"unknown follow-up key (allowed: {allowed})")
        if key == "command_args":
            out[key] = str_list(f"{field}.{key}", value)
        elif key == "retry":
            out[key] = check_retry(value, f"{field}.{key}")
        elif key in CONTINUATION_KEYS:
            continue
        elif value is not None and not isinstance(value, str):
            raise err(f"{field}.{key}", f"must be a string, got {type(value).__name__}")
    if "kind" in out and "action_kind" in out and out["kind"] != out["action_kind"]:
        raise err(f"{field}.kind", "conflicts with action_kind")
    for key in ("kind", "action_kind"):
        if key in out:
            kind = out[key]
            if isinstance(kind, str):
                out[key] = kind = ACTION_KIND_ALIASES.get(kind, kind)
            if kind not in ACTION_KINDS:
                raise err(f"{field}.{key}", f"must be one of {', '.join(ACTION_KINDS)}")


def check_overlay(
    overlay: object,
    parent: Mapping[str, Any],
    *,
    field: str,
    settings: SchedulerSettings,
    level: int = 1,
) -> dict[str, object] | None:
    """Validate one on_success/on_fail overlay (recursively) against the row it applies to;
    return the checked overlay (a JSON object: the follow-up's keys and their values)."""
    if overlay is None:
        return None
    if not isinstance(overlay, Mapping):
        raise err(field, f"must be an object, got {type(overlay).__name__}")
    if level > MAX_CHAIN_DEPTH:
        raise err(field, f"follow-ups nest deeper than {MAX_CHAIN_DEPTH} levels")
    out: dict[str, object] = dict(overlay)
    _check_overlay_values(out, field)
    child = overlay_input(parent, out)
    kind = str(child.get("action_kind"))
    for key in unusable_keys(out, kind):
        raise err(f"{field}.{key}", f"a follow-up of kind {kind!r} cannot use {key!r}")
    check_action(child, settings=settings, prefix=f"{field}.")
    for key in CONTINUATION_KEYS:
        if key in out:
            out[key] = check_overlay(
                out[key], child, field=f"{field}.{key}", settings=settings, level=level + 1
            )
    return out
