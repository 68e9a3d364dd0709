"""What checking schedule-set documents returns: resolved members and problems."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from ..._records.column import create_fields
from ..._records.schedule import Schedule

PlanAction = Literal["create", "update", "unchanged", "disable", "delete", "error"]
"""What a plan does with one member (or one owned schedule absent from the documents)."""
Snapshot = tuple[str, str | None, str | None, str, bool]
"""What a plan saw of a row: its behaviour digest, owner key, set digest, managed_by, enabled."""
FieldChange = tuple[object, object]
"""An input field's value before and after (JSON values)."""
INPUT_FIELDS = create_fields(Schedule)
"""The input fields of a schedule, in column order (what a member sets; the rest is
bookkeeping)."""


class ProblemJson(TypedDict):
    """A :class:`ScheduleSetProblem` as a JSON object."""

    file: str
    path: str
    message: str
    line: int | None
    column: int | None


class ChangeJson(TypedDict):
    """A :class:`ScheduleSetChange` as a JSON object (``fields``: ``[old, new]`` each)."""

    member: str
    name: str
    action: PlanAction
    fields: dict[str, list[object]]
    detail: str


class PlanJson(TypedDict):
    """A :class:`ScheduleSetPlan` as a JSON object."""

    owner: str | None
    owners: list[str]
    changes: list[ChangeJson]


@dataclass(frozen=True, kw_only=True)
class ScheduleSetMember:
    """One member of a set, resolved: the schedule it stands for.

    ``schedule`` is the record create would store (validated and normalised, ``name``
    included), not stored yet: its ``id`` is empty and its times zero until an apply writes it;
    ``digest`` is the SHA-256 of the canonical JSON of its input fields, the identity of its
    behaviour (:attr:`Schedule.digest`); ``source`` the file it was read from.
    """

    owner: str
    member: str
    name: str
    schedule: Schedule
    digest: str
    source: str
    past_at: str | None = None
    """The document path of an ``at`` instant already past (no ``run_once``): refused by the
    plan when it would create the schedule or change its instant, kept when already applied
    (a one-shot that fired stays in its file without breaking the next apply)."""

    @property
    def fields(self) -> dict[str, object]:
        """The schedule's input fields, as :meth:`ScheduleService.create` takes them."""
        schedule = self.schedule
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name in INPUT_FIELDS
            for value in (getattr(schedule, name),)
        }


@dataclass(frozen=True, kw_only=True)
class ScheduleSetProblem:
    """One thing wrong with a document: the file, the dotted path in it (empty for the file
    itself), the message, and for malformed YAML the 1-based line and column."""

    file: str
    path: str
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        """``FILE: PATH: message`` (``FILE:LINE:COLUMN: message`` when the parser said where)."""
        if self.line is not None:
            return f"{self.file}:{self.line}:{self.column}: {self.message}"
        if not self.path:
            return f"{self.file}: {self.message}"
        return f"{self.file}: {self.path}: {self.message}"

    def to_json(self) -> ProblemJson:
        """The problem as a JSON object."""
        return {
            "file": self.file,
            "path": self.path,
            "message": self.message,
            "line": self.line,
            "column": self.column,
        }


@dataclass(frozen=True, kw_only=True)
class ScheduleSetReport:
    """The outcome of checking documents: ``members`` (only those without problems),
    ``problems`` (every one, in file and document order) and the ``files`` read."""

    files: tuple[str, ...]
    members: tuple[ScheduleSetMember, ...]
    problems: tuple[ScheduleSetProblem, ...]
    owners: tuple[str, ...] = ()
    """The owner keys the documents declare, in file order."""

    @property
    def ok(self) -> bool:
        """No problems."""
        return not self.problems


@dataclass(frozen=True, kw_only=True)
class ScheduleSetChange:
    """One line of a plan: what happens to ``name`` (member ``member`` of ``owner``).

    ``fields`` holds ``{field: (old, new)}`` for an update; ``schedule_id`` and ``seen`` the
    stored row the plan compared with (``seen``: what it saw, checked again by the apply);
    ``target`` the member a create or update writes; ``running`` the running runs of a
    schedule a prune deletes, as the plan saw them, and ``force`` whether the delete may
    cancel running runs (the apply cancels those running when it writes, in its transaction).
    """

    owner: str
    member: str
    name: str
    action: PlanAction
    fields: Mapping[str, FieldChange] = field(default_factory=dict)
    detail: str = ""
    schedule_id: str | None = None
    seen: Snapshot | None = None
    target: ScheduleSetMember | None = None
    running: tuple[str, ...] = ()
    force: bool = False

    def to_json(self) -> ChangeJson:
        """``{"member", "name", "action", "fields", "detail"}`` (fields as ``[old, new]``)."""
        return {
            "member": self.member,
            "name": self.name,
            "action": self.action,
            "fields": {k: [old, new] for k, (old, new) in self.fields.items()},
            "detail": self.detail,
        }

    def __str__(self) -> str:
        """``ACTION name`` with the changed fields or the detail."""
        text = f"{self.action.upper()} {self.name}"
        if self.fields:
            text += ": " + ", ".join(
                f"{k} {_short(old)} -> {_short(new)}" for k, (old, new) in self.fields.items()
            )
        if self.detail:
            text += f" ({self.detail})" if self.fields else f": {self.detail}"
        return text


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True, kw_only=True)
class ScheduleSetPlan:
    """What applying documents would do: one :class:`ScheduleSetChange` per member, and per
    owned schedule the documents no longer hold, for the ``owners`` they declare."""

    owners: tuple[str, ...]
    changes: tuple[ScheduleSetChange, ...]

    def count(self, action: PlanAction) -> int:
        """How many changes have this action."""
        return sum(1 for c in self.changes if c.action == action)

    @property
    def errors(self) -> tuple[ScheduleSetChange, ...]:
        """The ``error`` changes (an apply with any writes nothing)."""
        return tuple(c for c in self.changes if c.action == "error")

    @property
    def has_changes(self) -> bool:
        """Anything to create, update, disable or delete (or an error)."""
        return any(c.action != "unchanged" for c in self.changes)

    def summary(self) -> str:
        """``Plan: N to create, N to update, N to disable, N to delete, N errors.``"""
        return (
            f"Plan: {self.count('create')} to create, {self.count('update')} to update, "
            f"{self.count('disable')} to disable, {self.count('delete')} to delete, "
            f"{self.count('error')} errors."
        )

    def to_json(self) -> PlanJson:
        """``{"owner", "owners", "changes"}``; ``owner`` is ``None`` when several owners are
        planned together (each change's ``name`` starts with its owner)."""
        return {
            "owner": self.owners[0] if len(self.owners) == 1 else None,
            "owners": list(self.owners),
            "changes": [c.to_json() for c in self.changes],
        }
