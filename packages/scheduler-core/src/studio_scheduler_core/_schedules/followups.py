"""Follow-ups: overlay keys, the merged child action and its trigger context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._records.column import kind_keys, overlay_keys
from .._records.schedule import Schedule
from .._records.vocab import ACTION_KIND_ALIASES

MAX_CHAIN_DEPTH = 10
"""A run at this depth never launches a further follow-up."""

OVERLAY_KEYS: Mapping[str, str] = overlay_keys(Schedule)
"""Allowed ``on_success``/``on_fail`` keys and the schedule column each one overrides."""

CONTINUATION_KEYS = ("on_success", "on_fail")
"""Overlay keys that continue a chain; a follow-up never inherits them from its parent."""

OWN_KEYS = (*CONTINUATION_KEYS, "retry")
"""Columns a follow-up never inherits: it has them only when its own overlay sets them."""

KIND_KEYS: Mapping[str, frozenset[str]] = kind_keys(Schedule)
"""The overlay keys each resulting kind can use (``project`` picks the working directory)."""


def unusable_keys(overlay: Mapping[str, Any], kind: str) -> list[str]:
    """Overlay keys with a value that a run of ``kind`` would ignore, in overlay order.

    A key set to ``null`` only clears the inherited column and is always accepted.
    """
    usable = KIND_KEYS.get(kind)
    if usable is None:
        return []
    return [k for k, v in overlay.items() if k not in usable and v is not None]


SUCCESS_STATUSES = frozenset({"completed"})
FAILURE_STATUSES = frozenset({"failed", "timed_out"})


def overlay_input(parent: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """The child's input row (the checks of a schedule's input, before it is stored):
    ``parent`` with the overlay's columns replaced, as :func:`apply_overlay` does a record.

    Only the allowed keys are applied (anything else was refused at creation); ``kind`` and
    ``action_kind`` set the kind (``playbook`` is normalised to ``play``). The parent's own
    ``on_success``/``on_fail`` are never inherited: the child continues only through the
    overlay's own ``on_success``/``on_fail`` (nesting is how a chain is written). Nor is its
    ``retry``: a follow-up is retried only under its overlay's own ``retry``.
    """
    child = dict(parent)
    for key in OWN_KEYS:
        child[key] = None
    for key, column in OVERLAY_KEYS.items():
        if key in overlay:
            child[column] = overlay[key]
    kind = child.get("action_kind")
    if isinstance(kind, str) and kind in ACTION_KIND_ALIASES:
        child["action_kind"] = ACTION_KIND_ALIASES[kind]
    return child


def apply_overlay(parent: Schedule, overlay: Mapping[str, Any]) -> Schedule:
    """The child's action: ``parent`` with the overlay's columns replaced (the overlay is JSON,
    checked at creation: its lists become the record's tuples).

    Only the allowed keys are applied; ``kind``/``action_kind`` set the kind (``playbook`` is
    normalised to ``play``). The parent's own ``on_success``/``on_fail`` and ``retry`` are
    never inherited: the child has them only when its overlay sets them.
    """
    child: dict[str, object] = {**vars(parent), **dict.fromkeys(OWN_KEYS)}
    for key, column in OVERLAY_KEYS.items():
        if key in overlay:
            child[column] = overlay[key]
    kind = child["action_kind"]
    if isinstance(kind, str) and kind in ACTION_KIND_ALIASES:
        child["action_kind"] = ACTION_KIND_ALIASES[kind]
    return Schedule.from_row(child)


def select_follow_up(schedule: Schedule, run_status: str, depth: int) -> Mapping[str, Any] | None:
    """The overlay to run after a run at ``depth`` ended in ``run_status``, if any.

    ``on_success`` after ``completed``; ``on_fail`` after ``failed`` or ``timed_out``; nothing
    after ``cancelled`` (or any other status), and nothing once ``depth`` reaches the cap.
    """
    if depth >= MAX_CHAIN_DEPTH:
        return None
    if run_status in SUCCESS_STATUSES:
        overlay = schedule.on_success
    elif run_status in FAILURE_STATUSES:
        overlay = schedule.on_fail
    else:
        return None
    return overlay if isinstance(overlay, Mapping) and overlay else None


def child_context(
    parent_context: Mapping[str, Any], *, parent_run_id: str, exit_code: int | None, status: str
) -> dict[str, Any]:
    """The follow-up's trigger context: the parent's plus chain_from/parent_exit_code/status."""
    return {
        **parent_context,
        "chain_from": parent_run_id,
        "parent_exit_code": exit_code,
        "parent_status": status,
    }


def follow_up_action(schedule: Schedule, statuses: list[str]) -> Schedule | None:
    """The action of the follow-up reached from ``schedule`` through runs that ended in
    ``statuses`` (top-level first), or ``None`` when the schedule no longer has that chain."""
    action = schedule
    for depth, status in enumerate(statuses):
        overlay = select_follow_up(action, status, depth)
        if overlay is None:
            return None
        action = apply_overlay(action, overlay)
    return action
