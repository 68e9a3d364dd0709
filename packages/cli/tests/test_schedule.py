"""``studio schedule …`` on the database directly: success output (table and JSON), errors.

Schedules that are not themselves under test are seeded with the real ScheduleService
(``studio.seed``); independent invocations run side by side (``studio.run_many``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import Call, Studio


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
    table, document = cli.run_many([("schedule", "list"), ("schedule", "list", "--json")])
    listing = table.stdout
    assert schedule_id in listing and "nightly" in listing and "cron 0 2 * * *" in listing
    for header in ("ID", "NAME", "ENABLED", "TRIGGER", "ACTION", "NEXT FIRE"):
        assert header in listing
    assert document.json()["total"] == 1
    assert [s["id"] for s in document.json()["schedules"]] == [schedule_id]


def test_create_defaults_cwd_to_the_current_directory_resolved(cli: Studio) -> None:
    nested = cli.workdir / "sub"
    nested.mkdir()
    here, relative = cli.run_many(
        [
            Call(("schedule", "create", "a", "--interval", "90", "--prompt", "p", "--json"),
                 {"cwd": nested}),
            ("schedule", "create", "b", "--interval", "1h", "--prompt", "p", "--cwd", "sub",
             "--json"),
        ]
    )  # fmt: skip
    assert here.json()["action_cwd"] == str(nested.resolve())
    assert here.json()["action_kind"] == "agent" and here.json()["interval_sec"] == 90
    assert relative.json()["action_cwd"] == str(nested.resolve())
    assert relative.json()["interval_sec"] == 3600


def test_create_maps_every_flag_to_its_field(cli: Studio, tmp_path: Path) -> None:
    threshold = {"metric": "failed_runs", "op": "gt", "value": 3, "window_minutes": 60}
    created = cli.ok_json(
        "schedule", "create", "full",
        "--description", "all the flags",
        "--cron", "*/5 * * * *",
        "--threshold", '{"metric": "failed_runs", "op": "gt", "value": 3, "window_minutes": 60}',
        "--action", "agent",
        "--model", "openai/gpt-4.1",
        "--prompt", "look at {{metric}}",
        "--agent", "reviewer",
        "--project", "studio",
        "--cwd", str(tmp_path),
        "--extra-arg", "one", "--extra-arg", "two",
        "--on-success", '{"prompt": "well done"}',
        "--on-fail", '{"prompt": "explain the failure", "model": "openai/gpt-4.1-mini"}',
        "--missed-fire", "run_once",
        "--overlap", "allow",
        "--max-runs", "3",
        "--budget-usd", "2.5",
        "--budget-tokens", "1000",
        "--schedule-project", "ops",
        "--disabled",
    )  # fmt: skip
    expected = {
        "name": "full",
        "description": "all the flags",
        "trigger_type": "cron",
        "cron_expr": "*/5 * * * *",
        "threshold_config": threshold,
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


def test_create_github_command_flow_yaml_and_playbook_kinds(cli: Studio, tmp_path: Path) -> None:
    spec = tmp_path / "flow.yaml"
    spec.write_text("name: demo\nsteps:\n  - prompt: hello\n", encoding="utf-8")
    github, command, flow, play = cli.run_many(
        [
            ("schedule", "create", "prs", "--github-repo", "octo/widgets",
             "--github-filter", '{"event": "pr_opened", "base": "main"}',
             "--poll-interval", "2m", "--prompt", "review #{{number}}", "--json"),
            ("schedule", "create", "cmd", "--interval", "10m", "--command", "python3",
             "--command-arg", "-c", "--command-arg", "print(1)", "--json"),
            ("schedule", "create", "flow", "--interval", "1d", "--flow-yaml", str(spec), "--json"),
            ("schedule", "create", "play", "--interval", "1w", "--action", "playbook",
             "--playbook", "tidy", "--json"),
        ]
    )  # fmt: skip
    assert github.json()["trigger_type"] == "github_poll"
    assert github.json()["github_repo"] == "octo/widgets"
    assert github.json()["github_filter"] == {"event": "pr_opened", "base": "main"}
    assert github.json()["poll_interval_sec"] == 120
    assert command.json()["action_kind"] == "command"
    assert command.json()["action_command"] == "python3"
    assert command.json()["action_command_args"] == ["-c", "print(1)"]
    assert flow.json()["action_kind"] == "flow_yaml"
    assert flow.json()["action_flow_yaml"] == spec.read_text(encoding="utf-8")
    assert play.json()["action_kind"] == "play" and play.json()["action_playbook"] == "tidy"


def test_prompt_file_from_stdin_and_from_a_file(cli: Studio, tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("from a file ✓\n", encoding="utf-8")
    piped, filed = cli.run_many(
        [
            Call(("schedule", "create", "stdin", "--interval", "1h", "--prompt-file", "-",
                  "--json"), {"input": "multi\nline prompt\n"}),
            ("schedule", "create", "file", "--interval", "1h", "--prompt-file", str(prompt),
             "--json"),
        ]
    )  # fmt: skip
    assert piped.json()["action_prompt"] == "multi\nline prompt"
    assert filed.json()["action_prompt"] == "from a file ✓"
    updated = cli.ok_json("schedule", "update", "file", "--prompt-file", "-", input="new prompt")
    assert updated["action_prompt"] == "new prompt"


def test_show_by_id_and_by_name_table_and_json(cli: Studio) -> None:
    created = cli.seed("shown")
    table, by_name, by_id = cli.run_many(
        [
            ("schedule", "show", created.id),
            ("schedule", "show", "shown", "--json"),
            ("schedule", "show", created.id, "--json"),
        ]
    )
    assert "FIELD" in table.stdout and "VALUE" in table.stdout
    assert "action_command" in table.stdout and "python3" in table.stdout
    assert "next_fire_at" in table.stdout
    assert by_name.json() == by_id.json()
    assert by_name.json()["action_command_args"] == ["ok"]


def test_update_changes_only_given_fields(cli: Studio) -> None:
    created = cli.seed("u", action_kind="agent", action_prompt="p", max_runs=4)
    result = cli.run("schedule", "update", "u", "--cron", "30 3 * * *", "--budget-usd", "5")
    assert result.stdout.splitlines()[0] == (
        f"Updated schedule {created.id} (u): budget_usd, cron_expr, trigger_type"
    )
    cleared = cli.ok_json("schedule", "update", created.id, "--clear", "max-runs", "--name", "v")
    assert cleared["trigger_type"] == "cron" and cleared["cron_expr"] == "30 3 * * *"
    assert cleared["budget_usd"] == 5 and cleared["action_prompt"] == "p"
    assert cleared["max_runs"] is None and cleared["name"] == "v"
    once = cli.ok_json("schedule", "update", "v", "--once", "--overlap", "allow")
    assert once["max_runs"] == 1 and once["overlap_policy"] == "allow"


def test_update_usage_and_validation_errors(cli: Studio) -> None:
    cli.seed("u")
    nothing, conflict = cli.run_many(
        [
            ("schedule", "update", "u"),
            ("schedule", "update", "u", "--clear", "model", "--model", "m"),
        ],
        expect=2,
    )
    assert "nothing to update" in nothing.error_line
    assert "--clear model conflicts" in conflict.error_line
    missing, bad = cli.run_many(
        [
            ("schedule", "update", "nope", "--model", "m"),
            ("schedule", "update", "u", "--cron", "not a cron"),
        ],
        expect=1,
    )
    assert missing.error_line == "error: schedule not found: nope"
    assert "--cron (cron_expr)" in bad.error_line
    assert cli.ok_json("schedule", "show", "u")["trigger_type"] == "interval"


def test_enable_disable_with_reason(cli: Studio) -> None:
    created = cli.seed("toggle")
    disabled = cli.run("schedule", "disable", "toggle", "--reason", "maintenance window")
    assert disabled.stdout.splitlines() == [
        f"Disabled schedule {created.id} (toggle)",
        "disabled: maintenance window",
    ]
    shown, enabled_only = cli.run_many(
        [("schedule", "show", "toggle", "--json"), ("schedule", "list", "--enabled", "--json")]
    )
    assert shown.json()["enabled"] is False
    assert shown.json()["disabled_reason"] == "maintenance window"
    assert enabled_only.json()["total"] == 0
    enabled = cli.ok_json("schedule", "enable", created.id)
    assert enabled["enabled"] is True and enabled["next_fire_at"] is not None
    again = cli.run("schedule", "enable", "toggle")
    assert again.stdout.startswith(f"Enabled schedule {created.id} (toggle)\nnext fire: ")
    assert cli.ok_json("schedule", "disable", "toggle")["enabled"] is False


def test_delete_needs_yes_without_a_terminal(cli: Studio) -> None:
    created = cli.seed("doomed")
    again = cli.seed("doomed2")
    refused = cli.fail("schedule", "delete", "doomed")
    assert "pass --yes" in refused.error_line
    assert cli.ok_json("schedule", "show", "doomed")["id"] == created.id
    gone, gone_json = cli.run_many(
        [("schedule", "delete", "doomed", "--yes"), ("schedule", "delete", again.id, "-y",
                                                     "--json")]
    )  # fmt: skip
    assert gone.stdout.strip() == f"Deleted schedule {created.id} (doomed)"
    assert gone_json.json() == {"deleted": True, "id": again.id, "name": "doomed2"}
    assert cli.fail("schedule", "show", "doomed").error_line == "error: schedule not found: doomed"


def test_runs_and_run_when_there_are_none(cli: Studio) -> None:
    cli.seed("idle")
    table, document = cli.run_many(
        [("schedule", "runs", "idle"), ("schedule", "runs", "idle", "--status", "failed", "--json")]
    )
    assert table.stdout.strip() == "no runs"
    assert document.json() == {"runs": [], "total": 0, "limit": 20, "offset": 0}
    no_run, no_schedule = cli.run_many(
        [("schedule", "run", "000000000000"), ("schedule", "runs", "ghost")], expect=1
    )
    assert no_run.error_line == "error: run not found: 000000000000"
    assert "schedule not found" in no_schedule.error_line


def test_preview_schedule_and_cron(cli: Studio) -> None:
    cli.seed("every", interval_sec=900)
    table, document, cron, bad = cli.run_many(
        [
            Call(("schedule", "preview", "every", "-n", "3"), {}),
            Call(("schedule", "preview", "every", "-n", "4", "--json"), {}),
            Call(("schedule", "preview", "--cron", "0 9 * * *", "--tz", "Europe/Berlin",
                  "--json"), {}),
            Call(("schedule", "preview", "--cron", "61 * * * *"), {"expect": 1}),
        ]
    )  # fmt: skip
    assert "UTC" in table.stdout and "LOCAL (UTC)" in table.stdout
    assert len([line for line in table.stdout.splitlines() if line[:1] in "123"]) == 3
    preview = document.json()
    assert preview["name"] == "every" and preview["timezone"] == "UTC"
    times = [t["at"] for t in preview["fire_times"]]
    assert [b - a for a, b in zip(times, times[1:], strict=False)] == [900.0, 900.0, 900.0]
    assert cron.json()["timezone"] == "Europe/Berlin" and len(cron.json()["fire_times"]) == 5
    assert "T09:00:00" in cron.json()["fire_times"][0]["local"]
    assert "--cron" in bad.error_line
    neither, both = cli.run_many(
        [("schedule", "preview"), ("schedule", "preview", "every", "--cron", "* * * * *")],
        expect=2,
    )
    assert "one of them" in neither.error_line and "one of them" in both.error_line


def test_limits_table_and_json(cli: Studio) -> None:
    cli.env["LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT"] = "7"
    table, document = cli.run_many([("schedule", "limits"), ("schedule", "limits", "--json")])
    assert document.json() == {
        "max_scheduled_concurrent": 7,
        "in_flight": 0,
        "holders": [],
        "max_adhoc_concurrent": 4,
        "adhoc_in_flight": 0,
    }
    assert "0 / 7" in table.stdout and "no run holds a slot" in table.stdout


def test_list_empty_and_paging(cli: Studio) -> None:
    assert cli.run("schedule", "list").stdout.strip() == "no schedules"
    for name in ("p1", "p2", "p3"):
        cli.seed(name)
    page, table, only = cli.run_many(
        [
            ("schedule", "list", "--limit", "2", "--offset", "1", "--json"),
            ("schedule", "list", "--limit", "2"),
            ("schedule", "list", "--trigger-type", "cron", "--json"),
        ]
    )
    assert page.json()["total"] == 3
    assert [s["name"] for s in page.json()["schedules"]] == ["p2", "p3"]
    assert "showing 1-2 of 3" in table.stdout
    assert only.json() == {"schedules": [], "total": 0, "limit": 100, "offset": 0}


CREATE_REFUSALS = [
    (("--cron", "every day"), "--cron (cron_expr)"),
    (("--interval", "1h", "--command", "rm", "--command-arg", "x"), "--command (action_command)"),
    (("--interval", "1h", "--model", "-rf", "--prompt", "p"), "--model (action_model)"),
    (("--interval", "1h", "--prompt", "p", "--cwd", "/nonexistent/dir"), "--cwd (action_cwd)"),
    (("--interval", "1h", "--prompt", "p", "--on-success", '{"id": "x"}'), "--on-success"),
]


def test_create_validation_errors_name_the_flag_and_write_nothing(cli: Studio) -> None:
    cli.seed("taken")
    results = cli.run_many(
        [("schedule", "create", "bad", *flags) for flags, _ in CREATE_REFUSALS]
        + [("schedule", "create", "taken", "--interval", "1h", "--prompt", "p")],
        expect=1,
    )
    for (flags, needle), result in zip(CREATE_REFUSALS, results, strict=False):
        assert result.stdout == ""
        assert needle in result.error_line, (flags, result.error_line)
    assert results[-1].error_line == "error: a schedule named 'taken' already exists"
    assert [s["name"] for s in cli.ok_json("schedule", "list")["schedules"]] == ["taken"]


def test_db_resolution_flag_env_and_default_home(cli: Studio, tmp_path: Path) -> None:
    other = tmp_path / "other" / "state.db"
    cli.seed("in-env")
    flagged = cli.ok_json(
        "schedule", "create", "in-flag", "--interval", "1h", "--prompt", "p", "--db", str(other)
    )
    assert flagged["name"] == "in-flag"
    by_flag, by_env, by_default = cli.run_many(
        [
            ("schedule", "list", "--db", str(other), "--json"),
            ("schedule", "list", "--json"),
            Call(("schedule", "list", "--json"), {"env": {"LIONAGI_STUDIO_DB": None}, "expect": 1}),
        ]
    )
    assert [s["name"] for s in by_flag.json()["schedules"]] == ["in-flag"]
    assert [s["name"] for s in by_env.json()["schedules"]] == ["in-env"]
    # a read command refuses a database that does not exist instead of creating it
    default = cli.home / ".lionagi" / "studio" / "state.db"
    expected = f"error: Studio database not found: {default} (from the default)"
    assert by_default.error_line == expected
    assert not default.parent.exists()


def test_environment_and_database_errors_are_one_line(cli: Studio, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a sqlite database" * 100)
    bad_env, as_dir, not_sqlite = cli.run_many(
        [
            Call(("schedule", "create", "x", "--interval", "1h", "--prompt", "p"),
                 {"env": {"LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT": "lots"}}),
            ("schedule", "list", "--db", str(tmp_path)),
            ("schedule", "list", "--db", str(garbage)),
        ],
        expect=1,
    )  # fmt: skip
    assert "LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT" in bad_env.error_line
    assert "directory" in as_dir.error_line
    assert not_sqlite.error_line.startswith("error: ")


def test_newer_schema_is_refused_with_one_line(cli: Studio) -> None:
    cli.seed("x")
    with sqlite3.connect(cli.db) as conn:
        conn.execute("UPDATE schema_migrations SET version = version + 100")
    assert "newer" in cli.fail("schedule", "list").error_line
