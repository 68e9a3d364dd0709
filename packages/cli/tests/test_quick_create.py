"""``studio schedule create command NAME --every 5m -- ARGV…`` (the typed quick-create) beside
the flag form, and ``--at``; as a subprocess on a real database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Studio


@pytest.fixture
def cli(studio: Studio) -> Studio:
    studio.env["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"] = "python3,sh"
    return studio


def _quick(cli: Studio, *args: str) -> Any:
    """``studio schedule create command ARGS…`` with ``--json`` before the ``--``."""
    split = args.index("--")
    return cli.run("schedule", "create", "command", *args[:split], "--json", *args[split:]).json()


def test_quick_create_every_cron_and_at(cli: Studio) -> None:
    every = _quick(
        cli, "ping", "--every", "5m", "--timeout", "2h", "--", "python3", "-c", "print('hi')"
    )
    assert every["name"] == "ping" and every["trigger_type"] == "interval"
    assert every["interval_sec"] == 300 and every["timeout_sec"] == 7200
    assert every["action_kind"] == "command" and every["action_command"] == "python3"
    assert every["action_command_args"] == ["-c", "print('hi')"]
    assert every["action_cwd"] == str(cli.workdir.resolve())
    cron = _quick(
        cli, "nightly", "--cron", "0 2 * * *", "--timezone", "Europe/Berlin", "--", "sh", "-c", "1"
    )
    assert (cron["cron_expr"], cron["timezone"]) == ("0 2 * * *", "Europe/Berlin")
    when = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0).isoformat()
    once = _quick(cli, "once", "--at", when, "--", "sh")
    assert once["trigger_type"] == "at" and once["at"] == when
    assert once["next_fire_at"] == datetime.fromisoformat(when).timestamp()


def test_the_flag_form_keeps_working_and_takes_at(cli: Studio) -> None:
    created = cli.create("command")  # a schedule named "command", flag form
    assert created["name"] == "command" and created["interval_sec"] == 3600
    when = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0).isoformat()
    at = cli.ok_json(
        "schedule", "create", "later", "--at", when, "--command", "python3",
        "--command-arg", "ok",
    )  # fmt: skip
    assert at["trigger_type"] == "at" and at["at"] == when


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--every", "5 minutes"), "--every"),
        (("--every", "0s"), "--every"),
        (("--every", "5m", "--cron", "* * * * *"), "--every and --cron"),
        ((), "--every, --cron or --at"),
        (("--cron", "61 * * * *"), "--cron"),
        (("--every", "5m", "--timezone", "UTC"), "--timezone"),
        (("--at", "2020-01-01T00:00:00Z"), "--at"),
        (("--at", "tomorrow"), "--at"),
        (("--every", "5m", "--timeout", "8d"), "--timeout"),
    ],
)
def test_bad_quick_create_is_one_line_naming_the_flag(
    cli: Studio, args: tuple[str, ...], flag: str
) -> None:
    result = cli.fail("schedule", "create", "command", "bad", *args, "--", "python3", "ok")
    assert flag in result.error_line
    assert cli.schedule_names() == []


def test_a_command_off_the_allow_list_names_argv(cli: Studio) -> None:
    result = cli.fail("schedule", "create", "command", "bad", "--every", "1m", "--", "rm", "-rf")
    assert "ARGV" in result.error_line
    assert cli.schedule_names() == []
