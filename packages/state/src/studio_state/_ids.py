"""Identifier generation."""

from __future__ import annotations

import secrets


def new_id() -> str:
    """Return a new random identifier: 12 lowercase hexadecimal characters (48 bits)."""
    return secrets.token_hex(6)
