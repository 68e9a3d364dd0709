"""The ``sqlite3.Cursor``-shaped cursor of :class:`~._pg_dbapi.PostgresConnection`.

Its connection runs each statement and hands the cursor every row at once (psycopg has read
them from the server already); the cursor only keeps them and shapes them as the row factory
asks, so fetching never touches the server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ._connection import dict_row_factory

if TYPE_CHECKING:
    from ._pg_dbapi import PostgresConnection

RowFactory = Callable[[Any, tuple[Any, ...]], Any] | None
Description = tuple[tuple[str, None, None, None, None, None, None], ...]


def _description(names: Iterable[str]) -> Description:
    return tuple((name, None, None, None, None, None, None) for name in names)


class PostgresCursor:
    """A ``sqlite3.Cursor``-shaped cursor of :class:`PostgresConnection`."""

    arraysize: int
    lastrowid: None
    """Always ``None``: PostgreSQL has no rowid (use ``RETURNING``)."""

    def __init__(self, connection: PostgresConnection) -> None:
        self._connection = connection
        self._rows: list[tuple[Any, ...]] = []
        self._names: list[str] = []
        self._position = 0
        self._description: Description | None = None
        self.rowcount = -1
        self.arraysize = 1
        self.lastrowid = None
        self.row_factory: RowFactory = connection.row_factory
        """As sqlite3: the connection's at creation; may be changed before fetching."""

    @property
    def connection(self) -> PostgresConnection:
        """The connection this cursor runs on."""
        return self._connection

    @property
    def description(self) -> Description | None:
        """Column names of the last result as sqlite3's 7-tuples (``None``: no result)."""
        return self._description

    def execute(self, sql: str, parameters: Any = ()) -> PostgresCursor:
        """Run one statement (or, without parameters, a script) and keep its rows."""
        self._connection._run(self, sql, parameters, many=False)
        return self

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any]) -> PostgresCursor:
        """Run ``sql`` for each parameter set; ``rowcount`` is the total of changed rows."""
        self._connection._run(self, sql, seq_of_parameters, many=True)
        return self

    def executescript(self, sql_script: str) -> PostgresCursor:
        """Run a script of several statements (sent as written, no parameters)."""
        return self.execute(sql_script, None)

    def _set(self, names: Sequence[str] | None, rows: list[Any], rowcount: int) -> None:
        self._description = None if names is None else _description(names)
        self._names = [] if names is None else list(names)
        self._rows = rows
        self._position = 0
        self.rowcount = rowcount

    def _shape(self, rows: list[tuple[Any, ...]]) -> list[Any]:
        """Rows as the row factory makes them (``dict`` for Studio's, else its own call)."""
        factory = self.row_factory
        if factory is None:
            return rows
        if factory is dict_row_factory:
            names = self._names
            return [dict(zip(names, row, strict=True)) for row in rows]
        return [factory(self, row) for row in rows]

    def fetchone(self) -> Any:
        """The next row, or ``None``."""
        if self._position >= len(self._rows):
            return None
        row = self._rows[self._position]
        self._position += 1
        return self._shape([row])[0]

    def fetchmany(self, size: int | None = None) -> list[Any]:
        """Up to ``size`` (default ``arraysize``) next rows."""
        count = self.arraysize if size is None else size
        rows = self._rows[self._position : self._position + count]
        self._position += len(rows)
        return self._shape(rows)

    def fetchall(self) -> list[Any]:
        """Every remaining row."""
        rows = self._rows[self._position :]
        self._position = len(self._rows)
        return self._shape(rows)

    def close(self) -> None:
        """Drop the rows (the results were already read from the server)."""
        self._rows = []
        self._position = 0

    def __iter__(self) -> Iterator[Any]:
        while self._position < len(self._rows):
            yield self.fetchone()
