"""Building a child's argv from a validated schedule row (argv shapes).

``P`` is the executable prefix (``resolve_li_executable()`` when not given):

- agent: ``P agent [--agent A] [--project J] -- [MODEL] PROMPT [EXTRA…]``
- flow / fanout: ``P o flow|fanout [--project J] -- MODEL PROMPT [EXTRA…]``
- play: ``P play PLAYBOOK [PROMPT] [EXTRA…]``
- flow_yaml: ``P o flow -f TMPFILE [--project J] --``
- engine: ``P engine run [--model M] [--max-depth N] [--max-agents N] [--test-cmd S]
  [--export-dir S] -- ENGINE_KIND PROMPT``
- command: ``COMMAND [ARG…]`` (no prefix)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Collection, Mapping
from typing import Any

from ._exceptions import ExecutableNotFound, InvalidAction
from ._executable import require_li_executable
from ._render import has_placeholders, render_template, unfilled_names
from ._validation import (
    PROMPT_KINDS,
    ValidatedAction,
    check_argument,
    check_prompt,
    normalize_action_kind,
    optional_str,
    str_list,
    validate_action,
)

FLOW_YAML_PREFIX = "studio-flow-"
"""Name prefix of flow_yaml temp files (created 0600 in the system temp directory)."""


def _render_prompt(action: ValidatedAction, context: Mapping[str, Any]) -> str | None:
    if action.prompt is None:
        return None
    rendered = render_template(action.prompt, context)
    if rendered == "":
        if action.kind == "play":
            return None
        raise InvalidAction("action_prompt", "renders to an empty prompt")
    check_prompt(rendered, action.kind)
    return rendered


def _render_command_args(action: ValidatedAction, context: Mapping[str, Any]) -> list[str]:
    rendered: list[str] = []
    for index, template in enumerate(action.command_args):
        if not has_placeholders(template):
            rendered.append(template)
            continue
        value = render_template(template, context)
        # A placeholder's value comes from the trigger (a PR title …): it may not become a flag.
        # The message names the template, never the untrusted value.
        if value.startswith("-"):
            raise InvalidAction(
                "action_command_args",
                f"element {index} ({template!r}) renders to a value starting with '-'",
            )
        check_argument(
            "action_command_args", value, what=f"element {index} ({template!r}) rendered"
        )
        rendered.append(value)
    return rendered


def _prefix(executable_prefix: list[str] | None) -> list[str]:
    if executable_prefix is None:
        return require_li_executable()
    if not isinstance(executable_prefix, (list, tuple)) or not executable_prefix:
        raise ExecutableNotFound("executable_prefix must be a non-empty list of strings")
    for item in executable_prefix:
        if not isinstance(item, str) or not item or "\x00" in item:
            raise ExecutableNotFound(f"executable_prefix has an unusable element {item!r}")
    if not os.path.isabs(executable_prefix[0]):
        raise ExecutableNotFound(
            f"executable_prefix[0] {executable_prefix[0]!r} is not an absolute path "
            "(refused: it would depend on cwd and PATH)"
        )
    return list(executable_prefix)


def _write_flow_yaml(text: str) -> str:
    fd, path = tempfile.mkstemp(prefix=FLOW_YAML_PREFIX, suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return path


def build_argv(
    schedule: Mapping[str, Any],
    trigger_context: Mapping[str, Any] | None,
    *,
    executable_prefix: list[str] | None = None,
    command_allowlist: str | Collection[str] = (),
) -> tuple[list[str], str | None]:
    """Return ``(argv, tmp_path)`` for one fire of ``schedule``.

    Validates every field (:func:`validate_action`), renders ``{{name}}`` placeholders of the
    prompt and of ``action_command_args`` from ``trigger_context`` in one pass, and checks the
    rendered values. Only then, for ``flow_yaml``, is the YAML written to a 0600 temp file whose
    path is returned as ``tmp_path`` (pass it to :func:`spawn_and_wait`, which removes it; the
    caller removes it if it never spawns). Any other kind returns ``tmp_path=None``.

    ``executable_prefix`` defaults to :func:`resolve_li_executable` (raising
    :class:`ExecutableNotFound`); its first element must be absolute. ``command`` actions use no
    prefix and must name a command in ``command_allowlist``.
    """
    action = validate_action(schedule, command_allowlist=command_allowlist)
    context: Mapping[str, Any] = trigger_context or {}
    if not isinstance(context, Mapping):
        raise InvalidAction("trigger_context", f"must be a mapping, got {type(context).__name__}")

    if action.kind == "command":
        assert action.command is not None
        return [action.command, *_render_command_args(action, context)], None

    prompt = _render_prompt(action, context)
    prefix = _prefix(executable_prefix)
    extras = list(action.extra_args)

    if action.kind == "agent":
        argv = [*prefix, "agent"]
        if action.agent:
            argv += ["--agent", action.agent]
        if action.project:
            argv += ["--project", action.project]
        argv.append("--")
        if action.model:
            argv.append(action.model)
        assert prompt is not None
        return [*argv, prompt, *extras], None

    if action.kind in ("flow", "fanout"):
        argv = [*prefix, "o", action.kind]
        if action.project:
            argv += ["--project", action.project]
        assert action.model is not None and prompt is not None
        return [*argv, "--", action.model, prompt, *extras], None

    if action.kind == "play":
        assert action.playbook is not None
        argv = [*prefix, "play", action.playbook]
        if prompt is not None:
            argv.append(prompt)
        return [*argv, *extras], None

    if action.kind == "engine":
        argv = [*prefix, "engine", "run"]
        if action.model:
            argv += ["--model", action.model]
        options = action.engine_options
        for key, flag in (
            ("max_depth", "--max-depth"),
            ("max_agents", "--max-agents"),
            ("test_cmd", "--test-cmd"),
            ("export_dir", "--export-dir"),
        ):
            value = options.get(key)
            if value is not None and value != "":
                argv += [flag, str(value)]
        assert action.agent is not None and prompt is not None
        return [*argv, "--", action.agent, prompt], None

    # flow_yaml: everything is validated; the temp file is the last step.
    assert action.kind == "flow_yaml" and action.flow_yaml is not None
    argv_tail = ["--project", action.project] if action.project else []
    tmp_path = _write_flow_yaml(action.flow_yaml)
    return [*prefix, "o", "flow", "-f", tmp_path, *argv_tail, "--"], tmp_path


def unfilled_placeholders(
    schedule: Mapping[str, Any], trigger_context: Mapping[str, Any] | None
) -> list[str]:
    """Sorted placeholder names of the sent templates that ``trigger_context`` leaves unfilled.

    A manual fire can refuse such a schedule up front; an automatic fire sends them literally.
    """
    kind = normalize_action_kind(schedule.get("action_kind"))
    if kind == "command":
        templates = list(str_list(schedule, "action_command_args"))
    elif kind in PROMPT_KINDS:
        prompt = optional_str(schedule, "action_prompt")
        templates = [prompt] if prompt else []
    else:
        templates = []
    names: set[str] = set()
    for template in templates:
        names.update(unfilled_names(template, trigger_context))
    return sorted(names)
