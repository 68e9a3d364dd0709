"""The command groups of ``studio`` (each module imports only click and stdlib at import)."""

from __future__ import annotations
