"""Exporting stored schedules as a ``ScheduleSet`` document that ``apply`` accepts unchanged.

:func:`export_schedule_set` maps each row back onto a member: its trigger block, its action
block at member level and every other input field under its own name (durations as whole
seconds). What a document cannot express is returned per schedule (``notes``) rather than
dropped: a cron schedule without a zone of its own (the document names the server's default),
an unowned schedule whose name is not ``<owner>/<member>``, an action kind no block writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

import aiosqlite
import yaml

from ..._records.schedule import Schedule, disabled_by_studio
from .blocks import ACTION_COLUMNS, ACTION_KEYS
from .document import API_VERSION, KIND, MEMBER_FIELDS, NAME_PATTERN
from .shapes import CronBlock, GithubBlock, ThresholdBlock, TriggerBlock
from .store import held_rows

_BLOCK_OF_KIND = {
    "command": "command",
    "agent": "agent",
    "play": "playbook",
    "flow": "flow",
    "fanout": "flow",
    "flow_yaml": "flow",
}
_KEY_COLUMN = {**ACTION_COLUMNS, "cwd": "action_cwd"}
_UNSAFE = re.compile(r"[^a-z0-9\-_.]")


class ExportedMetadata(TypedDict):
    """``metadata: {name}`` (the owner key)."""

    name: str


class ExportedDocument(TypedDict):
    """The exported ``ScheduleSet`` document. A member is a mapping of the keys
    :data:`.document.MEMBER_KEYS` names: its input fields under their own names (JSON values),
    its :class:`TriggerBlock` and one action block of the keys :data:`.blocks.ACTION_KEYS`
    names."""

    apiVersion: str
    kind: str
    metadata: ExportedMetadata
    schedules: dict[str, dict[str, object]]


@dataclass(frozen=True, kw_only=True)
class ScheduleSetExport:
    """An exported document, and per schedule name what the document cannot express."""

    owner: str
    document: ExportedDocument
    notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_yaml(self) -> str:
        """The document as YAML, the notes as comments at its top."""
        head = [f"# ScheduleSet exported for owner {self.owner!r}."]
        for name, lines in self.notes.items():
            head.extend(f"# {name}: {line}" for line in lines)
        body = yaml.safe_dump(dict(self.document), sort_keys=False, allow_unicode=True, width=100)
        return "\n".join(head) + "\n" + body


def _trigger(row: Schedule, zone: str, notes: list[str]) -> TriggerBlock:
    def cron() -> CronBlock:
        if row.timezone is None:
            notes.append(
                f"timezone: unset (the server's default zone applies); written as {zone!r}"
            )
        return {"expression": row.cron_expr, "timezone": row.timezone or zone}

    if row.trigger_type == "at":
        return {"at": row.at}
    if row.trigger_type == "github_poll":
        block: GithubBlock = {"repo": row.github_repo}
        if row.github_filter is not None:
            block["filter"] = dict(row.github_filter)
        if row.poll_interval_sec is not None:
            block["poll_interval_sec"] = row.poll_interval_sec
        if row.github_cursor is not None:
            notes.append(f"github_cursor: {row.github_cursor!r} is state, not written")
        return {"github": block}
    config = row.threshold_config
    if config is not None:
        threshold: ThresholdBlock = {
            "metric": config["metric"],
            "op": config["op"],
            "value": config["value"],
            "window_minutes": config["window_minutes"],
        }
        if row.trigger_type == "cron":
            threshold["cron"] = cron()
        else:
            threshold["every"] = row.interval_sec
        return {"threshold": threshold}
    if row.trigger_type == "cron":
        return {"cron": cron()}
    return {"every": row.interval_sec}


def _action(row: Schedule, notes: list[str]) -> tuple[str, dict[str, object]] | None:
    kind = _BLOCK_OF_KIND.get(row.action_kind)
    if kind is None:
        notes.append(f"action_kind {row.action_kind!r}: no action block writes it; not exported")
        return None
    block: dict[str, object] = {}
    if kind == "command":
        block["argv"] = [row.action_command, *row.action_command_args]
    if row.action_kind == "fanout":
        block["fanout"] = True
    for key in ACTION_KEYS[kind]:
        column = _KEY_COLUMN.get(key)
        value = None if column is None else getattr(row, column)
        if value is not None and value != ():
            block[key] = list(value) if isinstance(value, tuple) else value
    return kind, block


def _member_name(row: Schedule, owner: str, notes: list[str]) -> str:
    if row.owner_key == owner and row.set_member:
        return row.set_member
    base = row.name.removeprefix(f"{owner}/")
    member = _UNSAFE.sub("-", base.lower()).lstrip("-_.")[:63] or "schedule"
    notes.append(
        f"name: applied, this member is named {owner}/{member!s}, not {row.name!r} "
        "(a set names its schedules <owner>/<member>)"
    )
    return member


def _member(row: Schedule, zone: str, owner: str) -> tuple[str, dict[str, object], list[str]]:
    notes: list[str] = []
    name = _member_name(row, owner, notes)
    member: dict[str, object] = {}
    values = row.to_row()
    for key in MEMBER_FIELDS:
        value = values.get(key)
        if value is None or value == []:
            continue
        member[key] = value
    if not row.enabled and disabled_by_studio(row.disabled_reason):
        member["enabled"] = True
        notes.append(f"disabled by Studio ({row.disabled_reason}); written as enabled")
    member["trigger"] = _trigger(row, zone, notes)
    action = _action(row, notes)
    if action is not None:
        member[action[0]] = action[1]
    return name, member, notes


async def export_schedule_set(
    conn: aiosqlite.Connection,
    *,
    owner: str | None,
    timezone: str,
    name: str = "unowned",
) -> ScheduleSetExport:
    """The schedules ``owner`` holds (``None``: every unowned schedule, under the owner key
    ``name``) as a document; ``timezone`` is the server's default zone, written for a cron
    schedule that has none of its own."""
    key = name if owner is None else owner
    if not NAME_PATTERN.fullmatch(key):
        raise ValueError(f"owner key {key!r} must match {NAME_PATTERN.pattern}")
    members: dict[str, dict[str, object]] = {}
    notes: dict[str, tuple[str, ...]] = {}
    for row in await held_rows(conn, owner):
        member, body, found = _member(row, timezone, key)
        while member in members:
            member = f"{member[:58]}-{row.id[:4]}"
            found.append(f"member name taken by another schedule; written as {member!r}")
        members[member] = body
        if found:
            notes[row.name] = tuple(found)
    document: ExportedDocument = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": key},
        "schedules": members,
    }
    return ScheduleSetExport(owner=key, document=document, notes=notes)
