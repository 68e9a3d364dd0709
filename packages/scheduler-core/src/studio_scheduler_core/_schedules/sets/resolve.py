"""Checking schedule-set files and folders without a database.

:func:`validate_schedule_sets` reads every document, walks its closed schema
(:mod:`.document`), runs the schedule validation of create on each member (the same checks
the API applies: allow-list, cwd, limits, policies, follow-ups, notify) and reports every
problem at once. A member's refusals are collected by validating it again without each refused
field, so that one bad field does not hide another.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

from ..._exceptions import ScheduleValidationError
from ..._records.schedule import Schedule, fields_digest, set_fields
from ..._records.vocab import MAX_INTERVAL_SEC
from ..._settings import SchedulerSettings
from ..trigger_rules import TRIGGER_FIELDS
from ..validation import normalize
from .blocks import Draft
from .document import DocumentDraft, walk
from .loader import MAX_DOCUMENT_BYTES, ScheduleSetUnreadable, parse_document, read_document
from .records import ScheduleSetMember, ScheduleSetProblem, ScheduleSetReport

SUFFIXES = (".yaml", ".yml")
"""The files a folder contributes (directly inside it, in name order)."""
_TRIGGER_COLUMNS = frozenset(
    {"trigger_type", "timezone", "threshold_config"}
    | {f for fields in TRIGGER_FIELDS.values() for f in fields}
)
_STAND_IN_TRIGGER = {"trigger_type": "interval", "interval_sec": MAX_INTERVAL_SEC}
_STAND_IN_ACTION = {"action_kind": "agent", "action_prompt": "-"}
_MAX_PASSES = 50


def _unstored(row: Mapping[str, object]) -> Schedule:
    """The record of a normalised input row before an apply stores it (no id, no times)."""
    return Schedule.from_row({**row, "id": "", "created_at": 0.0, "updated_at": 0.0})


def _path_of(draft: Draft, field: str) -> str:
    """The document path of a refused schedule field (``retry.backoff_sec`` …)."""
    head, _, rest = field.partition(".")
    base = draft.paths.get(head)
    if base is None:
        return f"{draft.prefix}.{field}"
    if not rest:
        return base
    return f"{base}.{rest}"


def _check(draft: Draft, name: str, settings: SchedulerSettings) -> Mapping[str, object] | None:
    """Validate the member as create would; report refusals not already reported.

    Returns the normalised input row, or ``None`` when the schedule validation refused
    anything.
    """
    data: dict[str, object] = {**draft.fields, "name": name}
    if "trigger" in draft.broken or draft.at is not None or data.get("trigger_type") == "at":
        for column in _TRIGGER_COLUMNS:
            data.pop(column, None)
        data.update(_STAND_IN_TRIGGER)
    if "action" in draft.broken:
        for column in [c for c in data if _part(c) in ("action", "follow-up")]:
            data.pop(column)
        data.update(_STAND_IN_ACTION)
    refused = False
    current = settings
    for _ in range(_MAX_PASSES):
        try:
            row = normalize(data, settings=current, now=draft.now)
        except ScheduleValidationError as exc:
            refused = True
            part = _part(exc.field)
            ignored = part in draft.broken or (part == "follow-up" and "action" in draft.broken)
            path = _path_of(draft, exc.field)
            if not ignored and not draft.reported(path):
                draft.fail(path, exc.message)
            command = data.get("action_command")
            if (
                part == "action"
                and isinstance(command, str)
                and command not in current.command_allowlist
            ):
                # Admit the refused command for the rest of the checks: the follow-ups (which
                # inherit it) are then judged on their own keys rather than set aside.
                allowlist = (*current.command_allowlist, command)
                current = dataclasses.replace(current, command_allowlist=allowlist)
                continue
            if not _set_aside(data, draft, part, exc.field.partition(".")[0]):
                return None
            continue
        if refused:
            return None
        if draft.at is not None:
            row.update({"trigger_type": "at", "at": draft.at, "interval_sec": None})
        return row
    return None


def _part(field: str) -> str:
    """Which part of a member a refused field belongs to."""
    head = field.partition(".")[0]
    if head in _TRIGGER_COLUMNS:
        return "trigger"
    if head.startswith("action_"):
        return "action"
    if head in ("on_success", "on_fail"):
        return "follow-up"
    return head


def _set_aside(data: dict[str, object], draft: Draft, part: str, head: str) -> bool:
    """Replace the refused part by a stand-in (or drop the refused field) so that validating
    again reaches the other fields; ``False`` when nothing can be set aside."""
    if part in ("trigger", "action") and part not in draft.broken:
        draft.broken.add(part)
        stand_in = _STAND_IN_TRIGGER if part == "trigger" else _STAND_IN_ACTION
        for column in [c for c in data if _part(c) == part]:
            data.pop(column)
        data.update(stand_in)
        if part == "action":
            data.pop("on_success", None)
            data.pop("on_fail", None)
        return True
    if part in ("trigger", "action", "name") or head not in data:
        return False
    del data[head]
    return True


def _files(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[tuple[str, Path]], list[str]]:
    """The files named (folders expanded) and the arguments that name nothing usable."""
    files: list[tuple[str, Path]] = []
    missing: list[str] = []
    seen: set[Path] = set()
    for given in paths:
        path = Path(given)
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
            if not inside:
                missing.append(f"{given}\0holds no *.yaml or *.yml file")
            found = [(str(p), p) for p in inside]
        elif path.is_file():
            found = [(str(given), path)]
        else:
            missing.append(f"{given}\0no such file or folder")
            found = []
        for label, file in found:
            key = file.resolve()
            if key not in seen:
                seen.add(key)
                files.append((label, file))
    return files, missing


def validate_schedule_sets(
    paths: Sequence[str | os.PathLike[str]],
    *,
    settings: SchedulerSettings,
    now: float | None = None,
) -> ScheduleSetReport:
    """Check the ``ScheduleSet`` documents in ``paths`` (files, and folders' ``*.yaml``/``*.yml``
    files in name order) without a database; report every problem at once.

    ``settings`` supplies the command allow-list, the registered projects and the default zone,
    as the server's; ``now`` (default: the wall clock) judges cron expressions that never fire
    and ``at`` instants in the past. An owner key declared by two files, and two members
    resolving to one schedule name, are problems too.
    """
    when = time.time() if now is None else now
    files, missing = _files(paths)
    problems: list[ScheduleSetProblem] = []
    for entry in missing:
        given, _, message = entry.partition("\0")
        problems.append(ScheduleSetProblem(file=given, path="", message=message))
    sources = [
        (label, partial(read_document, file, label), str(file.resolve().parent))
        for label, file in files
    ]
    return _check_documents(sources, problems, settings=settings, now=when)


def validate_schedule_set_text(
    text: str,
    *,
    source: str,
    base_dir: str,
    settings: SchedulerSettings,
    now: float | None = None,
) -> ScheduleSetReport:
    """Check one ``ScheduleSet`` document given as text (YAML, or JSON, which it reads too),
    as :func:`validate_schedule_sets` checks a file; ``source`` names it in problems and a
    relative ``cwd`` resolves against ``base_dir``. A text of :data:`MAX_DOCUMENT_BYTES` or
    more is refused before it is parsed."""
    when = time.time() if now is None else now
    size = len(text.encode("utf-8"))

    def read() -> Mapping[object, object]:
        if size >= MAX_DOCUMENT_BYTES:
            raise ScheduleSetUnreadable(
                source, f"is {size} bytes; a document must be smaller than {MAX_DOCUMENT_BYTES}"
            )
        return parse_document(text, source)

    return _check_documents([(source, read, base_dir)], [], settings=settings, now=when)


def _check_documents(
    sources: Sequence[tuple[str, Callable[[], Mapping[object, object]], str]],
    problems: list[ScheduleSetProblem],
    *,
    settings: SchedulerSettings,
    now: float,
) -> ScheduleSetReport:
    members: list[ScheduleSetMember] = []
    owners: dict[str, str] = {}
    declared: list[str] = []
    names: dict[str, str] = {}
    for label, read, base_dir in sources:
        try:
            document = read()
        except ScheduleSetUnreadable as exc:
            problems.append(
                ScheduleSetProblem(
                    file=label,
                    path=exc.path,
                    message=exc.message,
                    line=exc.line,
                    column=exc.column,
                )
            )
            continue
        doc = walk(document, source=label, base_dir=base_dir, now=now)
        claimed = _claim_owner(doc, owners)
        if claimed and doc.owner is not None:
            declared.append(doc.owner)
        resolved = _resolve_members(doc, settings, names if claimed else {})
        found = [*doc.problems, *(p for draft in doc.members for p in draft.problems)]
        problems.extend(
            ScheduleSetProblem(file=label, path=path, message=message) for path, message in found
        )
        members.extend(resolved)
    return ScheduleSetReport(
        files=tuple(label for label, _, _ in sources),
        members=tuple(members) if not problems else (),
        problems=tuple(problems),
        owners=tuple(declared),
    )


def _claim_owner(doc: DocumentDraft, owners: dict[str, str]) -> bool:
    """Whether ``doc`` is the first to declare its owner key (a second is a problem)."""
    if doc.owner is None:
        return False
    first = owners.setdefault(doc.owner, doc.source)
    if first != doc.source:
        doc.problem(doc.owner_path, f"owner {doc.owner!r} is already declared by {first}")
        return False
    return True


def _resolve_members(
    doc: DocumentDraft, settings: SchedulerSettings, names: dict[str, str]
) -> list[ScheduleSetMember]:
    resolved = []
    owner = doc.owner if doc.owner is not None else "?"
    for draft in doc.members:
        name = f"{owner}/{draft.member}"
        row = _check(draft, name, settings)
        if doc.owner is not None:
            where = f"{doc.source}: {draft.prefix}"
            first = names.setdefault(name, where)
            if first != where:
                draft.fail(draft.prefix, f"resolves to the name {name!r}, as {first} does")
        if row is None or draft.seen or doc.owner is None:
            continue
        resolved.append(
            ScheduleSetMember(
                owner=owner,
                member=draft.member,
                name=name,
                schedule=_unstored(row),
                digest=fields_digest(set_fields(row)),  # Schedule.digest, from the row at hand
                source=doc.source,
                past_at=draft.at_path,
            )
        )
    return resolved
