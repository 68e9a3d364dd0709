"""The Studio host: settings, the FastAPI app and the lifespan that drives the scheduler."""

from __future__ import annotations

from .__about__ import __version__

__all__ = ["__version__"]
