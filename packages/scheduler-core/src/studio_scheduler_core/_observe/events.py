"""Structured events on the ``studio_scheduler_core.events`` logger.

Every record carries ``extra={"studio_event": NAME, "studio_fields": {...}}``: the event name,
ids (``schedule_id``, ``run_id``), a ``reason_code`` where one applies, and figures
(``lag_seconds``, ``duration_seconds``, ``seconds``, ``count``). The library never formats
or exports them; a host attaches handlers (log lines, metrics). Events an operator reads are
INFO (a disable is WARNING); per-tick and repeated-deferral events are DEBUG, so a host that
derives metrics sets the logger to DEBUG and its log handler to INFO.
"""

from __future__ import annotations

import logging
from typing import Any

EVENTS_LOGGER = "studio_scheduler_core.events"
_log = logging.getLogger(EVENTS_LOGGER)


def emit(event: str, message: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event record (cheap when nothing listens at ``level``)."""
    if _log.isEnabledFor(level):
        _log.log(level, message, extra={"studio_event": event, "studio_fields": fields})
