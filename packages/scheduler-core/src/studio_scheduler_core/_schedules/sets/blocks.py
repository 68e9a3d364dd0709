"""A member's ``trigger:`` block and its action block, mapped onto a schedule's input fields.

Each function fills ``draft.fields`` (the schedule's input) and ``draft.paths`` (which document
path each field came from, so a refusal of the schedule validation names what was written) and
reports every problem it finds to ``draft.problem``; none stops at the first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from ..._exceptions import ScheduleValidationError
from ..._triggers.cron import CronError, check_expression, next_after
from ..trigger_rules import ThresholdConfig
from ..validation import check_timezone
from .durations import parse_duration, parse_minutes
from .shapes import CronBlock, GithubBlock, ThresholdBlock, TriggerBlock, keys

TRIGGER_KINDS = keys(TriggerBlock)
"""The keys of a member's ``trigger:`` block (exactly one)."""
ACTION_BLOCKS = ("command", "agent", "playbook", "flow")
"""A member's action keys (exactly one, at member level)."""
_AT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)
_COMMON_ACTION_KEYS = ("prompt", "project", "cwd", "extra_args")
ACTION_KEYS: Mapping[str, tuple[str, ...]] = {
    "command": ("argv", "cwd", "project"),
    "agent": ("agent", "model", *_COMMON_ACTION_KEYS),
    "playbook": ("name", *_COMMON_ACTION_KEYS),
    "flow": ("model", "fanout", "yaml", *_COMMON_ACTION_KEYS),
}
"""The keys each action block accepts."""
ACTION_COLUMNS: Mapping[str, str] = {
    "agent": "action_agent",
    "model": "action_model",
    "prompt": "action_prompt",
    "project": "action_project",
    "extra_args": "action_extra_args",
    "name": "action_playbook",
    "yaml": "action_flow_yaml",
}
"""The action block keys that are a schedule input field under another name (``cwd``, a
path resolved against the document's folder, aside)."""


@dataclass
class Draft:
    """One member on its way to a schedule: its input fields and where each came from."""

    member: str
    prefix: str
    now: float
    base_dir: str
    fields: dict[str, object] = field(default_factory=dict)
    """The schedule's input fields as the document gave them (checked by the schedule
    validation, which names the document path of each field it refuses)."""
    paths: dict[str, str] = field(default_factory=dict)
    at: str | None = None
    at_path: str | None = None
    """Where an ``at`` instant already past (without ``run_once``) was given: only the plan,
    which sees the rows, can tell a new instant (refused) from one already applied."""
    broken: set[str] = field(default_factory=set)
    """The parts (``trigger``, ``action``) already reported as unusable."""
    seen: set[str] = field(default_factory=set)
    """The paths reported so far."""
    problems: list[tuple[str, str]] = field(default_factory=list)
    """``(path, message)`` of each problem, in the order found."""

    def put(self, column: str, value: object, path: str) -> None:
        """Set the input field ``column`` from the document path ``path``."""
        self.fields[column] = value
        self.paths[column] = path

    def reported(self, path: str) -> bool:
        """A problem was reported at ``path``, inside it, or at a path that holds it."""
        return any(
            seen == path or seen.startswith(f"{path}.") or path.startswith(f"{seen}.")
            for seen in self.seen
        )

    def fail(self, path: str, message: str, part: str | None = None) -> None:
        """Report ``message`` at ``path``; ``part`` marks the trigger or action unusable."""
        self.problems.append((path, message))
        self.seen.add(path)
        if part is not None:
            self.broken.add(part)


def mapping_at(
    draft: Draft, value: object, path: str, allowed: tuple[str, ...]
) -> dict[str, object]:
    """``value`` as a mapping; each key outside ``allowed`` (and a non-mapping) reported."""
    if not isinstance(value, Mapping):
        draft.fail(path, f"must be a mapping, got {type(value).__name__}")
        return {}
    out: dict[str, object] = {}
    for key, item in value.items():
        if key not in allowed:
            draft.fail(f"{path}.{key}", f"unknown key (allowed: {', '.join(allowed)})")
        else:
            out[key] = item
    return out


def duration(draft: Draft, value: object, path: str) -> int | None:
    """``value`` in seconds, or ``None`` after reporting it."""
    try:
        return parse_duration(path, value)
    except ScheduleValidationError as exc:
        draft.fail(path, exc.message)
        return None


def _cron(draft: Draft, value: object, path: str) -> None:
    block = mapping_at(draft, value, path, keys(CronBlock))
    expr, zone_name = block.get("expression"), block.get("timezone")
    ok = True
    if not isinstance(expr, str) or not expr.strip():
        draft.fail(f"{path}.expression", "is required (a cron expression)", "trigger")
        ok = False
    if zone_name is None:
        draft.fail(f"{path}.timezone", "is required (an IANA zone such as 'Europe/Paris')")
        ok = False
    else:
        try:
            zone_name = check_timezone(zone_name)
        except ScheduleValidationError as exc:
            draft.fail(f"{path}.timezone", exc.message)
            ok = False
    if isinstance(expr, str) and expr.strip():
        try:
            check_expression(expr)
            if ok:
                next_after(expr, str(zone_name), draft.now)
        except CronError as exc:
            draft.fail(f"{path}.expression", str(exc), "trigger")
    draft.put("trigger_type", "cron", path)
    draft.put("cron_expr", expr, f"{path}.expression")
    draft.put("timezone", zone_name, f"{path}.timezone")


def _every(draft: Draft, value: object, path: str) -> None:
    seconds = duration(draft, value, path)
    if seconds is None:
        draft.broken.add("trigger")
    draft.put("trigger_type", "interval", path)
    draft.put("interval_sec", seconds, path)


def _at(draft: Draft, value: object, path: str, run_once: bool) -> None:
    draft.put("trigger_type", "at", path)
    if not isinstance(value, str) or not _AT.fullmatch(value.strip()):
        draft.fail(
            path,
            "must be an RFC 3339 instant with an explicit offset, such as "
            f"'2027-01-05T09:00:00+01:00', got {value!r}",
            "trigger",
        )
        return
    try:
        instant = datetime.fromisoformat(value.strip().replace("z", "Z")).timestamp()
    except ValueError as exc:
        draft.fail(path, f"is not a valid instant: {exc}", "trigger")
        return
    if instant <= draft.now and not run_once:
        draft.at_path = path
    draft.at = value


def _github(draft: Draft, value: object, path: str) -> None:
    block = mapping_at(draft, value, path, keys(GithubBlock))
    draft.put("trigger_type", "github_poll", path)
    draft.put("github_repo", block.get("repo"), f"{path}.repo")
    if block.get("repo") is None:
        draft.fail(f"{path}.repo", "is required ('owner/name')", "trigger")
    if "filter" in block:
        draft.put("github_filter", block["filter"], f"{path}.filter")
    if "poll_interval_sec" in block:
        seconds = duration(draft, block["poll_interval_sec"], f"{path}.poll_interval_sec")
        draft.put("poll_interval_sec", seconds, f"{path}.poll_interval_sec")


def _threshold(draft: Draft, value: object, path: str) -> None:
    block = mapping_at(draft, value, path, keys(ThresholdBlock))
    cadence = [k for k in ("every", "cron") if k in block]
    if len(cadence) != 1:
        draft.fail(path, "needs exactly one of every or cron (how often it is checked)", "trigger")
    elif cadence == ["every"]:
        _every(draft, block["every"], f"{path}.every")
    else:
        _cron(draft, block["cron"], f"{path}.cron")
    config = {k: block[k] for k in keys(ThresholdConfig) if k in block}
    if "window_minutes" in config:
        try:
            config["window_minutes"] = parse_minutes(
                f"{path}.window_minutes", config["window_minutes"]
            )
        except ScheduleValidationError as exc:
            draft.fail(exc.field, exc.message)
            config.pop("window_minutes")
    draft.put("threshold_config", config, path)


def trigger(draft: Draft, value: object, *, run_once: bool) -> None:
    """Map the member's ``trigger:`` block (exactly one of :data:`TRIGGER_KINDS`)."""
    path = f"{draft.prefix}.trigger"
    if value is None:
        draft.fail(path, f"is required (one of {', '.join(TRIGGER_KINDS)})", "trigger")
        return
    before = len(draft.problems)
    block = mapping_at(draft, value, path, TRIGGER_KINDS)
    if len(block) != 1:
        if block or len(draft.problems) == before:  # an unknown key alone was said already
            found = ", ".join(block) or "none"
            draft.fail(path, f"needs exactly one of {', '.join(TRIGGER_KINDS)} (found {found})")
        draft.broken.add("trigger")
        return
    ((kind, item),) = block.items()
    where = f"{path}.{kind}"
    if kind == "cron":
        _cron(draft, item, where)
    elif kind == "every":
        _every(draft, item, where)
    elif kind == "at":
        _at(draft, item, where, run_once)
    elif kind == "github":
        _github(draft, item, where)
    else:
        _threshold(draft, item, where)


def _cwd(draft: Draft, value: object, path: str) -> None:
    if not isinstance(value, str) or not value.strip():
        draft.fail(path, f"must be a directory path, got {value!r}")
        return
    resolved = os.path.normpath(os.path.join(draft.base_dir, value))
    draft.put("action_cwd", resolved, path)


def _command(draft: Draft, block: Mapping[str, object], path: str) -> None:
    argv = block.get("argv")
    draft.put("action_kind", "command", path)
    if isinstance(argv, str):
        draft.fail(f"{path}.argv", "must be a list of arguments, never a shell string", "action")
    elif not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        draft.fail(f"{path}.argv", "is required: a non-empty list of strings", "action")
    else:
        draft.put("action_command", argv[0], f"{path}.argv")
        draft.put("action_command_args", argv[1:], f"{path}.argv")


def action(draft: Draft, member: Mapping[object, object]) -> None:
    """Map the member's action block (exactly one of :data:`ACTION_BLOCKS`)."""
    present = [k for k in ACTION_BLOCKS if k in member]
    if len(present) != 1:
        found = ", ".join(present) or "none"
        draft.fail(
            draft.prefix, f"needs exactly one action: {', '.join(ACTION_BLOCKS)} (found {found})"
        )
        draft.broken.add("action")
        return
    kind = present[0]
    path = f"{draft.prefix}.{kind}"
    block = mapping_at(draft, member[kind], path, ACTION_KEYS[kind])
    if kind == "command":
        _command(draft, block, path)
    elif kind == "playbook":
        draft.put("action_kind", "play", path)
        if block.get("name") is None:
            draft.fail(f"{path}.name", "is required (the playbook to run)", "action")
    elif kind == "flow":
        fanout = block.get("fanout", False)
        if not isinstance(fanout, bool):
            draft.fail(f"{path}.fanout", f"must be true or false, got {fanout!r}", "action")
        spelled = [k for k in ("model", "prompt", "extra_args", "fanout") if k in block]
        if "yaml" in block and spelled:
            draft.fail(f"{path}.yaml", f"an inline flow takes no {', '.join(spelled)}", "action")
        flow_kind = "flow_yaml" if "yaml" in block else "fanout" if fanout is True else "flow"
        draft.put("action_kind", flow_kind, path)
    else:
        draft.put("action_kind", "agent", path)
    for key, item in block.items():
        if key == "cwd":
            _cwd(draft, item, f"{path}.cwd")
        elif key in ACTION_COLUMNS:
            draft.put(ACTION_COLUMNS[key], item, f"{path}.{key}")
    # A refusal of a column the block left out (``action_model`` is required …) names the key
    # that would set it.
    for key in ACTION_KEYS[kind]:
        column = "action_cwd" if key == "cwd" else ACTION_COLUMNS.get(key)
        if column is not None:
            draft.paths.setdefault(column, f"{path}.{key}")
