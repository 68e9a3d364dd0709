"""Template rendering: {{name}} from the trigger context, one pass, unknown names literal."""

from __future__ import annotations

from studio_launcher import render_template, unfilled_placeholders


def test_substitutes_known_names() -> None:
    assert render_template(
        "Review {{pr_title}} (#{{pr_number}})", {"pr_title": "Fix", "pr_number": 7}
    ) == ("Review Fix (#7)")


def test_unknown_names_stay_literal() -> None:
    assert render_template("a {{missing}} b", {"other": 1}) == "a {{missing}} b"
    assert render_template("a {{missing}} b", None) == "a {{missing}} b"


def test_single_pass_never_rescans_substituted_text() -> None:
    context = {"a": "{{b}}", "b": "B"}
    assert render_template("{{a}}{{b}}", context) == "{{b}}B"


def test_no_escaping_of_any_kind() -> None:
    value = "$(rm -rf /) `x` ' \" \\ %s {0}"
    assert render_template("[{{v}}]", {"v": value}) == f"[{value}]"


def test_value_types() -> None:
    context = {
        "none": None,
        "yes": True,
        "no": False,
        "n": 3,
        "f": 1.5,
        "list": [1, "a"],
        "d": {"k": 1},
    }
    assert render_template("{{none}}|{{yes}}|{{no}}|{{n}}|{{f}}", context) == "|true|false|3|1.5"
    assert render_template("{{list}} {{d}}", context) == '[1, "a"] {"k": 1}'


def test_placeholder_syntax_is_strict() -> None:
    context = {"name": "X", "1a": "no"}
    assert (
        render_template("{{ name }} {name} {{{name}}} {{1a}}", context)
        == "{{ name }} {name} {X} {{1a}}"
    )


def test_github_event_keys_are_a_fallback_not_a_shadow() -> None:
    context = {"repo": "o/r", "github_events": [{"pr_title": "T", "repo": "shadow"}]}
    assert render_template("{{repo}}: {{pr_title}}", context) == "o/r: T"
    assert render_template("{{pr_title}}", {"github_events": []}) == "{{pr_title}}"


def test_unfilled_placeholders_per_kind() -> None:
    agent = {"action_kind": "agent", "action_prompt": "{{a}} {{b}} {{a}} {{c}}"}
    assert unfilled_placeholders(agent, {"b": 1}) == ["a", "c"]
    command = {"action_kind": "command", "action_command_args": ["{{x}}", "lit", "{{y}}"]}
    assert unfilled_placeholders(command, {"y": ""}) == ["x"]
    assert unfilled_placeholders({"action_kind": "flow_yaml", "action_prompt": "{{z}}"}, {}) == []
