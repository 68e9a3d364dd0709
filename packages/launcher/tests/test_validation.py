"""Every refusal of validate_action / build_argv is an InvalidAction naming the schedule column."""

from __future__ import annotations

from typing import Any

import pytest

from studio_launcher import (
    MAX_ARGUMENT_BYTES,
    InvalidAction,
    LaunchError,
    build_argv,
    parse_command_allowlist,
    validate_action,
)

P = ["/opt/li/bin/li"]
AGENT = {"action_kind": "agent", "action_model": "m", "action_prompt": "hello"}
FLOW = {"action_kind": "flow", "action_model": "m", "action_prompt": "hello"}
PLAY = {"action_kind": "play", "action_playbook": "nightly"}
ENGINE = {"action_kind": "engine", "action_agent": "research", "action_prompt": "spec"}
COMMAND = {"action_kind": "command", "action_command": "echo"}
FLOW_YAML = {"action_kind": "flow_yaml", "action_flow_yaml": "a: 1"}


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    # kind
    ("missing kind", {"action_prompt": "x"}, "action_kind"),
    ("unknown kind", {"action_kind": "shell"}, "action_kind"),
    ("non-string kind", {"action_kind": 3}, "action_kind"),
    # flag-like and malformed tokens
    ("model flag", _with(AGENT, action_model="-x"), "action_model"),
    ("model long flag", _with(FLOW, action_model="--model=evil"), "action_model"),
    ("model space", _with(AGENT, action_model="a b"), "action_model"),
    ("model semicolon", _with(AGENT, action_model="m;rm"), "action_model"),
    ("model trailing newline", _with(AGENT, action_model="m\n"), "action_model"),
    ("model not a string", _with(AGENT, action_model=5), "action_model"),
    ("agent flag", _with(AGENT, action_agent="--help"), "action_agent"),
    ("agent dotdot", _with(AGENT, action_agent="../etc"), "action_agent"),
    ("project flag", _with(AGENT, action_project="-p"), "action_project"),
    ("project dotdot", _with(FLOW, action_project="a/../b"), "action_project"),
    ("flow_yaml project flag", _with(FLOW_YAML, action_project="--x"), "action_project"),
    ("playbook flag", _with(PLAY, action_playbook="-n"), "action_playbook"),
    ("playbook bad chars", _with(PLAY, action_playbook="a$b"), "action_playbook"),
    ("playbook subcommand", _with(PLAY, action_playbook="list"), "action_playbook"),
    ("playbook missing", {"action_kind": "play"}, "action_playbook"),
    ("engine model flag", _with(ENGINE, action_model="-m"), "action_model"),
    # prompt
    ("prompt --", _with(AGENT, action_prompt="--"), "action_prompt"),
    ("flow prompt --", _with(FLOW, action_prompt="--"), "action_prompt"),
    ("engine prompt --", _with(ENGINE, action_prompt="--"), "action_prompt"),
    ("play prompt --", _with(PLAY, action_prompt="--"), "action_prompt"),
    ("play prompt dash", _with(PLAY, action_prompt="-v"), "action_prompt"),
    (
        "prompt too long",
        _with(AGENT, action_prompt="x" * (MAX_ARGUMENT_BYTES + 1)),
        "action_prompt",
    ),
    ("prompt at the kernel limit", _with(AGENT, action_prompt="x" * 131072), "action_prompt"),
    ("prompt multibyte too long", _with(AGENT, action_prompt="é" * 65536), "action_prompt"),
    ("prompt NUL", _with(AGENT, action_prompt="a\x00b"), "action_prompt"),
    ("prompt not a string", _with(AGENT, action_prompt=["x"]), "action_prompt"),
    ("agent prompt missing", _with(AGENT, action_prompt=None), "action_prompt"),
    ("flow prompt missing", _with(FLOW, action_prompt=""), "action_prompt"),
    ("fanout prompt missing", {"action_kind": "fanout", "action_model": "m"}, "action_prompt"),
    ("engine prompt missing", _with(ENGINE, action_prompt=None), "action_prompt"),
    # extra arguments
    ("extra flag", _with(AGENT, action_extra_args=["ok", "--yolo"]), "action_extra_args"),
    ("extra short flag", _with(FLOW, action_extra_args=["-f"]), "action_extra_args"),
    ("play extra flag", _with(PLAY, action_extra_args=["--resume"]), "action_extra_args"),
    ("extra JSON flag", _with(FLOW, action_extra_args='["--x"]'), "action_extra_args"),
    ("extra not a list", _with(AGENT, action_extra_args={"a": 1}), "action_extra_args"),
    ("extra not JSON", _with(AGENT, action_extra_args="not json"), "action_extra_args"),
    ("extra JSON object", _with(AGENT, action_extra_args='{"a": 1}'), "action_extra_args"),
    ("extra None element", _with(AGENT, action_extra_args=[None]), "action_extra_args"),
    ("extra int element", _with(AGENT, action_extra_args=[5]), "action_extra_args"),
    ("extra empty element", _with(AGENT, action_extra_args=[""]), "action_extra_args"),
    ("extra NUL", _with(AGENT, action_extra_args=["a\x00"]), "action_extra_args"),
    ("flow_yaml extras", _with(FLOW_YAML, action_extra_args=["x"]), "action_extra_args"),
    ("command extras", _with(COMMAND, action_extra_args=["x"]), "action_extra_args"),
    ("engine extras", _with(ENGINE, action_extra_args=["x"]), "action_extra_args"),
    (
        "agent without model shifts the prompt",
        {
            "action_kind": "agent",
            "action_agent": "a",
            "action_prompt": "p",
            "action_extra_args": ["x"],
        },
        "action_extra_args",
    ),
    (
        "play prompt plus extras shifts the prompt",
        _with(PLAY, action_prompt="go", action_extra_args=["x"]),
        "action_extra_args",
    ),
    # model requirements
    ("flow without model", _with(FLOW, action_model=None), "action_model"),
    ("fanout without model", {"action_kind": "fanout", "action_prompt": "p"}, "action_model"),
    # flow_yaml
    ("flow_yaml missing", {"action_kind": "flow_yaml"}, "action_flow_yaml"),
    ("flow_yaml blank", _with(FLOW_YAML, action_flow_yaml=" \n"), "action_flow_yaml"),
    ("flow_yaml not a string", _with(FLOW_YAML, action_flow_yaml={"a": 1}), "action_flow_yaml"),
    # command
    ("command missing", {"action_kind": "command"}, "action_command"),
    ("command absolute path", _with(COMMAND, action_command="/bin/echo"), "action_command"),
    ("command relative path", _with(COMMAND, action_command="./echo"), "action_command"),
    ("command backslash", _with(COMMAND, action_command="a\\echo"), "action_command"),
    ("command flag", _with(COMMAND, action_command="-echo"), "action_command"),
    ("command space", _with(COMMAND, action_command="echo hi"), "action_command"),
    ("command trailing newline", _with(COMMAND, action_command="echo\n"), "action_command"),
    ("command not allowed", _with(COMMAND, action_command="rm"), "action_command"),
    ("command args not a list", _with(COMMAND, action_command_args="x"), "action_command_args"),
    ("command args int", _with(COMMAND, action_command_args=[1]), "action_command_args"),
    ("command args NUL", _with(COMMAND, action_command_args=["a\x00"]), "action_command_args"),
    # engine
    ("engine kind missing", _with(ENGINE, action_agent=None), "action_agent"),
    ("engine kind flag", _with(ENGINE, action_agent="-x"), "action_agent"),
    (
        "engine options not object",
        _with(ENGINE, action_engine_options=[1]),
        "action_engine_options",
    ),
    (
        "engine unknown option",
        _with(ENGINE, action_engine_options={"yolo": True}),
        "action_engine_options",
    ),
    (
        "engine depth 0",
        _with(ENGINE, action_engine_options={"max_depth": 0}),
        "action_engine_options",
    ),
    (
        "engine depth bool",
        _with(ENGINE, action_engine_options={"max_depth": True}),
        "action_engine_options",
    ),
    (
        "engine agents 101",
        _with(ENGINE, action_engine_options='{"max_agents": 101}'),
        "action_engine_options",
    ),
    (
        "engine test_cmd flag",
        _with(ENGINE, action_engine_options={"test_cmd": "-rf /"}),
        "action_engine_options",
    ),
    (
        "engine test_cmd shell chars",
        _with(ENGINE, action_engine_options={"test_cmd": "pytest; rm -rf /"}),
        "action_engine_options",
    ),
    ("coding without test_cmd", _with(ENGINE, action_agent="coding"), "action_engine_options"),
]


@pytest.mark.parametrize(
    ("schedule", "field"), [(s, f) for _, s, f in REFUSED], ids=[n for n, _, _ in REFUSED]
)
def test_refusal_names_the_field(schedule: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidAction) as info:
        validate_action(schedule, command_allowlist=["echo"])
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert isinstance(info.value, LaunchError)
    assert isinstance(info.value, ValueError)
    # build_argv runs the same validation first
    with pytest.raises(InvalidAction) as again:
        build_argv(schedule, {}, executable_prefix=P, command_allowlist=["echo"])
    assert again.value.field == field


def test_largest_prompt_that_exec_accepts_is_allowed() -> None:
    prompt = "x" * MAX_ARGUMENT_BYTES
    assert MAX_ARGUMENT_BYTES == 131071  # 131072 with the terminating NUL the kernel counts
    argv, _ = build_argv(_with(AGENT, action_prompt=prompt), {}, executable_prefix=P)
    assert argv[-1] == prompt
    multibyte = "é" * (MAX_ARGUMENT_BYTES // 2)
    argv, _ = build_argv(_with(AGENT, action_prompt=multibyte), {}, executable_prefix=P)
    assert argv[-1] == multibyte


def test_empty_allowlist_refuses_every_command() -> None:
    for allowlist in ((), "", " , ", None):
        with pytest.raises(InvalidAction, match="every command is refused") as info:
            validate_action(COMMAND, command_allowlist=allowlist)  # type: ignore[arg-type]
        assert info.value.field == "action_command"


def test_allowlist_parsing() -> None:
    assert parse_command_allowlist(" echo, true ,,notify-send ") == {"echo", "true", "notify-send"}
    assert parse_command_allowlist(["echo", " true "]) == {"echo", "true"}
    assert parse_command_allowlist(None) == frozenset()
    assert validate_action(COMMAND, command_allowlist="true,echo").command == "echo"


@pytest.mark.parametrize(
    ("schedule", "context", "field"),
    [
        (_with(AGENT, action_prompt="{{t}}"), {"t": "--"}, "action_prompt"),
        (_with(AGENT, action_prompt="{{t}}"), {"t": ""}, "action_prompt"),
        (_with(AGENT, action_prompt="{{t}}"), {"t": None}, "action_prompt"),
        (_with(AGENT, action_prompt="{{t}}"), {"t": "x" * 131072}, "action_prompt"),
        (_with(AGENT, action_prompt="a {{t}}"), {"t": "\x00"}, "action_prompt"),
        (_with(PLAY, action_prompt="{{t}}"), {"t": "--resume"}, "action_prompt"),
        (_with(ENGINE, action_prompt="{{t}}"), {"t": ""}, "action_prompt"),
        (
            _with(COMMAND, action_command_args=["{{title}}"]),
            {"title": "-rf"},
            "action_command_args",
        ),
        (
            _with(COMMAND, action_command_args=["x{{title}}"]),
            {"title": "\x00"},
            "action_command_args",
        ),
    ],
)
def test_rendered_values_are_checked(
    schedule: dict[str, Any], context: dict[str, Any], field: str
) -> None:
    validate_action(schedule, command_allowlist=["echo"])  # the template itself is fine
    with pytest.raises(InvalidAction) as info:
        build_argv(schedule, context, executable_prefix=P, command_allowlist=["echo"])
    assert info.value.field == field


def test_rendered_command_arg_refusal_does_not_echo_the_value() -> None:
    schedule = _with(COMMAND, action_command_args=["{{title}}"])
    with pytest.raises(InvalidAction) as info:
        build_argv(schedule, {"title": "-secret-value"}, command_allowlist=["echo"])
    assert "secret-value" not in str(info.value)
    assert "{{title}}" in str(info.value)


def test_literal_command_flags_are_the_operators_own() -> None:
    argv, _ = build_argv(
        _with(COMMAND, action_command_args=["--repo", "x"]), {}, command_allowlist=["echo"]
    )
    assert argv == ["echo", "--repo", "x"]


def test_play_prompt_rendering_empty_is_omitted() -> None:
    argv, _ = build_argv(_with(PLAY, action_prompt="{{t}}"), {"t": ""}, executable_prefix=P)
    assert argv == [*P, "play", "nightly"]


def test_fields_a_kind_does_not_send_are_ignored() -> None:
    # a follow-up overlay keeps the parent's fields: a command follow-up of an agent row
    schedule = {**AGENT, "action_kind": "command", "action_command": "echo", "action_prompt": "--"}
    assert validate_action(schedule, command_allowlist=["echo"]).kind == "command"
    action = validate_action({**FLOW_YAML, "action_model": "m", "action_prompt": "--"})
    assert action.kind == "flow_yaml"
    # flow sends no --agent, play no --project: those fields are not argv, so not checked
    assert validate_action({**FLOW, "action_agent": "-x"}).agent is None
    assert validate_action({**PLAY, "action_project": "-p", "action_model": "-m"}).project is None


def test_validated_action_fields() -> None:
    action = validate_action(
        {
            "action_kind": "agent",
            "action_model": "m",
            "action_agent": "a",
            "action_project": "p",
            "action_prompt": "{{x}}",
            "action_extra_args": '["e"]',
            "action_cwd": "/ignored/here",
        }
    )
    assert (action.kind, action.model, action.agent, action.project) == ("agent", "m", "a", "p")
    assert action.prompt == "{{x}}"
    assert action.extra_args == ("e",)


def test_schedule_must_be_a_mapping() -> None:
    with pytest.raises(InvalidAction) as info:
        validate_action(["agent"])  # type: ignore[arg-type]
    assert info.value.field == "schedule"
    with pytest.raises(InvalidAction) as info:
        build_argv(AGENT, ["not", "a", "mapping"], executable_prefix=P)  # type: ignore[arg-type]
    assert info.value.field == "trigger_context"
