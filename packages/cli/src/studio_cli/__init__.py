"""studio-cli: the ``studio`` command (serve Studio, manage schedules, runs and dispatches).

``main()`` is the console-script entry point; ``app`` is the click command group.
"""

from __future__ import annotations

from .__about__ import __version__
from ._app import app, main

__all__ = ["__version__", "app", "main"]
