"""The schedule sets' values are records: past the parse of a document's text, a member is the
``Schedule`` it stands for, a running run a forced prune cancels is a ``RunToCancel``, and the
JSON bodies and the exported document have their shapes.

The ratchet here is the sets' own (``test_records_values`` lists the folder as the document
boundary and does not count it): no ``dict[str, Any]`` in ``_schedules/sets``.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from studio_scheduler_core import Schedule, SchedulerSettings, validate_schedule_sets
from studio_scheduler_core._records.column import create_fields
from studio_scheduler_core._schedules.sets import blocks, cancel, export, records, shapes, store
from studio_scheduler_core.testing import T0, member_document, write_file

SETS = Path(records.__file__).parent
SETTINGS = SchedulerSettings(command_allowlist=("echo",))


def test_the_set_modules_hold_no_dict_str_any() -> None:
    sites = [
        f"{path.name}:{number}"
        for path in sorted(SETS.glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"(dict|Dict|Mapping)\[str, Any\]", line)
    ]
    assert sites == []


def test_a_resolved_member_is_the_schedule_it_stands_for(tmp_path: Path) -> None:
    body = (
        "trigger: {cron: {expression: '0 3 * * *', timezone: UTC}}\n"
        "command: {argv: [echo, hi, there]}\nbudget_usd: 2\nretry: {max_attempts: 2}\n"
    )
    path = write_file(tmp_path, "s.yaml", member_document(body))
    report = validate_schedule_sets([path], settings=SETTINGS, now=T0)
    assert report.ok, [str(p) for p in report.problems]
    (member,) = report.members
    schedule = member.schedule
    assert isinstance(schedule, Schedule)
    assert (schedule.name, schedule.trigger_type, schedule.cron_expr) == (
        member.name,
        "cron",
        "0 3 * * *",
    )
    assert schedule.action_command_args == ("hi", "there")
    assert schedule.budget_usd == 2.0 and schedule.retry is not None
    assert schedule.retry["max_attempts"] == 2
    # not stored: no id, and the set's bookkeeping is the apply's to write
    assert (schedule.id, schedule.owner_key, schedule.set_digest) == ("", None, None)
    assert member.digest == schedule.digest
    assert list(member.fields) == list(create_fields(Schedule))
    assert member.fields["action_command_args"] == ["hi", "there"]


def test_the_reads_and_bodies_are_typed() -> None:
    def returns(func: object) -> object:
        return typing.get_type_hints(func)["return"]

    assert returns(store.running_runs) == list[store.RunToCancel]
    assert returns(cancel.CancelledRun.to_row) is cancel.RunProcess
    assert returns(records.ScheduleSetProblem.to_json) is records.ProblemJson
    assert returns(records.ScheduleSetChange.to_json) is records.ChangeJson
    assert returns(records.ScheduleSetPlan.to_json) is records.PlanJson
    assert typing.get_type_hints(export.ScheduleSetExport)["document"] is export.ExportedDocument


def test_the_reader_takes_each_trigger_block_s_keys_from_its_shape() -> None:
    assert blocks.TRIGGER_KINDS == ("cron", "every", "at", "github", "threshold")
    assert shapes.keys(shapes.CronBlock) == ("expression", "timezone")
    assert shapes.keys(shapes.GithubBlock) == ("repo", "filter", "poll_interval_sec")
    assert shapes.keys(shapes.ThresholdBlock) == (
        "metric",
        "op",
        "value",
        "window_minutes",
        "every",
        "cron",
    )
