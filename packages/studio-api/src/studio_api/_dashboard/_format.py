"""Jinja filters: times in a zone (UTC on hover), durations, statuses with a word and an icon."""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from markupsafe import Markup, escape

# Each status has an icon and a word beside its colour, so the page reads in grey too.
STATUS_ICONS = {
    "completed": "✓",
    "acked": "✓",
    "delivered": "✓",
    "ok": "✓",
    "enabled": "●",
    "running": "▶",
    "delivering": "▶",
    "queued": "…",
    "pending": "…",
    "waiting_dependency": "…",
    "retry_wait": "↻",
    "failed": "✗",
    "dead_letter": "✗",
    "timed_out": "◷",
    "expired": "◷",
    "degraded": "!",
    "skipped": "↷",
    "cancelled": "⊘",
    "disabled": "○",
    # health verdicts
    "healthy": "✓",
    "failing": "✗",
    "overdue": "◷",
    "never_fired": "–",
}
_TONES = {
    "completed": "good",
    "acked": "good",
    "delivered": "good",
    "ok": "good",
    "enabled": "good",
    "running": "busy",
    "delivering": "busy",
    "failed": "bad",
    "dead_letter": "bad",
    "timed_out": "bad",
    "expired": "bad",
    "degraded": "bad",
    "healthy": "good",
    "failing": "bad",
    "overdue": "bad",
    "drifted": "warn",
}


#: What each health verdict means, shown on hover beside its word and glyph.
VERDICT_MEANINGS = {
    "disabled": "not enabled: it does not fire",
    "never_fired": "enabled, and it has not fired yet",
    "healthy": "its last run did not fail and it fires on time",
    "failing": "its last run ended failed or timed out",
    "overdue": ("no fire, poll or check for longer than max(3 × its cadence, its cadence + 5 min)"),
}


def verdict_meaning(verdict: str | None) -> str:
    """The sentence a health verdict stands for (empty for an unknown one)."""
    return VERDICT_MEANINGS.get(verdict or "", "")


def zone_of(name: str | None, fallback: str) -> ZoneInfo:
    """The zone called ``name`` (else ``fallback``, else UTC)."""
    for candidate in (name, fallback):
        if candidate:
            try:
                return ZoneInfo(candidate)
            except (ZoneInfoNotFoundError, ValueError):
                continue
    return ZoneInfo("UTC")


def local_time(epoch: float | None, zone: ZoneInfo) -> str:
    """``2026-12-03 10:20:33 CET`` (empty for no time)."""
    if epoch is None:
        return ""
    return dt.datetime.fromtimestamp(float(epoch), zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def utc_time(epoch: float | None) -> str:
    """ISO-8601 UTC, for the ``title`` of a time (shown on hover)."""
    if epoch is None:
        return ""
    moment = dt.datetime.fromtimestamp(float(epoch), dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") + " UTC"


def duration(seconds: float | None) -> str:
    """``850 ms``, ``4.2 s``, ``3 min 05 s``, ``2 h 07 min``, ``3 d 4 h``."""
    if seconds is None:
        return ""
    value = max(0.0, float(seconds))
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    whole = int(value)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def run_duration(run: dict[str, Any], now: float) -> str:
    """How long a run took (or has been running)."""
    start = run.get("fired_at")
    if start is None:
        return ""
    end = run.get("ended_at")
    return duration((end if end is not None else now) - start)


def status_icon(status: str | None) -> str:
    return STATUS_ICONS.get(status or "", "•")


def status_tone(status: str | None) -> str:
    return _TONES.get(status or "", "neutral")


def code_breaks(code: str | None) -> Markup:
    """A reason code (``run.failed.exit_nonzero``) that may wrap only after its dots.

    The element showing it keeps words whole (``.reason-code`` in the stylesheet); a ``<wbr>``
    after each dot is the only place a line may break.
    """
    if not code:
        return Markup("")
    return Markup(".<wbr>").join(escape(part) for part in str(code).split("."))
