"""Issue 32's error seams: each bad input is refused with exit 1 and one ``error:`` line per
problem (never a traceback) naming the path, variable or flag at fault; the allow-list refusal
says how to allow the command, from the CLI and from the API alike.

Every command is the real ``studio`` console script in a subprocess (``conftest.Studio`` also
fails any result that carries a traceback); the API is the real app served on loopback.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from conftest import Studio

from studio_api import StudioSettings
from studio_api.testing import serve_studio

FORBIDDEN = "/proc/forbidden.db"  # SQLite cannot create a file there, even as root


def test_a_database_that_cannot_be_opened_is_named(studio: Studio) -> None:
    created = studio.fail(
        "schedule", "create", "nightly", "--interval", "1h", "--command", "python3",
        "--db", FORBIDDEN,
    )  # fmt: skip
    assert FORBIDDEN in created.error_line and "unable to open" in created.error_line
    queued = studio.fail("run", "command", "--db", FORBIDDEN, "--", "python3", "-V")
    assert FORBIDDEN in queued.error_line
    from_env = studio.fail("schedule", "create", "x", "--interval", "1h", "--command", "python3",
                           env={"LIONAGI_STUDIO_DB": FORBIDDEN})  # fmt: skip
    assert FORBIDDEN in from_env.error_line
    served = studio.fail("serve", "--port", "0", "--db", FORBIDDEN)  # one line, no "ERROR:"
    assert FORBIDDEN in served.error_line


def test_each_invalid_setting_is_its_own_line(studio: Studio) -> None:
    env = {"LIONAGI_STUDIO_PORT": "eighty", "LIONAGI_STUDIO_TICK_SECONDS": "soon"}
    for args in (("serve",), ("schedule", "create", "x", "--interval", "1h", "--command", "ls")):
        result = studio.run(*args, env=env, expect=1)
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 2, lines
        assert all(line.startswith("error: invalid settings: ") for line in lines), lines
        assert "LIONAGI_STUDIO_PORT" in lines[0] and "'eighty'" in lines[0]
        assert "LIONAGI_STUDIO_TICK_SECONDS" in lines[1] and "'soon'" in lines[1]
        assert "TICK" not in lines[0] and "PORT" not in lines[1]
    one = studio.fail("serve", env={"LIONAGI_STUDIO_PORT": "eighty"})
    assert "LIONAGI_STUDIO_PORT" in one.error_line


def test_a_command_schedule_without_command_names_command(studio: Studio) -> None:
    env = {"LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "python3"}
    only_args = studio.fail(
        "schedule", "create", "c", "--interval", "1h", "--command-arg", "-V", env=env
    )
    assert "--command" in only_args.error_line and "'command'" in only_args.error_line
    assert "--prompt" not in only_args.error_line and "agent" not in only_args.error_line
    by_kind = studio.fail("schedule", "create", "c", "--interval", "1h", "--kind", "command")
    assert "--command" in by_kind.error_line and "--prompt" not in by_kind.error_line
    assert studio.schedule_names() == []
    made = studio.ok_json(
        "schedule", "create", "c", "--interval", "1h", "--kind", "command", "--command",
        "python3", env=env,
    )  # fmt: skip
    assert made["action_kind"] == "command"


ALLOW_HINT = "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST=python3"


def test_the_empty_allow_list_says_how_to_allow_the_command(studio: Studio) -> None:
    created = studio.fail(
        "schedule", "create", "c", "--interval", "1h", "--command", "python3",
        env={"LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": None},
    )  # fmt: skip
    assert f"set {ALLOW_HINT} " in created.error_line
    queued = studio.fail(
        "run", "command", "--", "python3", "-V", env={"LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": None}
    )
    assert f"set {ALLOW_HINT} " in queued.error_line
    added = studio.fail(
        "schedule", "create", "c", "--interval", "1h", "--command", "python3",
        env={"LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "sleep,ls"},
    )  # fmt: skip
    assert "set LIONAGI_SCHEDULER_COMMAND_ALLOWLIST=ls,sleep,python3 " in added.error_line


def test_the_api_refusal_says_how_to_allow_the_command(tmp_path: Path) -> None:
    settings = StudioSettings.from_env({}, db=tmp_path / "state.db", port=0, timezone="UTC")
    body = {
        "name": "c",
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "command",
        "action_command": "python3",
        "action_cwd": str(tmp_path),
    }
    with serve_studio(settings) as url:
        schedule = httpx.post(f"{url}/api/schedules", json=body, timeout=10)
        action = {key: value for key, value in body.items() if key.startswith("action_")}
        run = httpx.post(f"{url}/api/runs", json=action, timeout=10)
    for answer in (schedule, run):
        assert answer.status_code == 422, answer.text
        assert f"set {ALLOW_HINT} " in str(answer.json()["detail"]), answer.text
