"""Studio's subprocess launcher: argv validation, cwd resolution and process-group supervision (stdlib only)."""

from __future__ import annotations

from .__about__ import __version__

__all__ = ["__version__"]
