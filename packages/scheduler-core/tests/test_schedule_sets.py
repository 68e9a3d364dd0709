"""ScheduleSet documents checked without a database: real files in ``tmp_path``, the real
loader, the schedule validation create applies, the launcher's allow-list.

No database: these tests read files only (they run with the ``sqlite`` selection).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from studio_scheduler_core import (
    SchedulerError,
    SchedulerSettings,
    ScheduleSetReport,
    ScheduleSetUnreadable,
    ScheduleValidationError,
    parse_duration,
    validate_schedule_sets,
)
from studio_scheduler_core._schedules.sets.loader import (
    FastSetLoader,
    SetLoader,
    parse_document,
    read_document,
)
from studio_scheduler_core.testing import SET_HEADER, T0, member_document, write_file

SETTINGS = SchedulerSettings(command_allowlist=("echo", "python3"))

EVERY_KIND = """\
apiVersion: studio/v1
kind: ScheduleSet
metadata: {name: Nightly jobs, owner: team-a}
schedules:
  build:
    description: the nightly build
    trigger:
      cron: {expression: "0 3 * * *", timezone: Europe/Paris}
    command: {argv: [echo, build, --fast], cwd: work}
    retry: {max_attempts: 3, backoff_sec: 90s, max_backoff_sec: 1h}
    timeout_sec: 2h
    notify: {deliver_to: ops, on: [failed, disabled]}
    on_fail:
      command_args: [cleanup]
      retry: {max_attempts: 2, backoff_sec: 1m}
  triage:
    enabled: false
    trigger: {every: 15m}
    agent: {agent: triager, prompt: look at the queue}
    jitter_sec: 30s
    overlap_policy: buffer_one
  launch:
    trigger: {at: "2027-01-05T09:00:00+01:00"}
    playbook: {name: release, prompt: ship it}
  prs:
    trigger:
      github: {repo: octo/app, filter: {event: pr_opened}, poll_interval_sec: 5m}
    flow: {model: gpt-x, prompt: review}
  alarm:
    trigger:
      threshold: {metric: failed_runs, op: gte, value: 3, window_minutes: 1h, every: 5m}
    flow: {model: gpt-x, fanout: true, prompt: investigate}
    max_runs: 10
  inline:
    trigger:
      threshold:
        metric: dead_letters
        op: gt
        value: 0
        window_minutes: 30
        cron: {expression: "*/10 * * * *", timezone: UTC}
    flow: {yaml: "steps: [a, b]\\n"}
"""


def check(*paths: Path | str, settings: SchedulerSettings = SETTINGS) -> ScheduleSetReport:
    return validate_schedule_sets(list(paths), settings=settings, now=T0)


def paths_of(report: ScheduleSetReport) -> list[str]:
    return [p.path for p in report.problems]


def test_every_trigger_and_action_kind_resolves(tmp_path: Path) -> None:
    (tmp_path / "sets" / "work").mkdir(parents=True)
    path = write_file(tmp_path / "sets", "a.yaml", EVERY_KIND)
    report = check(path)
    assert report.ok, [str(p) for p in report.problems]
    by = {m.member: m for m in report.members}
    assert list(by) == ["build", "triage", "launch", "prs", "alarm", "inline"]
    assert {m.owner for m in report.members} == {"team-a"}
    assert {m.source for m in report.members} == {str(path)}

    build = by["build"].fields
    assert by["build"].name == "team-a/build" and build["name"] == "team-a/build"
    assert (build["trigger_type"], build["cron_expr"], build["timezone"]) == (
        "cron",
        "0 3 * * *",
        "Europe/Paris",
    )
    assert build["action_kind"] == "command"
    assert (build["action_command"], build["action_command_args"]) == ("echo", ["build", "--fast"])
    assert build["action_cwd"] == str((tmp_path / "sets" / "work").resolve())
    assert build["retry"]["backoff_sec"] == 90 and build["retry"]["max_backoff_sec"] == 3600
    assert build["timeout_sec"] == 7200
    assert build["notify"]["on"] == ["failed", "disabled"]
    assert build["on_fail"]["retry"]["backoff_sec"] == 60
    assert build["enabled"] is True

    triage = by["triage"].fields
    assert (triage["trigger_type"], triage["interval_sec"]) == ("interval", 900)
    assert (triage["action_kind"], triage["action_agent"]) == ("agent", "triager")
    assert triage["enabled"] is False and triage["jitter_sec"] == 30

    launch = by["launch"].fields
    assert (launch["trigger_type"], launch["at"]) == ("at", "2027-01-05T09:00:00+01:00")
    assert launch["interval_sec"] is None
    assert (launch["action_kind"], launch["action_playbook"]) == ("play", "release")

    prs = by["prs"].fields
    assert (prs["trigger_type"], prs["github_repo"], prs["poll_interval_sec"]) == (
        "github_poll",
        "octo/app",
        300,
    )
    assert prs["github_filter"] == {"event": "pr_opened"}
    assert (prs["action_kind"], prs["action_model"]) == ("flow", "gpt-x")

    alarm = by["alarm"].fields
    assert (alarm["trigger_type"], alarm["interval_sec"]) == ("interval", 300)
    assert alarm["threshold_config"] == {
        "metric": "failed_runs",
        "op": "gte",
        "value": 3,
        "window_minutes": 60,
    }
    assert alarm["action_kind"] == "fanout" and alarm["max_runs"] == 10

    inline = by["inline"].fields
    assert (inline["trigger_type"], inline["cron_expr"]) == ("cron", "*/10 * * * *")
    assert inline["threshold_config"]["window_minutes"] == 30
    assert (inline["action_kind"], inline["action_flow_yaml"]) == ("flow_yaml", "steps: [a, b]\n")


def test_digest_is_sha256_of_canonical_fields_and_follows_behaviour(tmp_path: Path) -> None:
    body = "trigger: {every: 1h}\ncommand: {argv: [echo, hi], cwd: /}\n"
    first = check(write_file(tmp_path / "a", "s.yaml", member_document(body))).members[0]
    canonical = json.dumps(first.fields, sort_keys=True, separators=(",", ":"))
    assert first.digest == hashlib.sha256(canonical.encode()).hexdigest()
    # the same behaviour written differently (seconds instead of a duration): same digest
    same = check(write_file(tmp_path / "b", "s.yaml", member_document(body.replace("1h", "3600"))))
    assert same.members[0].digest == first.digest
    changed = check(write_file(tmp_path / "c", "s.yaml", member_document(body.replace("hi", "ho"))))
    assert changed.members[0].digest != first.digest


def test_every_problem_is_reported_at_once_with_its_path(tmp_path: Path) -> None:
    text = f"""{SET_HEADER}metadata: {{name: team-a, colour: red}}
schedules:
  nightly:
    trigger:
      crn: {{expression: "0 3 * * *"}}
    command: {{argv: "echo hi"}}
    timeoutSec: 5
  weekly:
    trigger:
      cron: {{expression: "0 3 * *", timezone: Mars/Olympus}}
    command: {{argv: [rm, -rf, /tmp/x], cwd: /}}
    retry: {{max_attempts: 99}}
    max_runs: 0
    notify: {{deliver_to: ops, on: [sometimes]}}
    on_success: {{command_args: [x], colour: red}}
  Bad_Name:
    trigger: {{every: 1h}}
  both:
    trigger: {{every: 90x, at: "2027-01-05T09:00:00"}}
    command: {{argv: [echo]}}
    agent: {{prompt: hi}}
"""
    report = check(write_file(tmp_path, "set.yaml", text))
    assert not report.ok and report.members == ()
    assert paths_of(report) == [
        "metadata.colour",
        "schedules.Bad_Name",
        "schedules.nightly.timeoutSec",
        "schedules.nightly.trigger.crn",
        "schedules.nightly.command.argv",
        "schedules.weekly.trigger.cron.timezone",
        "schedules.weekly.trigger.cron.expression",
        "schedules.weekly.max_runs",
        "schedules.weekly.retry.max_attempts",
        "schedules.weekly.command.argv",
        "schedules.weekly.on_success.colour",
        "schedules.weekly.notify.on",
        "schedules.both.trigger",
        "schedules.both",
    ]
    lines = [str(p) for p in report.problems]
    assert all(line.startswith(f"{tmp_path / 'set.yaml'}: ") for line in lines)
    assert "snake_case: timeout_sec" in lines[2]
    assert "never a shell string" in lines[4]
    assert "unknown time zone 'Mars/Olympus'" in lines[5]
    assert "'rm' is not on the command allow-list" in lines[9]
    assert all("\n" not in line for line in lines)


def test_on_off_yes_no_stay_strings(tmp_path: Path) -> None:
    assert parse_document("a: on\nb: off\nc: yes\nd: no\non: [true, False]\n", "x") == {
        "a": "on",
        "b": "off",
        "c": "yes",
        "d": "no",
        "on": [True, False],
    }
    # notify's `on` key is read as the key, and `enabled: on` is a string the check refuses
    body = (
        "trigger: {every: 1h}\ncommand: {argv: [echo], cwd: /}\n"
        "description: yes\nnotify: {deliver_to: ops, on: [failed]}\nenabled: on\n"
    )
    report = check(write_file(tmp_path, "s.yaml", member_document(body)))
    assert [str(p).split(": ", 1)[1] for p in report.problems] == [
        "schedules.job.enabled: must be a boolean, got 'on'"
    ]
    fixed = check(write_file(tmp_path, "s.yaml", member_document(body.replace("enabled: on", ""))))
    assert fixed.ok
    fields = fixed.members[0].fields
    assert fields["description"] == "yes" and fields["notify"]["on"] == ["failed"]


SCALARS = (
    "a: on\nb: off\nc: yes\nd: no\ne: On\nf: YES\ng: y\nh: n\non: [true, False, TRUE]\n"
    "at: 2027-01-05T09:00:00+01:00\nday: 2027-01-05\nn: 010\nm: 12\nx: 0x1F\no: 0o17\n"
    "s: 1_000\nf1: 1.5\nneg: -3\nnull1: ~\nnull2: null\ntext: 'a & b'\n"
)


def test_the_libyaml_loader_keeps_the_same_scalars() -> None:
    assert (FastSetLoader is not None) == yaml.__with_libyaml__
    assert FastSetLoader is not None, "PyYAML without libyaml: the fast path is not tested"
    fast = yaml.load(SCALARS, Loader=FastSetLoader)  # our safe loader
    assert fast == yaml.load(SCALARS, Loader=SetLoader)
    assert fast == parse_document(SCALARS, "x")
    assert {k: fast[k] for k in "abcdefgh"} == dict(
        zip("abcdefgh", ["on", "off", "yes", "no", "On", "YES", "y", "n"], strict=True)
    )
    assert fast["on"] == [True, False, True]
    assert (fast["at"], fast["day"], fast["n"], fast["x"], fast["o"], fast["s"]) == (
        "2027-01-05T09:00:00+01:00",
        "2027-01-05",
        "010",
        "0x1F",
        "0o17",
        "1_000",
    )
    assert (fast["m"], fast["f1"], fast["neg"], fast["null1"], fast["null2"]) == (
        12,
        1.5,
        -3,
        None,
        None,
    )
    assert fast["text"] == "a & b"


def test_the_libyaml_loader_refuses_what_the_python_loader_refuses() -> None:
    # libyaml's composer takes aliases: the fast path finds the shared node, and the error is
    # the pure-Python loader's, line and column included.
    for text, words, where in [
        ("a: &x [1]\nb: *x\n", "aliases (*name) are not accepted", (2, 4)),
        ("a: 1\nb: {c: 1, c: 2}\n", "duplicate key 'c'", (2, 11)),
        ("a: [1\n", "malformed YAML", (2, 1)),
    ]:
        with pytest.raises(ScheduleSetUnreadable) as caught:
            parse_document(text, "x")
        assert words in caught.value.message, text
        assert (caught.value.line, caught.value.column) == where, text


def test_timestamps_stay_text_and_integers_are_decimal() -> None:
    doc = parse_document("at: 2027-01-05T09:00:00+01:00\nn: 010\nm: 12\nf: 1.5\n", "x")
    assert doc == {"at": "2027-01-05T09:00:00+01:00", "n": "010", "m": 12, "f": 1.5}


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1d", 86400),
        (45, 45),
        (" 5m ", 300),
        (0, 0),
        ("60", 60),
    ],
)
def test_durations_parse(value: Any, seconds: int) -> None:
    assert parse_duration("timeout_sec", value) == seconds


@pytest.mark.parametrize("value", ["5x", "1.5h", "-1s", "1h30m", 1.5, True, -5, "", None, 10**20])
def test_bad_durations_name_the_field(value: Any) -> None:
    with pytest.raises(ScheduleValidationError) as caught:
        parse_duration("timeout_sec", value)
    assert caught.value.field == "timeout_sec"


def test_duration_fields_keep_their_bounds(tmp_path: Path) -> None:
    body = (
        "trigger: {every: 400d}\ncommand: {argv: [echo], cwd: /}\n"
        "timeout_sec: 8d\ncatchup_window_sec: 1h\njitter_sec: 0\n"
    )
    report = check(write_file(tmp_path, "s.yaml", member_document(body)))
    assert paths_of(report) == ["schedules.job.trigger.every", "schedules.job.timeout_sec"]
    assert "between 1 and 31622400" in str(report.problems[0])


def test_relative_cwd_resolves_against_the_documents_folder(tmp_path: Path) -> None:
    (tmp_path / "repo" / "tools").mkdir(parents=True)
    body = "trigger: {every: 1h}\ncommand: {argv: [echo], cwd: ../tools}\n"
    path = write_file(tmp_path / "repo" / "sets", "s.yaml", member_document(body))
    report = check(path)
    assert report.ok
    assert report.members[0].fields["action_cwd"] == str(tmp_path / "repo" / "tools")
    missing = check(write_file(tmp_path / "other" / "sets", "s.yaml", member_document(body)))
    assert paths_of(missing) == ["schedules.job.command.cwd"]
    assert "is not an existing directory" in str(missing.problems[0])
    assert str(tmp_path / "other" / "tools") in str(missing.problems[0])


def test_unknown_zone_bad_cron_and_missing_zone(tmp_path: Path) -> None:
    cases = {
        "cron: {expression: '0 3 * * *', timezone: Nowhere/City}": "unknown time zone",
        "cron: {expression: '61 3 * * *', timezone: UTC}": "",
        "cron: {expression: '0 3 30 2 *', timezone: UTC}": "",
        "cron: {expression: '0 3 * * *'}": "is required",
    }
    for trigger, words in cases.items():
        body = f"trigger:\n  {trigger}\ncommand: {{argv: [echo], cwd: /}}\n"
        report = check(write_file(tmp_path, "s.yaml", member_document(body)))
        assert len(report.problems) == 1, (trigger, report.problems)
        assert report.problems[0].path.startswith("schedules.job.trigger.cron."), trigger
        assert words in report.problems[0].message


def test_command_must_be_on_the_allow_list(tmp_path: Path) -> None:
    body = "trigger: {every: 1h}\ncommand: {argv: [curl, example.org], cwd: /}\n"
    path = write_file(tmp_path, "s.yaml", member_document(body))
    report = check(path)
    assert paths_of(report) == ["schedules.job.command.argv"]
    assert "'curl' is not on the command allow-list" in report.problems[0].message
    allowed = check(path, settings=SchedulerSettings(command_allowlist=("curl",)))
    assert allowed.ok and allowed.members[0].fields["action_command"] == "curl"


def test_at_needs_an_offset_and_a_future_instant(tmp_path: Path) -> None:
    cmd = "command: {argv: [echo], cwd: /}\n"
    naive = check(
        write_file(tmp_path, "s.yaml", member_document("trigger: {at: '2027-01-05T09:00'}\n" + cmd))
    )
    assert paths_of(naive) == ["schedules.job.trigger.at"]
    assert "explicit offset" in naive.problems[0].message
    past = member_document("trigger: {at: '2020-01-05T09:00:00Z'}\n" + cmd)
    # validation sees no rows: whether a past instant is new (refused) or already applied
    # (a one-shot that fired, kept in its file) is the plan's to say
    report = check(write_file(tmp_path, "s.yaml", past))
    assert report.ok and report.members[0].past_at == "schedules.job.trigger.at"
    run_once = past + "    missed_fire_policy: run_once\n"
    fine = check(write_file(tmp_path, "s.yaml", run_once))
    assert fine.ok and fine.members[0].past_at is None


def test_two_files_with_one_owner_and_folders(tmp_path: Path) -> None:
    body = "trigger: {every: 1h}\ncommand: {argv: [echo], cwd: /}\n"
    folder = tmp_path / "sets"
    b = write_file(folder, "b.yml", member_document(body, owner="team-b"))
    a = write_file(folder, "a.yaml", member_document(body, owner="team-a"))
    write_file(folder, "notes.txt", "not a set")
    report = check(folder)
    assert report.files == (str(a), str(b))
    assert [m.name for m in report.members] == ["team-a/job", "team-b/job"]

    again = write_file(tmp_path / "more", "c.yaml", member_document(body, owner="team-a"))
    clash = check(folder, again)
    assert [str(p) for p in clash.problems] == [
        f"{again}: metadata.name: owner 'team-a' is already declared by {a}"
    ]
    assert clash.members == ()


def test_files_that_cannot_be_read_are_one_line_each(tmp_path: Path) -> None:
    bad = write_file(tmp_path, "bad.yaml", f"{SET_HEADER}metadata: {{name: x}}\nschedules: [a\n")
    dup = write_file(tmp_path, "dup.yaml", f"{SET_HEADER}metadata: {{name: y}}\nkind: again\n")
    alias = write_file(tmp_path, "alias.yaml", "a: &x [1]\nb: *x\n")
    report = check(bad, dup, alias, tmp_path / "missing.yaml", tmp_path / "empty")
    lines = [str(p) for p in report.problems]
    assert lines[0] == f"{tmp_path / 'missing.yaml'}: no such file or folder"
    assert lines[1] == f"{tmp_path / 'empty'}: no such file or folder"
    assert lines[2].startswith(f"{bad}:5:1: malformed YAML")
    assert lines[3] == f"{dup}:4:1: malformed YAML: duplicate key 'kind'"
    assert lines[4].startswith(f"{alias}:2:4: malformed YAML: aliases")
    with pytest.raises(ScheduleSetUnreadable) as caught:
        read_document(bad)
    assert isinstance(caught.value, SchedulerError)
    assert (caught.value.line, caught.value.column) == (5, 1)


def test_document_level_errors(tmp_path: Path) -> None:
    text = "apiVersion: studio/v2\nkind: Schedules\nmetadata: {name: 'Team A'}\nschedules: []\n"
    report = check(write_file(tmp_path, "s.yaml", text))
    assert paths_of(report) == ["apiVersion", "kind", "metadata.name", "schedules"]
    listed = check(write_file(tmp_path, "t.yaml", "- a\n- b\n"))
    assert "must be a mapping" in listed.problems[0].message


def test_action_refusals_name_the_key_of_the_block(tmp_path: Path) -> None:
    cases = {
        "flow: {prompt: hi}": "schedules.job.flow.model",
        "playbook: {prompt: hi}": "schedules.job.playbook.name",
        "flow: {yaml: 'x: 1', model: m}": "schedules.job.flow.yaml",
        "flow: {yaml: '[1, 2]'}": "schedules.job.flow.yaml",
        "command: {argv: []}": "schedules.job.command.argv",
        "command: {argv: [echo], shell: true}": "schedules.job.command.shell",
        "agent: {prompt: hi, cwd: 5}": "schedules.job.agent.cwd",
        "agent: hi": "schedules.job.agent",
    }
    for action, where in cases.items():
        report = check(
            write_file(tmp_path, "s.yaml", member_document(f"trigger: {{every: 1h}}\n{action}\n"))
        )
        assert paths_of(report) == [where], (action, [str(p) for p in report.problems])


def test_limits_of_a_document(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (10 * 1024 * 1024))
    (tmp_path / "empty").mkdir()
    many = ", ".join(f"m{i}: {{}}" for i in range(10_001))
    crowded = write_file(
        tmp_path, "many.yaml", f"{SET_HEADER}metadata: {{name: x}}\nschedules: {{{many}}}\n"
    )
    report = check(huge, tmp_path / "empty", crowded)
    assert [str(p) for p in report.problems] == [
        f"{tmp_path / 'empty'}: holds no *.yaml or *.yml file",
        f"{huge}: is 10485760 bytes; a document must be smaller than 10485760",
        f"{crowded}: schedules: holds 10001 members; a document holds at most 10000",
    ]


def _crowded(form: str, members: int, last: str) -> str:
    if form == "yaml":
        many = ", ".join([*(f"m{i}: {{a: 1}}" for i in range(members)), last])
        return f"{SET_HEADER}metadata: {{name: x}}\nschedules: {{{many}}}\n"
    many = ", ".join([*(f'"m{i}": {{"a": 1}}' for i in range(members)), last])
    return '{"apiVersion": "studio/v1", "schedules": {' + many + "}}"


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_too_many_members_is_refused_before_a_member_is_read(form: str) -> None:
    # YAML: the last member repeats a key, so constructing it is a duplicate-key error (and
    # validating the others one error each); with one member too many the count, checked on
    # the composed nodes, comes first. JSON is parsed in one call and counted after it.
    last = "last: {a: 1, a: 2}" if form == "yaml" else '"last": {"a": 1}'
    with pytest.raises(ScheduleSetUnreadable) as caught:
        parse_document(_crowded(form, 10_000, last), "x")
    assert caught.value.path == "schedules"
    assert caught.value.message == "holds 10001 members; a document holds at most 10000"
    if form == "yaml":
        with pytest.raises(ScheduleSetUnreadable) as within:
            parse_document(_crowded(form, 9_999, last), "x")
        assert "duplicate key 'a'" in within.value.message
    else:
        assert len(parse_document(_crowded(form, 9_999, last), "x")["schedules"]) == 10_000
