"""``studio schedule …`` on the database directly: success output (table and JSON), errors."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import Studio


@pytest.fixture
def cli(studio: Studio) -> Studio:
    studio.env["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"] = "python3"
    return studio


def test_create_prints_id_and_next_fire_and_lists_it(cli: Studio) -> None:
    result = cli.run("schedule", "create", "nightly", "--cron", "0 2 * * *", "--prompt", "triage")
    first, second = result.stdout.splitlines()
    assert first.startswith("Created schedule ") and first.endswith(" (nightly)")
    schedule_id = first.split()[2]
    assert len(schedule_id) == 12
    assert second.startswith("next fire: ")
    listing = cli.run("schedule", "list").stdout
    assert schedule_id in listing and "nightly" in listing and "cron 0 2 * * *" in listing
    for header in ("ID", "NAME", "ENABLED", "TRIGGER", "ACTION", "NEXT FIRE"):
        assert header in listing
    document = cli.ok_json("schedule", "list")
    assert document["total"] == 1
    assert [s["id"] for s in document["schedules"]] == [schedule_id]


def test_create_defaults_cwd_to_the_current_directory_resolved(cli: Studio, tmp_path: Path) -> None:
    nested = cli.workdir / "sub"
    nested.mkdir()
    created = cli.ok_json(
        "schedule", "create", "a", "--interval", "90", "--prompt", "p", cwd=nested
    )
    assert created["action_cwd"] == str(nested.resolve())
    assert created["action_kind"] == "agent"
    assert created["interval_sec"] == 90
    relative = cli.ok_json(
        "schedule", "create", "b", "--interval", "1h", "--prompt", "p", "--cwd", "sub"
    )
    assert relative["action_cwd"] == str(nested.resolve())
    assert relative["interval_sec"] == 3600


def test_create_maps_every_flag_to_its_field(cli: Studio, tmp_path: Path) -> None:
    created = cli.ok_json(
        "schedule",
        "create",
        "full",
        "--description",
        "all the flags",
        "--cron",
        "*/5 * * * *",
        "--threshold",
        '{"metric": "failed_runs", "op": "gt", "value": 3, "window_minutes": 60}',
        "--action",
        "agent",
        "--model",
        "openai/gpt-4.1",
        "--prompt",
        "look at {{metric}}",
        "--agent",
        "reviewer",
        "--project",
        "studio",
        "--cwd",
        str(tmp_path),
        "--extra-arg",
        "one",
        "--extra-arg",
        "two",
        "--on-success",
        '{"prompt": "well done"}',
        "--on-fail",
        '{"prompt": "explain the failure", "model": "openai/gpt-4.1-mini"}',
        "--missed-fire",
        "run_once",
        "--overlap",
        "allow",
        "--max-runs",
        "3",
        "--budget-usd",
        "2.5",
        "--budget-tokens",
        "1000",
        "--schedule-project",
        "ops",
        "--disabled",
    )
    expected = {
        "name": "full",
        "description": "all the flags",
        "trigger_type": "cron",
        "cron_expr": "*/5 * * * *",
        "threshold_config": {"metric": "failed_runs", "op": "gt", "value": 3, "window_minutes": 60},
        "action_kind": "agent",
        "action_model": "openai/gpt-4.1",
        "action_prompt": "look at {{metric}}",
        "action_agent": "reviewer",
        "action_project": "studio",
        "action_cwd": str(tmp_path.resolve()),
        "action_extra_args": ["one", "two"],
        "on_success": {"prompt": "well done"},
        "missed_fire_policy": "run_once",
        "overlap_policy": "allow",
        "max_runs": 3,
        "budget_usd": 2.5,
        "budget_tokens": 1000,
        "project": "ops",
        "enabled": False,
    }
    for key, value in expected.items():
        assert created[key] == value, key
    assert created["on_fail"]["prompt"] == "explain the failure"
    shown = cli.ok_json("schedule", "show", "full")
    assert shown["id"] == created["id"]


def test_create_github_command_flow_yaml_and_playbook_kinds(cli: Studio, tmp_path: Path) -> None:
    github = cli.ok_json(
        "schedule",
        "create",
        "prs",
        "--github-repo",
        "octo/widgets",
        "--github-filter",
        '{"event": "pr_opened", "base": "main"}',
        "--poll-interval",
        "2m",
        "--prompt",
        "review #{{number}}",
    )
    assert github["trigger_type"] == "github_poll"
    assert github["github_repo"] == "octo/widgets"
    assert github["github_filter"] == {"event": "pr_opened", "base": "main"}
    assert github["poll_interval_sec"] == 120

    command = cli.ok_json(
        "schedule",
        "create",
        "cmd",
        "--interval",
        "10m",
        "--command",
        "python3",
        "--command-arg",
        "-c",
        "--command-arg",
        "print(1)",
    )
    assert command["action_kind"] == "command"
    assert command["action_command"] == "python3"
    assert command["action_command_args"] == ["-c", "print(1)"]

    spec = tmp_path / "flow.yaml"
    spec.write_text("name: demo\nsteps:\n  - prompt: hello\n", encoding="utf-8")
    flow = cli.run("schedule", "create", "flow", "--interval", "1d", "--flow-yaml", str(spec))
    assert flow.code == 0
    stored = cli.ok_json("schedule", "show", "flow")
    assert stored["action_kind"] == "flow_yaml"
    assert stored["action_flow_yaml"] == spec.read_text(encoding="utf-8")

    play = cli.ok_json(
        "schedule",
        "create",
        "play",
        "--interval",
        "1w",
        "--action",
        "playbook",
        "--playbook",
        "tidy",
    )
    assert play["action_kind"] == "play"
    assert play["action_playbook"] == "tidy"


def test_prompt_file_from_stdin_and_from_a_file(cli: Studio, tmp_path: Path) -> None:
    piped = cli.ok_json(
        "schedule",
        "create",
        "stdin",
        "--interval",
        "1h",
        "--prompt-file",
        "-",
        input="multi\nline prompt\n",
    )
    assert piped["action_prompt"] == "multi\nline prompt"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("from a file ✓\n", encoding="utf-8")
    filed = cli.ok_json(
        "schedule", "create", "file", "--interval", "1h", "--prompt-file", str(prompt)
    )
    assert filed["action_prompt"] == "from a file ✓"
    updated = cli.ok_json("schedule", "update", "file", "--prompt-file", "-", input="new prompt")
    assert updated["action_prompt"] == "new prompt"


def test_show_by_id_and_by_name_table_and_json(cli: Studio) -> None:
    created = cli.seed("shown")
    table = cli.run("schedule", "show", created["id"]).stdout
    assert "FIELD" in table and "VALUE" in table
    assert "action_command" in table and "python3" in table
    assert "next_fire_at" in table
    by_name = cli.ok_json("schedule", "show", "shown")
    assert by_name == cli.ok_json("schedule", "show", created["id"])
    assert by_name["action_command_args"] == ["ok"]


def test_update_changes_only_given_fields(cli: Studio) -> None:
    created = cli.seed("u", action_kind="agent", action_prompt="p", max_runs=4)
    result = cli.run("schedule", "update", "u", "--cron", "30 3 * * *", "--budget-usd", "5")
    assert result.stdout.splitlines()[0] == (
        f"Updated schedule {created['id']} (u): budget_usd, cron_expr, trigger_type"
    )
    after = cli.ok_json("schedule", "show", created["id"])
    assert after["trigger_type"] == "cron" and after["cron_expr"] == "30 3 * * *"
    assert after["budget_usd"] == 5 and after["max_runs"] == 4
    assert after["action_prompt"] == "p"
    cleared = cli.ok_json("schedule", "update", created["id"], "--clear", "max-runs", "--name", "v")
    assert cleared["max_runs"] is None and cleared["name"] == "v"
    once = cli.ok_json("schedule", "update", "v", "--once", "--overlap", "allow")
    assert once["max_runs"] == 1 and once["overlap_policy"] == "allow"


def test_update_usage_and_validation_errors(cli: Studio) -> None:
    cli.seed("u")
    assert "nothing to update" in cli.run("schedule", "update", "u", expect=2).error_line
    conflict = cli.run("schedule", "update", "u", "--clear", "model", "--model", "m", expect=2)
    assert "--clear model conflicts" in conflict.error_line
    missing = cli.fail("schedule", "update", "nope", "--model", "m")
    assert missing.error_line == "error: schedule not found: nope"
    bad = cli.fail("schedule", "update", "u", "--cron", "not a cron")
    assert "--cron (cron_expr)" in bad.error_line
    assert cli.ok_json("schedule", "show", "u")["trigger_type"] == "interval"


def test_enable_disable_with_reason(cli: Studio) -> None:
    created = cli.seed("toggle")
    disabled = cli.run("schedule", "disable", "toggle", "--reason", "maintenance window")
    assert disabled.stdout.splitlines() == [
        f"Disabled schedule {created['id']} (toggle)",
        "disabled: maintenance window",
    ]
    shown = cli.ok_json("schedule", "show", "toggle")
    assert shown["enabled"] is False and shown["disabled_reason"] == "maintenance window"
    assert "no" in cli.run("schedule", "list", "--disabled").stdout
    assert cli.ok_json("schedule", "list", "--enabled")["total"] == 0
    enabled = cli.ok_json("schedule", "enable", created["id"])
    assert enabled["enabled"] is True and enabled["next_fire_at"] is not None
    assert cli.run("schedule", "enable", "toggle").stdout.startswith("Enabled schedule ")
    assert cli.ok_json("schedule", "disable", "toggle")["enabled"] is False


def test_delete_needs_yes_without_a_terminal(cli: Studio) -> None:
    created = cli.seed("doomed")
    refused = cli.fail("schedule", "delete", "doomed")
    assert "pass --yes" in refused.error_line
    assert cli.ok_json("schedule", "show", "doomed")["id"] == created["id"]
    gone = cli.run("schedule", "delete", "doomed", "--yes")
    assert gone.stdout.strip() == f"Deleted schedule {created['id']} (doomed)"
    assert cli.fail("schedule", "show", "doomed").error_line == "error: schedule not found: doomed"
    again = cli.seed("doomed2")
    assert cli.ok_json("schedule", "delete", again["id"], "-y") == {
        "deleted": True,
        "id": again["id"],
        "name": "doomed2",
    }


def test_runs_and_run_when_there_are_none(cli: Studio) -> None:
    cli.seed("idle")
    assert cli.run("schedule", "runs", "idle").stdout.strip() == "no runs"
    assert cli.ok_json("schedule", "runs", "idle", "--status", "failed") == {
        "runs": [],
        "total": 0,
        "limit": 20,
        "offset": 0,
    }
    assert cli.fail("schedule", "run", "000000000000").error_line == (
        "error: run not found: 000000000000"
    )
    assert "schedule not found" in cli.fail("schedule", "runs", "ghost").error_line


def test_preview_schedule_and_cron(cli: Studio) -> None:
    cli.seed("every", interval_sec=900)
    table = cli.run("schedule", "preview", "every", "-n", "3").stdout
    assert "UTC" in table and "LOCAL (UTC)" in table
    assert len([line for line in table.splitlines() if line.strip()[:1] in "123"]) == 3
    document = cli.ok_json("schedule", "preview", "every", "-n", "4")
    assert document["name"] == "every" and document["timezone"] == "UTC"
    times = [t["at"] for t in document["fire_times"]]
    assert len(times) == 4
    assert [b - a for a, b in zip(times, times[1:], strict=False)] == [900.0, 900.0, 900.0]
    cron = cli.ok_json("schedule", "preview", "--cron", "0 9 * * *", "--tz", "Europe/Berlin")
    assert cron["timezone"] == "Europe/Berlin" and len(cron["fire_times"]) == 5
    assert all(t["local"].startswith(t["local"][:10]) for t in cron["fire_times"])
    assert "T09:00:00" in cron["fire_times"][0]["local"]
    assert "--cron" in cli.fail("schedule", "preview", "--cron", "61 * * * *").error_line
    assert "one of them" in cli.run("schedule", "preview", expect=2).error_line
    both = cli.run("schedule", "preview", "every", "--cron", "* * * * *", expect=2)
    assert "one of them" in both.error_line


def test_limits_table_and_json(cli: Studio) -> None:
    cli.env["LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT"] = "7"
    document = cli.ok_json("schedule", "limits")
    assert document == {
        "max_scheduled_concurrent": 7,
        "in_flight": 0,
        "holders": [],
        "max_adhoc_concurrent": 4,
        "adhoc_in_flight": 0,
    }
    table = cli.run("schedule", "limits").stdout
    assert "0 / 7" in table and "no run holds a slot" in table


def test_list_empty_and_paging(cli: Studio) -> None:
    assert cli.run("schedule", "list").stdout.strip() == "no schedules"
    for name in ("p1", "p2", "p3"):
        cli.seed(name)
    page = cli.ok_json("schedule", "list", "--limit", "2", "--offset", "1")
    assert page["total"] == 3 and [s["name"] for s in page["schedules"]] == ["p2", "p3"]
    assert "showing 1-2 of 3" in cli.run("schedule", "list", "--limit", "2").stdout
    only = cli.ok_json("schedule", "list", "--trigger-type", "cron")
    assert only == {"schedules": [], "total": 0, "limit": 100, "offset": 0}


CREATE_REFUSALS = [
    (("--cron", "every day"), "--cron (cron_expr)"),
    (("--interval", "0", "--prompt", "p"), "--interval (interval_sec)"),
    (
        ("--interval", "1h", "--command", "rm", "--command-arg", "x"),
        "--command (action_command)",
    ),
    (("--interval", "1h", "--model", "-rf", "--prompt", "p"), "--model (action_model)"),
    (("--interval", "1h", "--prompt", "p", "--cwd", "/nonexistent/dir"), "--cwd (action_cwd)"),
    (("--interval", "1h", "--prompt", "p", "--threshold", '{"metric": "x"}'), "--threshold"),
    (("--interval", "1h", "--prompt", "p", "--on-success", '{"id": "x"}'), "--on-success"),
    (("--github-repo", "not a repo", "--prompt", "p"), "--github-repo (github_repo)"),
    (("--interval", "1h", "--prompt", "p", "--budget-usd", "-1"), "--budget-usd (budget_usd)"),
]


def test_create_validation_errors_name_the_flag_and_write_nothing(cli: Studio) -> None:
    results = cli.run_many(
        [("schedule", "create", "bad", *f) for f, _ in CREATE_REFUSALS], expect=1
    )
    for (flags, needle), result in zip(CREATE_REFUSALS, results, strict=True):
        assert result.stdout == ""
        assert needle in result.error_line, (flags, result.error_line)
    assert cli.ok_json("schedule", "list")["total"] == 0


def test_duplicate_name_is_refused(cli: Studio) -> None:
    cli.seed("twice")
    result = cli.fail("schedule", "create", "twice", "--interval", "1h", "--prompt", "p")
    assert result.error_line == "error: a schedule named 'twice' already exists"


def test_db_resolution_flag_env_and_default_home(cli: Studio, tmp_path: Path) -> None:
    other = tmp_path / "other" / "state.db"
    cli.seed("in-env")
    flagged = cli.ok_json(
        "schedule", "create", "in-flag", "--interval", "1h", "--prompt", "p", "--db", str(other)
    )
    assert [
        s["name"] for s in cli.ok_json("schedule", "list", "--db", str(other))["schedules"]
    ] == ["in-flag"]
    assert flagged["name"] == "in-flag"
    assert [s["name"] for s in cli.ok_json("schedule", "list")["schedules"]] == ["in-env"]
    default = cli.ok_json("schedule", "list", env={"LIONAGI_STUDIO_DB": None})
    assert default["schedules"] == [] and default["total"] == 0
    assert (cli.home / ".lionagi" / "studio" / "state.db").is_file()


def test_environment_and_database_errors_are_one_line(cli: Studio, tmp_path: Path) -> None:
    bad_env = cli.fail(
        "schedule", "create", "x", "--interval", "1h", "--prompt", "p",
        env={"LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT": "lots"},
    )  # fmt: skip
    assert "LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT" in bad_env.error_line
    as_dir = cli.fail("schedule", "list", "--db", str(tmp_path))
    assert "directory" in as_dir.error_line
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a sqlite database" * 100)
    assert "error: " in cli.fail("schedule", "list", "--db", str(garbage)).error_line


def test_newer_schema_is_refused_with_one_line(cli: Studio) -> None:
    cli.seed("x")
    with sqlite3.connect(cli.db) as conn:
        conn.execute("UPDATE schema_migrations SET version = version + 100")
    result = cli.fail("schedule", "list")
    assert "newer" in result.error_line


def test_json_output_is_one_document(cli: Studio) -> None:
    cli.seed("j")
    for args in (("schedule", "list"), ("schedule", "show", "j"), ("schedule", "limits")):
        out = cli.run(*args, "--json").stdout
        json.loads(out)  # exactly one document: json.loads rejects trailing data
