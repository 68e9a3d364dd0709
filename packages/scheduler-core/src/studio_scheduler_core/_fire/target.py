"""The engine's database target: a SQLite file path or a PostgreSQL URL.

A file path is made absolute (children get it as ``LIONAGI_STUDIO_DB``; the file lock and the
file checks use it); a ``postgresql://`` URL is kept as given, and what a child gets is the
URL without its password: a secret never reaches a child through it (keep the password out of
the URL altogether, in ``~/.pgpass`` or ``PGPASSFILE``, when children must reach the
database too).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from studio_state import is_postgres

__all__ = ["child_db_value", "is_postgres", "normalise", "without_password"]


def normalise(target: str | os.PathLike[str]) -> str:
    """A URL as given (stripped); a file path absolute, ``~`` expanded, links resolved."""
    if is_postgres(target):
        return str(target).strip()
    return str(Path(target).expanduser().resolve())


def without_password(url: str) -> str:
    """``url`` without a password: neither ``user:secret@`` nor a ``password=`` parameter."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{hosts}" if user else hosts
    query = parts.query
    if "password" in query.lower():
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, v) for k, v in pairs if k.lower() != "password"])
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def child_db_value(target: str) -> str:
    """What a child gets as ``LIONAGI_STUDIO_DB``: the file path, or the URL without password."""
    return without_password(target) if is_postgres(target) else target
