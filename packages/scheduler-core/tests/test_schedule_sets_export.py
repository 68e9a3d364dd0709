"""Export of stored schedules as a ScheduleSet document: apply accepts it unchanged (every
trigger and action kind, follow-ups, policies, retry and notify), and what a document cannot
express is listed per schedule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio_scheduler_core import (
    SchedulerSettings,
    ScheduleService,
    export_schedule_set,
    validate_schedule_sets,
)
from studio_scheduler_core.testing import PY, apply_set_files
from studio_state import ManualClock

EVERY_KIND = f"""\
apiVersion: studio/v1
kind: ScheduleSet
metadata: {{name: Nightly jobs, owner: team-a}}
schedules:
  build:
    description: the nightly build
    trigger:
      cron: {{expression: "0 3 * * *", timezone: Europe/Paris}}
    command: {{argv: [{PY}, -c, "print('build')"], cwd: work}}
    retry: {{max_attempts: 3, backoff_sec: 90s, max_backoff_sec: 1h}}
    timeout_sec: 2h
    catchup_window_sec: 1h
    pause_on_failure: true
    notify: {{deliver_to: ops, on: [failed, disabled]}}
    on_fail:
      command_args: [-c, "print('cleanup')"]
      retry: {{max_attempts: 2, backoff_sec: 1m}}
    on_success:
      command_args: [-c, "print('done')"]
  triage:
    enabled: false
    trigger: {{every: 15m}}
    agent: {{agent: triager, prompt: look at the queue, model: m-1, extra_args: [fast]}}
    jitter_sec: 30s
    overlap_policy: buffer_one
    budget_usd: 5
    budget_tokens: 100000
  launch:
    trigger: {{at: "2027-01-05T09:00:00+01:00"}}
    playbook: {{name: release, prompt: ship it}}
  prs:
    trigger:
      github: {{repo: octo/app, filter: {{event: pr_opened}}, poll_interval_sec: 5m}}
    flow: {{model: gpt-x, prompt: review}}
  alarm:
    trigger:
      threshold: {{metric: failed_runs, op: gte, value: 3, window_minutes: 1h, every: 5m}}
    flow: {{model: gpt-x, fanout: true, prompt: investigate}}
    max_runs: 10
  inline:
    trigger:
      threshold:
        metric: dead_letters
        op: gt
        value: 0
        window_minutes: 30
        cron: {{expression: "*/10 * * * *", timezone: UTC}}
    flow: {{yaml: "steps: [a, b]\\n"}}
"""


async def _apply(
    conn: Any, settings: SchedulerSettings, clock: ManualClock, path: Path
) -> tuple[int, set[str]]:
    plan, applied = await apply_set_files(conn, [path], settings=settings, clock=clock)
    return applied.writes, {c.action for c in plan.changes}


async def test_export_round_trips_every_kind(
    conn: Any, settings: SchedulerSettings, clock: ManualClock, tmp_path: Path
) -> None:
    (tmp_path / "work").mkdir()
    source = tmp_path / "set.yaml"
    source.write_text(EVERY_KIND)
    writes, _ = await _apply(conn, settings, clock, source)
    assert writes == 6

    exported = await export_schedule_set(conn, owner="team-a", timezone=settings.timezone)
    assert exported.notes == {}
    assert list(exported.document["schedules"]) == [
        "build",
        "triage",
        "launch",
        "prs",
        "alarm",
        "inline",
    ]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = elsewhere / "exported.yaml"
    again.write_text(exported.to_yaml())
    writes, seen = await _apply(conn, settings, clock, again)
    assert (writes, seen) == (0, {"unchanged"})


async def test_export_lists_what_a_document_cannot_express(
    conn: Any,
    settings: SchedulerSettings,
    clock: ManualClock,
    service: ScheduleService,
    tmp_path: Path,
) -> None:
    await service.create(
        {
            "name": "Nightly Report",
            "trigger_type": "cron",
            "cron_expr": "0 4 * * *",
            "action_kind": "command",
            "action_command": PY,
            "action_command_args": ["-c", "pass"],
        }
    )
    exported = await export_schedule_set(conn, owner=None, timezone="UTC", name="legacy")
    assert exported.owner == "legacy"
    (member,) = exported.document["schedules"]
    assert member == "nightly-report"
    notes = exported.notes["Nightly Report"]
    assert any(n.startswith("timezone: unset") for n in notes)
    assert any("legacy/nightly-report" in n for n in notes)
    text = exported.to_yaml()
    assert "# Nightly Report: timezone: unset" in text
    path = tmp_path / "legacy.yaml"
    path.write_text(text)
    report = validate_schedule_sets([path], settings=settings, now=clock())
    assert report.ok, [str(p) for p in report.problems]
    assert report.members[0].name == "legacy/nightly-report"


def test_a_json_document_is_read_with_the_same_rules() -> None:
    from studio_scheduler_core import validate_schedule_set_text

    settings = SchedulerSettings(command_allowlist=("true",))
    body = (
        '{"apiVersion": "studio/v1", "kind": "ScheduleSet", "metadata": {"name": "j"},\n'
        ' "schedules": {"a": {"trigger": {"every": "5m"}, "command": {"argv": ["true"]}}}}'
    )
    report = validate_schedule_set_text(body, source="body", base_dir="/", settings=settings)
    assert report.ok and report.members[0].fields["interval_sec"] == 300
    broken = validate_schedule_set_text(
        body[:-3] + ",}", source="body", base_dir="/", settings=settings
    )
    (problem,) = broken.problems
    assert (problem.line, problem.message.startswith("malformed JSON")) == (2, True)
    twice = validate_schedule_set_text(
        '{"kind": "ScheduleSet", "kind": "x"}', source="body", base_dir="/", settings=settings
    )
    assert "duplicate key 'kind'" in twice.problems[0].message
    nan = validate_schedule_set_text('{"a": NaN}', source="body", base_dir="/", settings=settings)
    assert "NaN" in nan.problems[0].message
