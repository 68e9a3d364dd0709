"""The actor name of commands that change the database directly: ``cli:<os user>``."""

from __future__ import annotations

import getpass


def cli_actor() -> str:
    """``cli:<the OS user running the command>`` (``cli:unknown`` when it has no name)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"cli:{user or 'unknown'}"
