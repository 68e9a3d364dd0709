"""``studio schedule validate FILE…``: check ``ScheduleSet`` documents without a database.

Files and folders (a folder's ``*.yaml``/``*.yml`` files, in name order) are checked together:
every problem is printed on stderr, one line each (``FILE: PATH: message``), exit 1; a valid
set prints one line per member and exits 0. The command allow-list and the registered projects
come from the settings the server reads.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from .._context import scheduler_settings
from .._errors import EXIT_ERROR, one_line
from .._output import emit_json, say
from ._common import json_option

if TYPE_CHECKING:
    from studio_scheduler_core import ScheduleSetReport


def _report_json(report: ScheduleSetReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "files": list(report.files),
        "members": [
            {
                "owner": m.owner,
                "member": m.member,
                "name": m.name,
                "digest": m.digest,
                "file": m.source,
                "fields": dict(m.fields),
            }
            for m in report.members
        ],
        "errors": [p.to_json() for p in report.problems],
    }


@click.command("validate")
@click.argument("paths", metavar="FILE…", nargs=-1, required=True)
@json_option
def validate(paths: tuple[str, ...], as_json: bool) -> None:
    """Check ScheduleSet documents (files, or folders of *.yaml/*.yml) without a database.

    Every problem is reported at once, one line each on stderr, and the command exits 1;
    --json also prints the whole report (members with their digests, errors) on stdout.
    """
    from studio_scheduler_core import validate_schedule_sets

    report = validate_schedule_sets(paths, settings=scheduler_settings())
    if as_json:
        emit_json(_report_json(report))
    elif report.ok:
        for member in report.members:
            say(f"ok {member.name} ({member.source}) {member.digest[:12]}")
        say(f"{len(report.members)} schedule(s) in {len(report.files)} file(s) are valid.")
    if not report.ok:
        for problem in report.problems:
            sys.stderr.write(one_line(str(problem)) + "\n")
        sys.stderr.flush()
        sys.exit(EXIT_ERROR)
