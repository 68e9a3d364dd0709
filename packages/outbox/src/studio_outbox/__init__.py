"""A durable SQLite outbox for outbound notifications: dedup, guarded claims, backoff, acknowledgement, expiry and dead letters."""

from __future__ import annotations

from .__about__ import __version__

__all__ = ["__version__"]
