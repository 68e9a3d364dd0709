"""``--notify-*`` flags on schedule create/update and ``studio run``; ``dispatch enqueue``."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Studio

from studio_state.testing import db_rows

HOOK = "https://hooks.example.test/studio"
SCHEDULE = ["--interval", "1h", "--command", "python3", "--command-arg", "ok"]


@pytest.fixture
def studio(studio: Studio) -> Studio:
    studio.env["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"] = "python3"
    return studio


def rows(studio: Studio, sql: str, *params: Any) -> list[dict[str, Any]]:
    return db_rows(studio.db, sql, params)


def test_schedule_create_and_update_take_the_notify_flags(studio: Studio) -> None:
    created = studio.create(
        "nightly", *SCHEDULE, "--notify-to", HOOK, "--notify-on", "failed, recovered"
    )
    assert created["notify"] == {
        "deliver_to": HOOK,
        "on": ["failed", "recovered"],
        "ack_required": False,
        "max_attempts": 8,
    }
    updated = studio.ok_json("schedule", "update", "nightly", "--notify-ack")
    assert updated["notify"]["ack_required"] is True
    assert updated["notify"]["on"] == ["failed", "recovered"]
    cleared = studio.ok_json("schedule", "update", "nightly", "--clear", "notify")
    assert cleared["notify"] is None


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--notify-to", HOOK, "--notify-on", "failed,exploded"], "--notify-on (notify.on)"),
        (["--notify-to", HOOK, "--notify-on", ","], "--notify-on (notify.on)"),
        (["--notify-to", "http:/x"], "--notify-to (notify.deliver_to)"),
        (
            ["--notify-to", HOOK, "--notify-max-attempts", "0"],
            "--notify-max-attempts (notify.max_attempts)",
        ),
    ],
)
def test_bad_notify_flags_exit_1_naming_the_flag(
    studio: Studio, flags: list[str], named: str
) -> None:
    result = studio.fail("schedule", "create", "bad", *SCHEDULE, *flags)
    assert named in result.error_line
    assert studio.schedule_names() == []


def test_notify_on_without_a_destination_is_a_usage_error(studio: Studio) -> None:
    result = studio.run("schedule", "create", "x", *SCHEDULE, "--notify-on", "failed", expect=2)
    assert "--notify-to" in result.stderr
    assert studio.schedule_names() == []


def test_studio_run_takes_notify(studio: Studio) -> None:
    run = studio.ok_json(
        "run", "command", "python3", "ok", "--notify-to", "pager", "--notify-on", "completed"
    )
    assert run["notify"]["on"] == ["completed"] and run["notify"]["deliver_to"] == "pager"
    bad = studio.fail("run", "command", "python3", "--notify-to", "pager", "--notify-on", "nope")
    assert "--notify-on (notify.on)" in bad.error_line
    assert len(rows(studio, "SELECT id FROM schedule_runs")) == 1


def test_dispatch_enqueue_creates_once_per_dedup_key(studio: Studio) -> None:
    first = studio.ok_json(
        "dispatch",
        "enqueue",
        "--kind",
        "deploy.finished",
        "--to",
        HOOK,
        "--body",
        '{"sha": "abc"}',
        "--dedup-key",
        "deploy:abc",
        "--ack",
    )
    assert first["created"] is True
    again = studio.ok_json(
        *("dispatch", "enqueue", "--kind", "deploy.finished", "--to", HOOK),
        *("--dedup-key", "deploy:abc"),
    )
    assert again == {"id": first["id"], "created": False}
    (row,) = rows(studio, "SELECT * FROM dispatch_outbox")
    assert (row["id"], row["kind"], row["ack_required"]) == (first["id"], "deploy.finished", 1)
    plain = studio.run("dispatch", "enqueue", "--kind", "k", "--to", "ops")
    assert plain.stdout.strip() and len(rows(studio, "SELECT id FROM dispatch_outbox")) == 2


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--kind", "k", "--to", "http:/x"], "deliver_to"),
        (["--kind", "", "--to", "ops"], "kind"),
        (["--kind", "k", "--to", "ops", "--body", "[1]"], "--body"),
        (["--kind", "k", "--to", "ops", "--body", "{nope"], "--body"),
    ],
)
def test_dispatch_enqueue_refuses_bad_input(studio: Studio, flags: list[str], named: str) -> None:
    result = studio.fail("dispatch", "enqueue", *flags)
    assert named in result.error_line
    assert rows(studio, "SELECT id FROM dispatch_outbox") == []
