"""The closed schema of a ``ScheduleSet`` document, walked once, every problem reported.

``apiVersion: studio/v1``, ``kind: ScheduleSet``, ``metadata: {name, owner?}`` and
``schedules: {<member>: {...}}``. A member holds ``description``, ``enabled``, one ``trigger:``
block (:mod:`.blocks`), one action block at member level, and the policy, limit, retry, timeout,
notify and follow-up fields of a schedule under the API's names (snake_case). Durations are
accepted wherever seconds are, in the retry objects of follow-ups too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..._records.schedule import Action
from ..trigger_rules import TRIGGER_FIELDS
from ..validation import CREATE_FIELDS
from .blocks import ACTION_BLOCKS, Draft, action, duration, trigger
from .loader import MAX_MEMBERS

API_VERSION = "studio/v1"
KIND = "ScheduleSet"
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9\-_.]{0,62}")
"""A member name, and an owner key."""
_NOT_MEMBER_FIELDS = frozenset(
    {
        "name",
        "trigger_type",
        "timezone",
        "threshold_config",
        *(f for fields in TRIGGER_FIELDS.values() for f in fields),
        *(f.name for f in dataclasses.fields(Action)),
    }
)
MEMBER_FIELDS: tuple[str, ...] = tuple(f for f in CREATE_FIELDS if f not in _NOT_MEMBER_FIELDS)
"""The schedule fields a member sets under their own names (description, enabled, policies,
limits, retry, timeout, notify, follow-ups)."""
MEMBER_KEYS: tuple[str, ...] = (*MEMBER_FIELDS, "trigger", *ACTION_BLOCKS)
"""Every key a member accepts."""
DURATION_FIELDS = frozenset(f for f in MEMBER_FIELDS if f.endswith("_sec"))
_RETRY_DURATIONS = ("backoff_sec", "max_backoff_sec")
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


@dataclass
class DocumentDraft:
    """A document walked: its owner key (``None`` when unusable), members, and the problems of
    the document outside its members (each member holds its own)."""

    source: str
    owner: str | None = None
    owner_path: str = "metadata.name"
    members: list[Draft] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)

    def problem(self, path: str, message: str) -> None:
        """Record a problem at ``path`` (a dotted document path)."""
        self.problems.append((path, message))


def _unknown(key: object, allowed: tuple[str, ...]) -> str:
    if isinstance(key, str) and _CAMEL.search(key):
        snake = _CAMEL.sub(lambda m: "_" + m.group(1).lower(), key)
        if snake in allowed:
            return f"unknown key (fields are snake_case: {snake})"
    return "unknown key"


def _metadata(doc: DocumentDraft, value: object) -> None:
    if not isinstance(value, Mapping):
        doc.problem("metadata", "is required: a mapping with name (and owner)")
        return
    for key in value:
        if key not in ("name", "owner"):
            doc.problem(f"metadata.{key}", "unknown key (allowed: name, owner)")
    name, owner = value.get("name"), value.get("owner")
    if not isinstance(name, str) or not name.strip():
        doc.problem("metadata.name", "is required (a non-blank string)")
    key, path = (owner, "metadata.owner") if owner is not None else (name, "metadata.name")
    if not isinstance(key, str) or not key.strip():
        return
    if not NAME_PATTERN.fullmatch(key):
        doc.problem(path, f"owner key {key!r} must match {NAME_PATTERN.pattern}")
        return
    doc.owner, doc.owner_path = key, path


def _retry_durations(draft: Draft, value: object, path: str) -> object:
    if not isinstance(value, Mapping):
        return value
    out = dict(value)
    for key in _RETRY_DURATIONS:
        if key in out:
            out[key] = duration(draft, out[key], f"{path}.{key}")
    return out


def _overlay_durations(draft: Draft, value: object, path: str) -> object:
    """A follow-up overlay with its retry durations (and its own follow-ups') in seconds."""
    if not isinstance(value, Mapping):
        return value
    out = dict(value)
    if "retry" in out:
        out["retry"] = _retry_durations(draft, out["retry"], f"{path}.retry")
    for key in ("on_success", "on_fail"):
        if key in out:
            out[key] = _overlay_durations(draft, out[key], f"{path}.{key}")
    return out


def _member(draft: Draft, value: Mapping[object, object]) -> None:
    for key in value:
        if key not in MEMBER_KEYS:
            draft.fail(f"{draft.prefix}.{key}", _unknown(key, MEMBER_KEYS))
    for key in MEMBER_FIELDS:
        if key not in value:
            continue
        item, path = value[key], f"{draft.prefix}.{key}"
        if key in DURATION_FIELDS and item is not None:
            item = duration(draft, item, path)
            if item is None:
                continue
        elif key == "retry":
            item = _retry_durations(draft, item, path)
        elif key in ("on_success", "on_fail"):
            item = _overlay_durations(draft, item, path)
        draft.put(key, item, path)
    run_once = value.get("missed_fire_policy") == "run_once"
    trigger(draft, value.get("trigger"), run_once=run_once)
    action(draft, value)


def walk(
    document: Mapping[object, object], *, source: str, base_dir: str, now: float
) -> DocumentDraft:
    """Walk ``document`` (read from ``source``, whose folder is ``base_dir``) into drafts.

    Members whose names are unusable are reported and left out; every other member is drafted
    even when it has problems, so that the schedule validation can report its other fields.
    """
    doc = DocumentDraft(source=source)
    for key in document:
        if key not in ("apiVersion", "kind", "metadata", "schedules"):
            allowed = ("apiVersion", "kind", "metadata", "schedules")
            doc.problem(str(key), _unknown(key, allowed))
    if document.get("apiVersion") != API_VERSION:
        doc.problem("apiVersion", f"must be {API_VERSION!r}, got {document.get('apiVersion')!r}")
    if document.get("kind") != KIND:
        doc.problem("kind", f"must be {KIND!r}, got {document.get('kind')!r}")
    _metadata(doc, document.get("metadata"))
    schedules = document.get("schedules")
    if not isinstance(schedules, Mapping):
        doc.problem("schedules", "is required: a mapping of member names to schedules")
        return doc
    if len(schedules) > MAX_MEMBERS:
        doc.problem("schedules", f"holds {len(schedules)} members; at most {MAX_MEMBERS}")
        return doc
    for name, value in schedules.items():
        prefix = f"schedules.{name}"
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            doc.problem(prefix, f"member name {name!r} must match {NAME_PATTERN.pattern}")
            continue
        if not isinstance(value, Mapping):
            doc.problem(prefix, f"must be a mapping, got {type(value).__name__}")
            continue
        draft = Draft(member=name, prefix=prefix, now=now, base_dir=base_dir)
        _member(draft, value)
        doc.members.append(draft)
    return doc
