"""What checking schedule-set documents returns: resolved members and problems."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ScheduleSetMember:
    """One member of a set, resolved: the schedule it stands for.

    ``fields`` is the schedule's input as :meth:`ScheduleService.create` takes it (validated and
    normalised, ``name`` included); ``digest`` is the SHA-256 of its canonical JSON, the
    identity of its behaviour; ``source`` the file it was read from.
    """

    owner: str
    member: str
    name: str
    fields: Mapping[str, Any]
    digest: str
    source: str


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

    def to_json(self) -> dict[str, Any]:
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

    @property
    def ok(self) -> bool:
        """No problems."""
        return not self.problems
