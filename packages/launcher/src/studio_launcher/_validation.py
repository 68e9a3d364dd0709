"""Validation of the stored action fields that become a child's argv.

Everything here is pure: nothing is rendered, written or spawned. Each refusal is an
:class:`InvalidAction` whose ``field`` is the schedule column at fault.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._exceptions import InvalidAction
from ._render import has_placeholders

ACTION_KINDS = frozenset({"agent", "command", "engine", "fanout", "flow", "flow_yaml", "play"})
"""Launcher kinds: the six ``schedules.action_kind`` values plus ``engine``."""

KIND_ALIASES: Mapping[str, str] = {"playbook": "play"}
"""Accepted spellings that normalise to a launcher kind."""

MAX_ARGUMENT_BYTES = 131071
"""Largest single argv element, in UTF-8 bytes, that exec accepts.

Linux's per-argument limit MAX_ARG_STRLEN is 131072 bytes *including* the terminating NUL, so a
131072-byte argument already fails with E2BIG; 131071 is the largest that runs.
"""

TOKEN = re.compile(r"[A-Za-z0-9_./:@-]+")
"""Model, agent, project and playbook names (full match)."""

COMMAND_NAME = re.compile(r"[A-Za-z0-9_.-]+")
"""A ``command`` action's executable: a bare name (full match)."""

ENGINE_VALUE = re.compile(r"[A-Za-z0-9_./:@+= -]+")
"""String values of ``action_engine_options`` (full match)."""

PLAY_SUBCOMMANDS = frozenset({"check", "list", "status"})
"""``li play`` subcommands that a playbook name must not shadow."""

ENGINE_OPTION_KEYS = frozenset({"export_dir", "max_agents", "max_depth", "test_cmd"})
_ENGINE_INT_OPTIONS = ("max_depth", "max_agents")
_ENGINE_STR_OPTIONS = ("test_cmd", "export_dir")
_ENGINE_INT_RANGE = (1, 100)

# Kinds that send the action prompt to the child, and those that require one.
PROMPT_KINDS = frozenset({"agent", "engine", "fanout", "flow", "play"})
_PROMPT_REQUIRED = frozenset({"agent", "engine", "fanout", "flow"})
# Kinds with no slot for action_extra_args.
_NO_EXTRA_ARGS = frozenset({"command", "engine", "flow_yaml"})


@dataclass(frozen=True, slots=True)
class ValidatedAction:
    """The action fields of one schedule row after validation (templates not yet rendered)."""

    kind: str
    model: str | None = None
    prompt: str | None = None
    agent: str | None = None
    project: str | None = None
    playbook: str | None = None
    flow_yaml: str | None = None
    extra_args: tuple[str, ...] = ()
    command: str | None = None
    command_args: tuple[str, ...] = ()
    engine_options: Mapping[str, Any] = field(default_factory=dict)


def normalize_action_kind(kind: object) -> str:
    """Return the launcher kind for ``kind`` (``playbook`` → ``play``) or raise InvalidAction."""
    if not isinstance(kind, str) or not kind:
        raise InvalidAction("action_kind", "is required (a string)", value=kind)
    normalized = KIND_ALIASES.get(kind, kind)
    if normalized not in ACTION_KINDS:
        valid = ", ".join(sorted(ACTION_KINDS | set(KIND_ALIASES)))
        raise InvalidAction(
            "action_kind", f"unknown kind {kind!r}; valid kinds: {valid}", value=kind
        )
    return normalized


def parse_command_allowlist(value: str | Collection[str] | None) -> frozenset[str]:
    """Parse an allow-list: a comma-separated string (the env form) or a collection of names.

    Entries are stripped and empty ones dropped; ``None`` or empty means no command is allowed.
    """
    if value is None:
        return frozenset()
    items = value.split(",") if isinstance(value, str) else value
    return frozenset(item.strip() for item in items if isinstance(item, str) and item.strip())


def _short(value: object) -> object:
    if isinstance(value, str) and len(value) > 80:
        return value[:77] + "..."
    return value


def optional_str(schedule: Mapping[str, Any], name: str) -> str | None:
    """Return ``schedule[name]`` as a string, ``None`` when absent or empty; refuse non-strings."""
    value = schedule.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidAction(name, f"must be a string, got {type(value).__name__}", value=value)
    return value


def check_argument(name: str, value: str, *, what: str = "value") -> None:
    """Refuse an argv element that exec would reject (NUL byte, over MAX_ARGUMENT_BYTES)."""
    if "\x00" in value:
        raise InvalidAction(name, f"{what} contains a NUL byte")
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size > MAX_ARGUMENT_BYTES:
        raise InvalidAction(
            name,
            f"{what} is {size} bytes in UTF-8; one argument may be at most "
            f"{MAX_ARGUMENT_BYTES} bytes (the kernel's per-argument limit)",
        )


def _token(name: str, value: str | None, *, path_like: bool = False) -> str | None:
    if value is None:
        return None
    if value.startswith("-"):
        raise InvalidAction(
            name, f"{value!r} starts with '-' and would inject a CLI flag", value=value
        )
    if not TOKEN.fullmatch(value):
        raise InvalidAction(
            name,
            f"{_short(value)!r} may contain only letters, digits and _ . / : @ -",
            value=_short(value),
        )
    if path_like and ".." in value.split("/"):
        raise InvalidAction(name, f"{value!r} contains a '..' path segment", value=value)
    return value


def str_list(schedule: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """Return a JSON list column (a list, or its JSON text) as a tuple of strings."""
    raw = schedule.get(name)
    if raw is None or raw == "":
        return ()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise InvalidAction(name, f"is not valid JSON: {exc}") from None
        if raw is None:
            return ()
    if not isinstance(raw, (list, tuple)):
        raise InvalidAction(name, f"must be a list of strings, got {type(raw).__name__}")
    for index, item in enumerate(raw):
        if not isinstance(item, str):
            raise InvalidAction(
                name, f"element {index} must be a string, got {type(item).__name__}", value=item
            )
    return tuple(raw)


def _mapping(schedule: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    raw = schedule.get(name)
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise InvalidAction(name, f"is not valid JSON: {exc}") from None
        if raw is None:
            return {}
    if not isinstance(raw, Mapping):
        raise InvalidAction(name, f"must be an object, got {type(raw).__name__}")
    return dict(raw)


def _extra_args(schedule: Mapping[str, Any], kind: str) -> tuple[str, ...]:
    extras = str_list(schedule, "action_extra_args")
    if extras and kind in _NO_EXTRA_ARGS:
        raise InvalidAction("action_extra_args", f"action_kind {kind!r} takes no extra arguments")
    for index, item in enumerate(extras):
        if item == "":
            raise InvalidAction("action_extra_args", f"element {index} is empty")
        if item.startswith("-"):
            raise InvalidAction(
                "action_extra_args",
                f"element {index} {_short(item)!r} starts with '-' and would inject a CLI flag",
                value=_short(item),
            )
        check_argument("action_extra_args", item, what=f"element {index}")
    return extras


def check_prompt(prompt: str, kind: str) -> None:
    """Checks on a prompt as sent (rendered, or a template without placeholders)."""
    if prompt == "--":
        raise InvalidAction("action_prompt", "must not be exactly '--'", value=prompt)
    if kind == "play" and prompt.startswith("-"):
        raise InvalidAction(
            "action_prompt",
            "a play prompt must not start with '-' (it follows the playbook name, with no '--')",
            value=_short(prompt),
        )
    check_argument("action_prompt", prompt, what="prompt")


def _prompt(schedule: Mapping[str, Any], kind: str) -> str | None:
    if kind not in PROMPT_KINDS:
        return None
    prompt = optional_str(schedule, "action_prompt")
    if prompt is None:
        if kind in _PROMPT_REQUIRED:
            raise InvalidAction("action_prompt", f"is required for action_kind {kind!r}")
        return None
    if "\x00" in prompt:
        raise InvalidAction("action_prompt", "prompt contains a NUL byte")
    if not has_placeholders(prompt):
        check_prompt(prompt, kind)
    return prompt


def _allowed_command(schedule: Mapping[str, Any], allowlist: frozenset[str]) -> str:
    command = optional_str(schedule, "action_command")
    if command is None:
        raise InvalidAction("action_command", "is required for action_kind 'command'")
    if "/" in command or "\\" in command:
        raise InvalidAction(
            "action_command", f"{command!r} must be a bare command name, not a path", value=command
        )
    if command.startswith("-"):
        raise InvalidAction("action_command", f"{command!r} starts with '-'", value=command)
    if not COMMAND_NAME.fullmatch(command):
        raise InvalidAction(
            "action_command",
            f"{_short(command)!r} may contain only letters, digits and _ . -",
            value=_short(command),
        )
    if command not in allowlist:
        listed = ", ".join(sorted(allowlist)) if allowlist else "nothing (every command is refused)"
        # Say how to allow it: the exact value of the variable with this command added.
        value = ",".join([*sorted(allowlist), command])
        raise InvalidAction(
            "action_command",
            f"{command!r} is not on the command allow-list "
            f"(LIONAGI_SCHEDULER_COMMAND_ALLOWLIST allows: {listed}); to allow it, set "
            f"LIONAGI_SCHEDULER_COMMAND_ALLOWLIST={value} where the server runs (and for the "
            "studio CLI that creates schedules)",
            value=command,
        )
    return command


def _command_args(schedule: Mapping[str, Any]) -> tuple[str, ...]:
    args = str_list(schedule, "action_command_args")
    for index, arg in enumerate(args):
        check_argument("action_command_args", arg, what=f"element {index}")
    return args


def _engine_options(schedule: Mapping[str, Any], engine_kind: str) -> Mapping[str, Any]:
    name = "action_engine_options"
    options = _mapping(schedule, name)
    unknown = sorted(set(options) - ENGINE_OPTION_KEYS)
    if unknown:
        allowed = ", ".join(sorted(ENGINE_OPTION_KEYS))
        raise InvalidAction(name, f"unknown keys {unknown}; allowed keys: {allowed}")
    low, high = _ENGINE_INT_RANGE
    for key in _ENGINE_INT_OPTIONS:
        value = options.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidAction(name, f"{key} must be an integer in [{low}, {high}]", value=value)
    for key in _ENGINE_STR_OPTIONS:
        value = options.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or value.startswith("-") or not ENGINE_VALUE.fullmatch(value):
            raise InvalidAction(
                name,
                f"{key} must be a string of letters, digits, spaces and _ . / : @ + = - "
                "not starting with '-'",
                value=_short(value),
            )
    if engine_kind == "coding" and not str(options.get("test_cmd") or "").strip():
        raise InvalidAction(name, "test_cmd is required for the 'coding' engine")
    return options


def validate_action(
    schedule: Mapping[str, Any], *, command_allowlist: str | Collection[str] = ()
) -> ValidatedAction:
    """Run every launcher validation on a schedule row's action fields; render and write nothing.

    ``schedule`` uses the ``schedules`` column names. ``command_allowlist`` holds the command
    names a ``command`` action may run (empty: every command is refused); a comma-separated
    string is parsed like ``LIONAGI_SCHEDULER_COMMAND_ALLOWLIST``. Fields the kind does not send
    are ignored. Raises :class:`InvalidAction` naming the column at fault.
    """
    if not isinstance(schedule, Mapping):
        raise InvalidAction("schedule", f"must be a mapping, got {type(schedule).__name__}")
    kind = normalize_action_kind(schedule.get("action_kind"))
    extras = _extra_args(schedule, kind)
    prompt = _prompt(schedule, kind)

    if kind == "command":
        command = _allowed_command(schedule, parse_command_allowlist(command_allowlist))
        return ValidatedAction(kind=kind, command=command, command_args=_command_args(schedule))

    if kind == "flow_yaml":
        text = schedule.get("action_flow_yaml")
        if text is not None and not isinstance(text, str):
            raise InvalidAction("action_flow_yaml", f"must be a string, got {type(text).__name__}")
        if not text or not text.strip():
            raise InvalidAction("action_flow_yaml", "is required (inline YAML) for 'flow_yaml'")
        project = _token("action_project", optional_str(schedule, "action_project"), path_like=True)
        return ValidatedAction(kind=kind, flow_yaml=text, project=project)

    if kind == "play":
        playbook = _token(
            "action_playbook", optional_str(schedule, "action_playbook"), path_like=True
        )
        if playbook is None:
            raise InvalidAction("action_playbook", "is required for action_kind 'play'")
        if playbook in PLAY_SUBCOMMANDS:
            raise InvalidAction(
                "action_playbook",
                f"{playbook!r} names a `li play` subcommand, not a playbook",
                value=playbook,
            )
        if prompt is not None and extras:
            raise InvalidAction(
                "action_extra_args",
                "a play with action_prompt takes no extra arguments: the child would read the "
                "prompt as the model",
            )
        return ValidatedAction(kind=kind, playbook=playbook, prompt=prompt, extra_args=extras)

    model = _token("action_model", optional_str(schedule, "action_model"))
    if kind in ("flow", "fanout"):
        if model is None:
            raise InvalidAction("action_model", f"is required for action_kind {kind!r}")
        project = _token("action_project", optional_str(schedule, "action_project"), path_like=True)
        return ValidatedAction(
            kind=kind, model=model, project=project, prompt=prompt, extra_args=extras
        )

    agent = _token("action_agent", optional_str(schedule, "action_agent"), path_like=True)
    if kind == "engine":
        if agent is None:
            raise InvalidAction("action_agent", "is required for 'engine' (the engine kind)")
        options = _engine_options(schedule, agent)
        return ValidatedAction(
            kind=kind, model=model, agent=agent, prompt=prompt, engine_options=options
        )

    assert kind == "agent"
    project = _token("action_project", optional_str(schedule, "action_project"), path_like=True)
    if extras and model is None:
        raise InvalidAction(
            "action_extra_args",
            "an agent without action_model takes no extra arguments: the child would read "
            "the prompt as the model",
        )
    return ValidatedAction(
        kind=kind, model=model, agent=agent, project=project, prompt=prompt, extra_args=extras
    )
