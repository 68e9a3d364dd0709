"""build_argv: the exact argv shape of every kind and the flow_yaml temp file."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from studio_launcher import ExecutableNotFound, InvalidAction, build_argv, validate_action

P = ["/opt/li/bin/li"]


def argv_of(
    schedule: dict[str, Any], context: dict[str, Any] | None = None, **kw: Any
) -> list[str]:
    argv, tmp_path = build_argv(schedule, context or {}, executable_prefix=P, **kw)
    assert tmp_path is None
    return argv


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (
            {"action_kind": "agent", "action_model": "claude/sonnet", "action_prompt": "hi"},
            [*P, "agent", "--", "claude/sonnet", "hi"],
        ),
        (
            {"action_kind": "agent", "action_agent": "rev", "action_prompt": "hi"},
            [*P, "agent", "--agent", "rev", "--", "hi"],
        ),
        (
            {
                "action_kind": "agent",
                "action_model": "openai/gpt-4.1",
                "action_agent": "rev",
                "action_project": "proj",
                "action_prompt": "-starts with a dash, after --",
                "action_extra_args": ["more", "words"],
            },
            [
                *P,
                "agent",
                "--agent",
                "rev",
                "--project",
                "proj",
                "--",
                "openai/gpt-4.1",
                "-starts with a dash, after --",
                "more",
                "words",
            ],
        ),
        (
            {"action_kind": "flow", "action_model": "m", "action_prompt": "do X"},
            [*P, "o", "flow", "--", "m", "do X"],
        ),
        (
            {
                "action_kind": "flow",
                "action_model": "m",
                "action_prompt": "do X",
                "action_project": "p",
                "action_extra_args": '["e1"]',
            },
            [*P, "o", "flow", "--project", "p", "--", "m", "do X", "e1"],
        ),
        (
            {
                "action_kind": "fanout",
                "action_model": "m",
                "action_prompt": "x",
                "action_project": "p",
            },
            [*P, "o", "fanout", "--project", "p", "--", "m", "x"],
        ),
        (
            {"action_kind": "play", "action_playbook": "nightly", "action_prompt": "go"},
            [*P, "play", "nightly", "go"],
        ),
        (
            {"action_kind": "playbook", "action_playbook": "nightly", "action_prompt": "go"},
            [*P, "play", "nightly", "go"],
        ),
        ({"action_kind": "play", "action_playbook": "nightly"}, [*P, "play", "nightly"]),
        (
            {"action_kind": "play", "action_playbook": "nightly", "action_extra_args": ["a", "b"]},
            [*P, "play", "nightly", "a", "b"],
        ),
        (
            {"action_kind": "engine", "action_agent": "research", "action_prompt": "spec"},
            [*P, "engine", "run", "--", "research", "spec"],
        ),
        (
            {
                "action_kind": "engine",
                "action_agent": "coding",
                "action_model": "m",
                "action_prompt": "spec",
                "action_engine_options": {
                    "max_depth": 3,
                    "max_agents": 2,
                    "test_cmd": "pytest -q",
                    "export_dir": "/tmp/out",
                },
            },
            [
                *P,
                "engine",
                "run",
                "--model",
                "m",
                "--max-depth",
                "3",
                "--max-agents",
                "2",
                "--test-cmd",
                "pytest -q",
                "--export-dir",
                "/tmp/out",
                "--",
                "coding",
                "spec",
            ],
        ),
    ],
    ids=lambda v: v.get("action_kind") if isinstance(v, dict) else None,
)
def test_argv_shape_per_kind(schedule: dict[str, Any], expected: list[str]) -> None:
    assert argv_of(schedule) == expected


def test_playbook_alias_normalises_to_play() -> None:
    assert validate_action({"action_kind": "playbook", "action_playbook": "x"}).kind == "play"


def test_command_has_no_prefix_and_renders_args() -> None:
    schedule = {
        "action_kind": "command",
        "action_command": "notify-send",
        "action_command_args": ["--urgency", "low", "PR {{pr_title}} #{{pr_number}}", "{{nope}}"],
    }
    argv = argv_of(
        schedule,
        {"pr_title": "Fix, it! (again) ünïcode?", "pr_number": 7},
        command_allowlist=["notify-send"],
    )
    assert argv == [
        "notify-send",
        "--urgency",
        "low",
        "PR Fix, it! (again) ünïcode? #7",
        "{{nope}}",
    ]


def test_command_args_as_json_text() -> None:
    schedule = {"action_kind": "command", "action_command": "true", "action_command_args": '["a"]'}
    assert argv_of(schedule, command_allowlist="true, echo") == ["true", "a"]


def test_prompt_renders_from_trigger_context_in_one_pass() -> None:
    schedule = {
        "action_kind": "agent",
        "action_model": "m",
        "action_prompt": "{{a}} / {{b}} / {{c}}",
    }
    argv = argv_of(schedule, {"a": "{{b}}", "b": "B"})
    assert argv[-1] == "{{b}} / B / {{c}}"


def test_flow_yaml_writes_a_private_temp_file(private_tmpdir: Path) -> None:
    yaml = "name: nightly  # comment kept\nsteps:\n  - ünïcode: é\n"
    argv, tmp_path = build_argv(
        {"action_kind": "flow_yaml", "action_flow_yaml": yaml, "action_project": "p"},
        {},
        executable_prefix=P,
    )
    assert tmp_path is not None
    assert argv == [*P, "o", "flow", "-f", tmp_path, "--project", "p", "--"]
    assert Path(tmp_path).parent == private_tmpdir
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o600
    assert Path(tmp_path).read_text(encoding="utf-8") == yaml
    os.unlink(tmp_path)


def test_flow_yaml_without_project() -> None:
    argv, tmp_path = build_argv(
        {"action_kind": "flow_yaml", "action_flow_yaml": "a: 1"}, {}, executable_prefix=P
    )
    assert tmp_path is not None
    try:
        assert argv == [*P, "o", "flow", "-f", tmp_path, "--"]
    finally:
        os.unlink(tmp_path)


def test_refused_flow_yaml_writes_nothing(private_tmpdir: Path) -> None:
    for bad in (
        {"action_kind": "flow_yaml", "action_flow_yaml": "a: 1", "action_extra_args": ["x"]},
        {"action_kind": "flow_yaml", "action_flow_yaml": "a: 1", "action_project": "-p"},
        {"action_kind": "flow_yaml", "action_flow_yaml": "   "},
    ):
        with pytest.raises(InvalidAction):
            build_argv(bad, {}, executable_prefix=P)
    with pytest.raises(ExecutableNotFound):
        build_argv(
            {"action_kind": "flow_yaml", "action_flow_yaml": "a: 1"}, {}, executable_prefix=["li"]
        )
    assert list(private_tmpdir.iterdir()) == []


def test_prefix_is_copied_not_aliased() -> None:
    prefix = ["/x/li", "--flag-of-the-wrapper"]
    argv, _ = build_argv(
        {"action_kind": "agent", "action_model": "m", "action_prompt": "p"},
        {},
        executable_prefix=prefix,
    )
    argv.append("mutated")
    assert prefix == ["/x/li", "--flag-of-the-wrapper"]


@pytest.mark.parametrize("bad_prefix", [["li"], ["./li"], [], [""], ["/x/li", 3]])
def test_relative_or_malformed_prefix_is_refused(bad_prefix: list[Any]) -> None:
    with pytest.raises(ExecutableNotFound):
        build_argv(
            {"action_kind": "agent", "action_model": "m", "action_prompt": "p"},
            {},
            executable_prefix=bad_prefix,
        )


def test_default_prefix_is_the_resolved_li(fake_li: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIONAGI_LI_EXECUTABLE", str(fake_li))
    argv, _ = build_argv({"action_kind": "agent", "action_model": "m", "action_prompt": "p"}, {})
    assert argv[:2] == [str(fake_li), "agent"]


def test_default_prefix_unresolvable_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIONAGI_LI_EXECUTABLE", str(tmp_path / "missing-li"))
    with pytest.raises(ExecutableNotFound, match="missing-li"):
        build_argv({"action_kind": "agent", "action_model": "m", "action_prompt": "p"}, {})
    # a command needs no li at all
    argv, _ = build_argv(
        {"action_kind": "command", "action_command": "true"}, {}, command_allowlist={"true"}
    )
    assert argv == ["true"]
