"""Hostile input to the CLI: huge numbers, unknown zones, missing databases, a busy port, an
invalid durability setting. Each is one ``error:`` line and exit 1, with nothing written."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import STUDIO, Call, Studio


def _assert_one_clean_line(line: str, *needles: str) -> None:
    assert "unexpected" not in line.lower(), line
    for needle in needles:
        assert needle in line, (needle, line)


OUT_OF_RANGE = [
    (("--max-runs", "99999999999999999999999"), "--max-runs (max_runs)"),
    (("--max-runs", "-99999999999999999999999"), "--max-runs (max_runs)"),
    (("--budget-tokens", str(2**31)), "--budget-tokens (budget_tokens)"),
    (("--interval", "367d"), "--interval (interval_sec)"),
    (("--interval", "99999999999999999"), "--interval (interval_sec)"),
    (("--budget-usd", "1e10"), "--budget-usd (budget_usd)"),
    (("--budget-usd", "nan"), "--budget-usd (budget_usd)"),
    (("--budget-usd", "inf"), "--budget-usd (budget_usd)"),
]


def test_out_of_range_numbers_exit_1_naming_the_flag(studio: Studio) -> None:
    calls = []
    for args, _ in OUT_OF_RANGE:
        trigger = [] if "--interval" in args else ["--interval", "1h"]
        calls.append(("schedule", "create", "huge", *trigger, "--prompt", "p", *args))
    calls.append(
        (
            "schedule",
            "create",
            "huge",
            "--github-repo",
            "o/r",
            "--poll-interval",
            "2d",
            "--prompt",
            "p",
        )
    )
    results = studio.run_many(calls, expect=1)
    expected = [needle for _, needle in OUT_OF_RANGE] + ["--poll-interval (poll_interval_sec)"]
    for needle, result in zip(expected, results, strict=True):
        _assert_one_clean_line(result.error_line, "invalid value for", needle)
    assert studio.schedule_names() == []
    # the same bounds on update, and the largest value in range is accepted
    studio.create("kept", "--interval", "1h", "--prompt", "p")
    refused = studio.run(
        "schedule", "update", "kept", "--max-runs", "99999999999999999999999", expect=1
    )
    _assert_one_clean_line(refused.error_line, "--max-runs (max_runs)", "at most 2147483647")
    accepted = studio.ok_json("schedule", "update", "kept", "--max-runs", str(2**31 - 1))
    assert accepted["max_runs"] == 2**31 - 1


def test_preview_with_an_unknown_time_zone_names_the_flag(studio: Studio) -> None:
    result = studio.run(
        "schedule", "preview", "--cron", "0 * * * *", "--tz", "Mars/Olympus", expect=1
    )
    _assert_one_clean_line(result.error_line, "--tz", "Mars/Olympus")
    traversal = studio.run(
        "schedule", "preview", "--cron", "0 * * * *", "--tz", "../../etc/passwd", expect=1
    )
    _assert_one_clean_line(traversal.error_line, "--tz")


READ_AND_CHANGE_COMMANDS = [
    ("schedule", "list"),
    ("schedule", "show", "x"),
    ("schedule", "runs", "x"),
    ("schedule", "run", "abcdefabcdef"),
    ("schedule", "preview", "x"),
    ("schedule", "limits"),
    ("schedule", "enable", "x"),
    ("schedule", "disable", "x"),
    ("schedule", "delete", "x", "--yes"),
    ("schedule", "update", "x", "--description", "d"),
    ("dispatch", "list"),
    ("dispatch", "show", "x"),
    ("dispatch", "ack", "x", "token"),
    ("dispatch", "retry", "x"),
    ("dispatch", "purge", "x", "--yes"),
    ("run", "list"),
    ("run", "show", "abcdefabcdef"),
    ("run", "cancel", "abcdefabcdef"),
]


def test_read_commands_refuse_a_missing_database(studio: Studio, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir" / "x.db"
    results = studio.run_many(
        [(*command, "--db", str(missing)) for command in READ_AND_CHANGE_COMMANDS], expect=1
    )
    for command, result in zip(READ_AND_CHANGE_COMMANDS, results, strict=True):
        assert result.stdout == "", command
        assert result.error_line == f"error: Studio database not found: {missing} (from --db)", (
            command
        )
    from_env = studio.run("schedule", "list", env={"LIONAGI_STUDIO_DB": str(missing)}, expect=1)
    assert from_env.error_line.endswith(f"{missing} (from LIONAGI_STUDIO_DB)")
    assert not (tmp_path / "nonexistent").exists(), "nothing may be created"


def test_a_bad_postgresql_url_is_refused_naming_its_source(studio: Studio) -> None:
    url = "postgresql://studio:s3cret@127.0.0.1:port/studio"
    by_flag, by_env = studio.run_many(
        [
            Call(("schedule", "list", "--db", url), {}),
            Call(("schedule", "list"), {"env": {"LIONAGI_STUDIO_DB": url}}),
        ],
        expect=1,
    )
    assert by_flag.error_line == (
        "error: --db: the URL's port must be a number from 1 to 65535 "
        "(got 'postgresql://studio:***@127.0.0.1:port/studio')"
    )
    assert by_env.error_line.startswith("error: LIONAGI_STUDIO_DB: the URL's port")
    assert by_flag.stdout == "" and "s3cret" not in by_flag.stderr + by_env.stderr


def test_an_invalid_synchronous_setting_is_one_line_naming_the_variable(studio: Studio) -> None:
    bad = {"LIONAGI_STUDIO_SYNCHRONOUS": "sometimes"}
    listing, creating = studio.run_many(
        [
            Call(("schedule", "list"), {"env": bad}),
            Call(("schedule", "create", "x", "--interval", "1h", "--prompt", "p"), {"env": bad}),
        ],
        expect=1,
    )
    for result in (listing, creating):
        _assert_one_clean_line(result.error_line, "LIONAGI_STUDIO_SYNCHRONOUS", "'sometimes'")
    assert studio.schedule_names() == []
    normal = studio.run("schedule", "list", env={"LIONAGI_STUDIO_SYNCHRONOUS": "normal"})
    assert normal.stdout.strip() == "no schedules"


def _fsyncs(studio: Studio, mode: str, name: str) -> int:
    """fsync/fdatasync calls of one `schedule create` under ``synchronous=mode`` (strace)."""
    env = {**studio.env, "LIONAGI_STUDIO_SYNCHRONOUS": mode}
    proc = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=fsync,fdatasync",
            *STUDIO,
            "schedule",
            "create",
            name,
            "--interval",
            "1h",
            "--prompt",
            "p",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=studio.workdir,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return len(re.findall(r"\b(?:fsync|fdatasync)\(", proc.stderr))


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_the_synchronous_setting_reaches_the_cli_connection(studio: Studio) -> None:
    # FULL syncs the write-ahead log at every commit; NORMAL only at checkpoints.
    full = _fsyncs(studio, "full", "durable")
    normal = _fsyncs(studio, "normal", "fast")
    assert full > normal, (full, normal)
    assert set(studio.schedule_names()) == {"durable", "fast"}


def test_serve_on_a_busy_port_fails_before_touching_the_database(
    studio: Studio, tmp_path: Path
) -> None:
    db = tmp_path / "fresh" / "state.db"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = studio.run("serve", "--port", str(port), "--db", str(db), expect=1)
    assert result.error_line == (
        f"error: cannot serve on 127.0.0.1:{port}: Address already in use "
        "(another server is listening there)"
    )
    assert not db.parent.exists(), "the engine must not have opened the database"


def test_serve_with_an_invalid_synchronous_setting_is_refused(
    studio: Studio, tmp_path: Path
) -> None:
    db = tmp_path / "never" / "state.db"
    result = studio.run(
        "serve",
        "--port",
        "0",
        "--db",
        str(db),
        env={"LIONAGI_STUDIO_SYNCHRONOUS": "fast"},
        expect=1,
    )
    _assert_one_clean_line(result.error_line, "LIONAGI_STUDIO_SYNCHRONOUS", "'fast'")
    assert not db.parent.exists()


def test_input_paths_that_were_unexpected_errors(studio: Studio, tmp_path: Path) -> None:
    """Every input found to end in an 'unexpected …' error now names what is wrong."""
    binary = tmp_path / "binary.dat"
    binary.write_bytes(bytes(range(128, 256)) * 4)
    nested = "[" * 100_000
    calls: list[tuple[tuple[str, ...], str]] = [
        (("schedule", "list", "--offset", "99999999999999999999"), "--offset"),
        (("dispatch", "list", "--offset", "99999999999999999999"), "--offset"),
        (("run", "list", "--offset", "99999999999999999999"), "--offset"),
        (
            ("schedule", "create", "x", "--interval", "1h", "--prompt", "p", "--on-fail", nested),
            "--on-fail: invalid JSON",
        ),
        (
            ("schedule", "create", "x", "--interval", "1h", "--prompt-file", str(binary)),
            "--prompt-file",
        ),
        (
            (
                "schedule",
                "create",
                "x",
                "--interval",
                "1h",
                "--prompt",
                "p",
                "--flow-yaml",
                str(binary),
            ),
            "--flow-yaml",
        ),
        (("run", "flow_yaml", str(binary)), "FILE"),
        (("run", "agent", "--model", "m", "--prompt-file", str(binary)), "--prompt-file"),
        (
            ("schedule", "create", "x", "--interval", "1h", "--prompt", "\udcff"),
            "the value of --prompt is not valid UTF-8",
        ),
        (("schedule", "show", "\udcff"), "argument 3 is not valid UTF-8"),
        (("usage", "report", "--input-tokens", "99999999999999999999999"), "--input-tokens"),
        (("usage", "report", "--cost-usd", "1e308"), "--cost-usd"),
    ]
    results = studio.run_many([Call(args, {"expect": None}) for args, _ in calls])
    for (args, needle), result in zip(calls, results, strict=True):
        assert result.code in (1, 2), (args, result.stderr)
        _assert_one_clean_line(result.error_line, needle)
    assert studio.schedule_names() == []
