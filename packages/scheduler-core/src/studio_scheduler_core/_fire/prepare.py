"""Preparing a fire: the argv, executable, cwd and prompt, before the occurrence transaction.

Setup runs before the commit, so a refusal is recorded in that same transaction as a
``failed`` run (and never re-fires every tick).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from studio_launcher import (
    CwdUnavailable,
    ExecutableNotFound,
    LaunchError,
    SpawnFailed,
    build_argv,
    render_template,
    require_li_executable,
    resolve_cwd,
)
from studio_state import new_id

from .._records.schedule import Action, Schedule
from .env import FireEnv, Prepared

_PROMPT_KINDS = frozenset({"agent", "flow", "fanout", "play"})


def prepare(
    env: FireEnv,
    action: Action,
    trigger_context: Mapping[str, Any],
    *,
    kind: str,
    run_id: str | None = None,
    chain_depth: int = 0,
    chain_parent_id: str | None = None,
    timeout_sec: int | None = None,
) -> Prepared:
    """Build the argv and resolve executable and cwd; a refusal becomes ``setup_error``.

    ``action`` is the :class:`Schedule` that fires (its follow-up overlay applied), or an
    ad-hoc run's :class:`Action` (its own ``timeout_sec`` beside it)."""
    if isinstance(action, Schedule):
        timeout_sec = action.timeout_sec
    fire = Prepared(
        run_id=run_id or new_id(),
        invocation_id=new_id(),
        action=action,
        trigger_context=dict(trigger_context),
        kind=kind,
        chain_depth=chain_depth,
        chain_parent_id=chain_parent_id,
        timeout_sec=timeout_sec,
    )
    settings = env.settings
    fields = action.launch_fields()
    try:
        action_kind = action.action_kind
        prefix = None
        if action_kind != "command":
            prefix = require_li_executable(
                configured=settings.li_executable,
                environ=os.environ if settings.child_env is None else settings.child_env,
            )
        fire.argv, fire.tmp_path = build_argv(
            fields,
            fire.trigger_context,
            executable_prefix=prefix,
            command_allowlist=settings.command_allowlist,
        )
        fire.cwd = resolve_cwd(
            fields, project_paths=settings.project_paths, fallback=settings.default_cwd
        )
        prompt = action.action_prompt
        if action_kind in _PROMPT_KINDS and isinstance(prompt, str) and prompt:
            fire.prompt = render_template(prompt, fire.trigger_context)
        elif action_kind == "play":
            fire.prompt = action.action_playbook
    except CwdUnavailable as exc:
        fire.setup_error = ("run.failed.missing_cwd", str(exc))
    except (ExecutableNotFound, SpawnFailed) as exc:
        fire.setup_error = ("run.failed.spawn_error", str(exc))
    except LaunchError as exc:
        fire.setup_error = ("run.failed.invalid_action", str(exc))
    if fire.setup_error is not None:
        fire.discard()
        fire.argv = []
    return fire
