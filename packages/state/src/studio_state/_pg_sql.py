"""SQLite's statement text as psycopg takes it: placeholders, ``BEGIN`` forms, ``PRAGMA``.

Studio's SQL is written with qmark placeholders (``?``). psycopg takes ``%s`` (and
``%(name)s``) and treats every ``%`` of a statement with parameters as the start of one, so a
statement run with parameters is rewritten: each ``?`` outside string literals, quoted
identifiers, comments and dollar-quoted bodies becomes ``%s``, each ``:name`` (when the
parameters are a mapping) becomes ``%(name)s``, and every ``%`` — inside literals too —
becomes ``%%``. A statement run without parameters is sent as written (psycopg then does no
placeholder processing, and a script of several statements runs in one call).

Not handled (Studio's SQL uses none of them): SQLite's other placeholder forms (``?NNN``,
``@name``, ``$name``), backtick or ``[bracket]`` quoting, and PostgreSQL's ``E'…'`` strings
with backslash-escaped quotes.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

_TOKEN: Final = re.compile(
    r"""
      (?P<quoted>'(?:[^']|'')*'|"(?:[^"]|"")*")      # string literal / quoted identifier
    | (?P<comment>--[^\n]*|/\*.*?\*/)                 # comments
    | (?P<dollar>\$(?P<tag>[A-Za-z_][A-Za-z0-9_]*|)\$.*?\$(?P=tag)\$)  # $tag$ … $tag$
    | (?P<qmark>\?)
    | (?P<percent>%)
    | (?<!:):(?P<name>[A-Za-z_][A-Za-z0-9_]*)        # :name (never the :: of a cast)
    """,
    re.VERBOSE | re.DOTALL,
)

_BEGIN: Final = re.compile(
    r"\s*BEGIN(?:\s+(?:DEFERRED|IMMEDIATE|EXCLUSIVE))?(?:\s+TRANSACTION)?\s*;?\s*",
    re.IGNORECASE,
)

_END: Final = re.compile(
    r"\s*(?P<verb>COMMIT|END|ROLLBACK)(?:\s+TRANSACTION)?\s*;?\s*", re.IGNORECASE
)

_PRAGMA: Final = re.compile(
    r"\s*PRAGMA\s+(?:main\s*\.\s*)?(?P<name>[A-Za-z_]+)\s*"
    r"(?:=\s*(?P<value>[^;]*?)|\(\s*(?P<arg>[^)]*?)\s*\))?\s*;?\s*",
    re.IGNORECASE,
)

_PRAGMA_START: Final = re.compile(r"\s*PRAGMA\b", re.IGNORECASE)


@lru_cache(maxsize=1024)
def to_psycopg(sql: str, named: bool = False) -> str:
    """``sql`` with qmark (or, ``named``, ``:name``) placeholders as psycopg's, ``%`` doubled."""

    def replace(match: re.Match[str]) -> str:
        kind = match.lastgroup
        text = match.group(0)
        if kind == "qmark":
            return text if named else "%s"
        if kind == "percent":
            return "%%"
        if kind == "name":
            return f"%({match.group('name')})s" if named else text
        # Literals, identifiers, comments and dollar bodies keep their text; psycopg would
        # still read a ``%`` in them as a placeholder.
        return text.replace("%", "%%")

    return _TOKEN.sub(replace, sql)


_HINT: Final = re.compile(
    r"""
      (?P<quoted>'(?:[^']|'')*'|"(?:[^"]|"")*")
    | (?P<hint>\s+INDEXED\s+BY\s+[A-Za-z_][A-Za-z0-9_]*\b|\s+NOT\s+INDEXED\b)
    """,
    re.VERBOSE | re.IGNORECASE,
)


@lru_cache(maxsize=1024)
def without_index_hints(sql: str) -> str:
    """``sql`` without SQLite's ``INDEXED BY name`` / ``NOT INDEXED`` (PostgreSQL has none).

    The hints only pin SQLite's choice of index; PostgreSQL's planner chooses on its own, so
    dropping them keeps the statement's meaning.
    """
    if "INDEXED" not in sql.upper():
        return sql
    return _HINT.sub(lambda m: m.group(0) if m.lastgroup == "quoted" else "", sql)


def begin_statement(sql: str) -> bool:
    """Whether ``sql`` is SQLite's ``BEGIN [DEFERRED|IMMEDIATE|EXCLUSIVE] [TRANSACTION]``."""
    return _BEGIN.fullmatch(sql) is not None


def end_statement(sql: str) -> str | None:
    """``"COMMIT"`` or ``"ROLLBACK"`` for a plain ``COMMIT``/``END``/``ROLLBACK``, else ``None``."""
    match = _END.fullmatch(sql)
    if match is None:
        return None
    return "ROLLBACK" if match.group("verb").upper() == "ROLLBACK" else "COMMIT"


def pragma(sql: str) -> tuple[str, str | None] | None:
    """``(name, value)`` of a ``PRAGMA`` statement (value ``None`` for a read), else ``None``.

    ``PRAGMA name = value`` and ``PRAGMA name(value)`` both give ``value``; a statement that
    starts with ``PRAGMA`` but does not parse gives ``("", None)``.
    """
    if not _PRAGMA_START.match(sql):
        return None
    match = _PRAGMA.fullmatch(sql)
    if match is None:
        return ("", None)
    value = match.group("value")
    if value is None:
        value = match.group("arg")
    return (match.group("name").lower(), None if value is None else value.strip())
