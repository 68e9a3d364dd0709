"""The API's routers: schedules, dispatch and health."""

from __future__ import annotations
