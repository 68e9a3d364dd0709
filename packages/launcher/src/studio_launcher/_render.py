"""``{{name}}`` placeholder rendering from a fire's trigger context.

One pass, no escaping: substituted text is never re-scanned, so a value that itself contains
``{{x}}`` stays literal. Unknown names stay literal too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
"""A placeholder: ``{{`` + an ASCII identifier + ``}}`` (no spaces)."""

_MISSING = object()


def _lookup(context: Mapping[str, Any], name: str) -> object:
    if name in context:
        return context[name]
    # A github_poll fire carries its event under "github_events" (one event per fire): its keys
    # are a fallback, never shadowing a top-level key.
    events = context.get("github_events")
    if isinstance(events, list) and events and isinstance(events[0], Mapping):
        first: Mapping[str, Any] = events[0]
        if name in first:
            return first[name]
    return _MISSING


def _as_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def has_placeholders(text: str) -> bool:
    """Return whether ``text`` contains at least one ``{{name}}`` placeholder."""
    return PLACEHOLDER.search(text) is not None


def render_template(text: str, context: Mapping[str, Any] | None) -> str:
    """Replace each ``{{name}}`` in ``text`` by ``context[name]`` in a single pass.

    Values render as text: ``None`` as the empty string, booleans as ``true``/``false``, lists
    and dicts as JSON. A name missing from ``context`` (and from its first ``github_events``
    entry) stays literal.
    """
    ctx: Mapping[str, Any] = context or {}

    def _sub(match: re.Match[str]) -> str:
        value = _lookup(ctx, match.group(1))
        if value is _MISSING:
            return match.group(0)
        return _as_text(value)

    return PLACEHOLDER.sub(_sub, text)


def unfilled_names(text: str, context: Mapping[str, Any] | None) -> list[str]:
    """Return the sorted, unique placeholder names in ``text`` that ``context`` does not fill."""
    ctx: Mapping[str, Any] = context or {}
    return sorted(
        {m.group(1) for m in PLACEHOLDER.finditer(text) if _lookup(ctx, m.group(1)) is _MISSING}
    )
