"""Studio's scheduler engine: schedules, triggers, admission gates, fires, follow-ups and recovery."""

from __future__ import annotations

from .__about__ import __version__

__all__ = ["__version__"]
