"""``studio schedule validate FILE…`` as a real subprocess: ScheduleSet documents on disk, the
allow-list from the environment the server reads, exit 0/1, one stderr line per problem,
``--json``. No database is opened (the files alone are judged)."""

from __future__ import annotations

from pathlib import Path

from conftest import Studio

from studio_scheduler_core.testing import write_file

ALLOW = {"LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "echo"}

GOOD = """\
apiVersion: studio/v1
kind: ScheduleSet
metadata: {name: team-a}
schedules:
  nightly:
    trigger:
      cron: {expression: "0 3 * * *", timezone: Europe/Paris}
    command: {argv: [echo, hi], cwd: .}
    retry: {max_attempts: 2, backoff_sec: 90s}
    notify: {deliver_to: ops, on: [failed]}
  hourly:
    trigger: {every: 1h}
    agent: {prompt: look around}
"""

BAD = """\
apiVersion: studio/v1
kind: ScheduleSet
metadata: {name: team-b}
schedules:
  nightly:
    trigger:
      crn: {expression: "0 3 * * *"}
    command: {argv: [curl, example.org], cwd: ./missing}
  later:
    trigger: {every: soon}
    agent: {prompt: hi}
    timeoutSec: 60
"""


def test_a_valid_set_exits_0_and_names_each_schedule(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    folder = tmp_path / "sets"
    write_file(folder, "a.yaml", GOOD)
    result = studio.run("schedule", "validate", str(folder), env=ALLOW)
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"ok team-a/nightly ({folder / 'a.yaml'}) ")
    assert lines[1].startswith("ok team-a/hourly ")
    assert lines[-1] == "2 schedule(s) in 1 file(s) are valid."

    document = studio.ok_json("schedule", "validate", str(folder / "a.yaml"), env=ALLOW)
    assert document["ok"] is True and document["errors"] == []
    nightly = document["members"][0]
    assert (nightly["owner"], nightly["member"], nightly["name"]) == (
        "team-a",
        "nightly",
        "team-a/nightly",
    )
    assert len(nightly["digest"]) == 64
    assert nightly["fields"]["action_cwd"] == str(folder.resolve())
    assert nightly["fields"]["retry"]["backoff_sec"] == 90
    assert nightly["fields"]["notify"]["on"] == ["failed"]


def test_every_problem_is_one_stderr_line_and_exit_1(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    good = write_file(tmp_path / "sets", "a.yaml", GOOD)
    bad = write_file(tmp_path / "sets", "b.yaml", BAD)
    clash = write_file(tmp_path / "more", "c.yml", GOOD)
    result = studio.run(
        "schedule", "validate", str(tmp_path / "sets"), str(clash), env=ALLOW, expect=1
    )
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{bad}: schedules.nightly.trigger.crn: unknown key "
        "(allowed: cron, every, at, github, threshold)",
        f"{bad}: schedules.nightly.command.argv: 'curl' is not on the command allow-list "
        "(LIONAGI_SCHEDULER_COMMAND_ALLOWLIST allows: echo); to allow it, set "
        "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST=echo,curl where the server runs (and for the "
        "studio CLI that creates schedules)",
        f"{bad}: schedules.nightly.command.cwd: "
        f"{str(tmp_path / 'sets' / 'missing')!r} is not an existing directory",
        f"{bad}: schedules.later.timeoutSec: unknown key (fields are snake_case: timeout_sec)",
        f"{bad}: schedules.later.trigger.every: must be whole seconds (an integer) or a "
        "duration such as '90s', '15m', '2h', '1d', got 'soon'",
        f"{clash}: metadata.name: owner 'team-a' is already declared by {good}",
    ]


def test_json_reports_errors_too_and_exits_1(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    bad = write_file(tmp_path, "b.yaml", BAD)
    result = studio.run("schedule", "validate", "--json", str(bad), env=ALLOW, expect=1)
    document = result.json()
    assert document["ok"] is False and document["members"] == []
    assert [e["path"] for e in document["errors"]] == [
        "schedules.nightly.trigger.crn",
        "schedules.nightly.command.argv",
        "schedules.nightly.command.cwd",
        "schedules.later.timeoutSec",
        "schedules.later.trigger.every",
    ]
    assert len(result.stderr.splitlines()) == 5


def test_unreadable_files_and_the_default_allow_list(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    broken = write_file(tmp_path, "broken.yaml", "apiVersion: studio/v1\nschedules: [a\n")
    result = studio.run("schedule", "validate", str(broken), str(tmp_path / "nope"), expect=1)
    lines = result.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0] == f"{tmp_path / 'nope'}: no such file or folder"
    assert lines[1].startswith(f"{broken}:3:1: malformed YAML: ")
    # without the variable the server refuses every command: so does validate
    good = write_file(tmp_path / "sets", "a.yaml", GOOD)
    refused = studio.run("schedule", "validate", str(good), expect=1)
    assert refused.stderr.splitlines() == [
        f"{good}: schedules.nightly.command.argv: 'echo' is not on the command allow-list "
        "(LIONAGI_SCHEDULER_COMMAND_ALLOWLIST allows: nothing (every command is refused)); "
        "to allow it, set LIONAGI_SCHEDULER_COMMAND_ALLOWLIST=echo where the server runs (and "
        "for the studio CLI that creates schedules)"
    ]


def test_no_arguments_is_a_usage_error(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    result = studio.run("schedule", "validate", expect=2)
    assert "FILE" in result.stderr and len(result.stderr.splitlines()) == 1
