"""The command tree, help, version, usage errors and the fast-start guarantee."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import STUDIO, Call, Studio

COMMANDS = [
    ("serve",),
    ("schedule",),
    ("schedule", "create"),
    ("schedule", "list"),
    ("schedule", "show"),
    ("schedule", "update"),
    ("schedule", "enable"),
    ("schedule", "disable"),
    ("schedule", "delete"),
    ("schedule", "trigger"),
    ("schedule", "runs"),
    ("schedule", "run"),
    ("schedule", "preview"),
    ("schedule", "limits"),
    ("dispatch",),
    ("dispatch", "list"),
    ("dispatch", "show"),
    ("dispatch", "ack"),
    ("dispatch", "retry"),
    ("dispatch", "purge"),
    ("usage",),
    ("usage", "report"),
]

READ_COMMANDS = [
    ("schedule", "list"),
    ("schedule", "show"),
    ("schedule", "runs"),
    ("schedule", "run"),
    ("schedule", "preview"),
    ("schedule", "limits"),
    ("dispatch", "list"),
    ("dispatch", "show"),
]


def test_top_level_help_lists_every_group(studio: Studio) -> None:
    result = studio.run("--help")
    for group in ("serve", "schedule", "dispatch", "usage"):
        assert f"  {group} " in result.stdout
    assert result.stderr == ""


def test_every_command_has_help_in_process() -> None:
    """Each command's --help renders (checked in one process for speed)."""
    from click.testing import CliRunner

    from studio_cli import app

    runner = CliRunner()
    for path in COMMANDS:
        outcome = runner.invoke(app, [*path, "--help"])
        assert outcome.exit_code == 0, (path, outcome.output)
        assert outcome.output.startswith(f"Usage: studio {' '.join(path)}"), path
    for path in READ_COMMANDS:
        assert "--json" in runner.invoke(app, [*path, "--help"]).output, path
        assert "--db" in runner.invoke(app, [*path, "--help"]).output, path


@pytest.mark.parametrize(
    "flag",
    [
        "--cron",
        "--interval",
        "--github-repo",
        "--github-filter",
        "--poll-interval",
        "--threshold",
        "--action",
        "--model",
        "--prompt",
        "--prompt-file",
        "--agent",
        "--playbook",
        "--flow-yaml",
        "--project",
        "--cwd",
        "--extra-arg",
        "--command",
        "--command-arg",
        "--on-success",
        "--on-fail",
        "--missed-fire",
        "--overlap",
        "--max-runs",
        "--once",
        "--budget-usd",
        "--budget-tokens",
        "--description",
        "--disabled",
        "--schedule-project",
        "--catchup-window-sec",
        "--jitter-sec",
        "--pause-on-failure",
        "--retry-max-attempts",
        "--retry-backoff-sec",
        "--retry-backoff-factor",
        "--retry-max-backoff-sec",
    ],
)
def test_create_has_a_flag_for_every_field(flag: str) -> None:
    from click.testing import CliRunner

    from studio_cli import app

    create_help = CliRunner().invoke(app, ["schedule", "create", "--help"]).output
    assert f"{flag} " in create_help
    if flag != "--disabled":
        update_help = CliRunner().invoke(app, ["schedule", "update", "--help"]).output
        assert f"{flag} " in update_help


def test_version(studio: Studio) -> None:
    assert studio.run("--version").stdout.startswith("studio, version ")


def test_python_dash_m_runs_the_same_cli(studio: Studio) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "studio_cli", "--version"],
        capture_output=True,
        text=True,
        env=studio.env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("studio, version ")


USAGE_ERRORS = [
    (("frobnicate",), "No such command 'frobnicate'"),
    (("schedule", "create"), "Missing argument 'NAME'"),
    (("schedule", "list", "--bogus"), "--bogus"),
    (("schedule", "create", "x", "--interval", "soon"), "is not a duration"),
    (("schedule", "create", "x", "--max-runs", "many"), "'many' is not a valid integer"),
    (("schedule", "create", "x", "--action", "rocket"), "'rocket' is not one of"),
    (("schedule", "runs", "x", "--limit", "0"), "--limit"),
    (("dispatch", "list", "--status", "lost"), "'lost' is not one of"),
    (("dispatch", "ack", "abc"), "Missing argument 'TOKEN'"),
]


def test_usage_errors_exit_2_with_one_line(studio: Studio) -> None:
    results = studio.run_many([args for args, _ in USAGE_ERRORS], expect=2)
    for (args, needle), result in zip(USAGE_ERRORS, results, strict=True):
        assert result.stdout == "", args
        line = result.error_line
        assert needle in line, (args, line)
        assert "--help" in line, (args, line)


CONFLICTING_CREATE_FLAGS = [
    (("--cron", "* * * * *", "--interval", "5m"), "--cron and --interval are exclusive"),
    (("--interval", "5m", "--once", "--max-runs", "3"), "--once and --max-runs"),
    (("--interval", "5m", "--prompt", "a", "--prompt-file", "-"), "--prompt and --prompt-file"),
    (("--model", "m"), "a trigger is required"),
    (("--interval", "5m", "--command", "python3", "--playbook", "p"), "imply different action"),
    (("--interval", "5m", "--prompt-file", "/nonexistent/prompt.txt"), "--prompt-file"),
]


def test_conflicting_create_flags_are_usage_errors(studio: Studio) -> None:
    calls = [
        Call(("schedule", "create", "x", *args), {"input": ""})
        for args, _ in CONFLICTING_CREATE_FLAGS
    ]
    results = studio.run_many(calls, expect=2)
    for (args, needle), result in zip(CONFLICTING_CREATE_FLAGS, results, strict=True):
        assert needle in result.error_line, (args, result.error_line)
    assert studio.schedule_names() == [], "a usage error must not write anything"


def test_invalid_json_flag_exits_1_naming_the_flag(studio: Studio) -> None:
    flags = ["--threshold", "--github-filter", "--on-success", "--on-fail"]
    results = studio.run_many(
        [("schedule", "create", "x", "--interval", "5m", flag, "{not json") for flag in flags],
        expect=1,
    )
    for flag, result in zip(flags, results, strict=True):
        assert result.stdout == ""
        assert result.error_line.startswith(f"error: {flag}: invalid JSON"), result.stderr
    assert studio.schedule_names() == []


def test_help_imports_no_heavy_module(studio: Studio) -> None:
    probe = (
        "import sys\n"
        "from studio_cli.__main__ import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ['aiosqlite', 'httpx', 'rich', 'asyncio', 'studio_scheduler_core', 'studio_api',\n"
        "         'studio_outbox', 'studio_state', 'fastapi', 'pydantic', 'uvicorn']\n"
        "print('HEAVY=' + ','.join(m for m in heavy if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=studio.env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY=", proc.stdout


def test_help_is_fast_enough(studio: Studio) -> None:
    """A generous liveness bound only (the bench measures the real figure)."""
    started = time.monotonic()
    subprocess.run([*STUDIO, "--help"], capture_output=True, env=studio.env, timeout=60, check=True)
    assert time.monotonic() - started < 10
