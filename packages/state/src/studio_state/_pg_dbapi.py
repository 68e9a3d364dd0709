"""A ``sqlite3.Connection``-shaped object over a psycopg 3 (sync) PostgreSQL connection.

``aiosqlite.Connection(connector, iter_chunk_size)`` runs ``connector()`` on its worker thread
and then drives whatever it returned with sqlite3's DB-API calls; :func:`studio_state.run_sync`
hands the same object to plain functions on that thread. :class:`PostgresConnection` answers
those calls on PostgreSQL, so Studio's stores, ``write_transaction``,
``run_write_transaction`` and ``run_sync`` run unchanged on it:

- autocommit (psycopg ``autocommit=True``): transactions are only the explicit
  ``BEGIN … COMMIT``/``ROLLBACK`` ones, as on SQLite's ``isolation_level=None``;
  ``BEGIN IMMEDIATE`` (and SQLite's other ``BEGIN`` forms) run as ``BEGIN`` (READ COMMITTED);
- statements with parameters are rewritten for psycopg (:mod:`._pg_sql`), rows are ``dict``
  under Studio's ``dict_row_factory`` (tuples with no row factory);
- ``PRAGMA`` statements are answered (:mod:`._pg_pragma`), errors mapped (:mod:`._pg_errors`);
- its cursors (:mod:`._pg_cursor`) hold each result whole, as read from the server.

One difference remains: a failed statement inside a transaction aborts the whole PostgreSQL
transaction (SQLite undoes only that statement). Such a transaction can only be rolled back;
committing it raises :class:`PostgresOperationalError` (psycopg would silently roll back).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row
from psycopg.types.string import TextLoader

from ._backend import redact
from ._connection import dict_row_factory
from ._exceptions import InvalidSetting
from ._pg_cursor import PostgresCursor, RowFactory
from ._pg_errors import (
    OPERATIONAL_CLASSES,
    PostgresError,
    PostgresIntegrityError,
    PostgresOperationalError,
)
from ._pg_pragma import PragmaState, answer
from ._pg_sql import begin_statement, end_statement, pragma, to_psycopg, without_index_hints

_IN_TRANSACTION: Final = (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR)
_KEY_COLUMNS: Final = re.compile(r"Key \((.+?)\)=")
_CHANGES: Final = ("INSERT", "UPDATE", "DELETE", "MERGE")
# Unless the URL says otherwise: give up connecting after 10 s, and notice a server that
# vanished without closing the socket (a cut network, a dead host) after about 25 s of
# silence instead of the operating system's two hours, so the statement waiting on it fails
# with an operational error rather than hanging the connection's thread.
_DEFAULTS: Final = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
# A session left idle inside a transaction this long is ended by the server (the transaction
# rolls back): a node that hangs mid-transaction (a stopped process, a cut network) must not
# hold its row locks past a failover, which takes about as long (the election's session).
_IDLE_IN_TRANSACTION: Final = "idle_in_transaction_session_timeout"
_IDLE_IN_TRANSACTION_MS: Final = 10_000


def _sqlite_shape(exc: psycopg.Error) -> str:
    """The start of SQLite's message for a constraint failure: the same words for a reader on
    either backend (nothing decides on them: :func:`studio_state.classify_db_error` reads the
    SQLSTATE and the constraint's name)."""
    diag = exc.diag
    table = diag.table_name or "?"
    state = exc.sqlstate or ""
    if state == "23505":
        found = _KEY_COLUMNS.search(diag.message_detail or "")
        columns = found.group(1).split(", ") if found else [diag.constraint_name or "?"]
        return "UNIQUE constraint failed: " + ", ".join(f"{table}.{c}" for c in columns)
    if state == "23502":
        return f"NOT NULL constraint failed: {table}.{diag.column_name or '?'}"
    if state == "23503":
        return "FOREIGN KEY constraint failed"
    if state == "23514":
        return f"CHECK constraint failed: {diag.constraint_name or '?'}"
    return "constraint failed"


def map_error(exc: psycopg.Error) -> PostgresError:
    """The ``sqlite3``-class error for a psycopg error (set ``from exc`` by the caller)."""
    text = str(exc).strip() or type(exc).__name__
    state = exc.sqlstate
    if state is not None and state.startswith("23"):
        # PostgreSQL's primary message only: its DETAIL quotes the offending values (a token,
        # a name), which SQLite's message never holds; they stay on the psycopg ``__cause__``.
        primary = exc.diag.message_primary or text
        return PostgresIntegrityError(f"{_sqlite_shape(exc)} ({primary})", state)
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) or (
        state is not None and state[:2] in OPERATIONAL_CLASSES
    ):
        return PostgresOperationalError(text, state)
    return PostgresError(text, state)


def _no_params(params: object) -> bool:
    if params is None:
        return True
    if isinstance(params, Mapping | Sequence) and not isinstance(params, str | bytes):
        return len(params) == 0
    return False


def _query(sql: str, params: Any) -> tuple[str, Any]:
    """``(statement, params)`` for psycopg; no parameters: the text as written."""
    if _no_params(params):
        return sql, None
    if isinstance(params, Mapping):
        return to_psycopg(sql, True), params
    return to_psycopg(sql), params


class PostgresConnection:
    """A ``sqlite3.Connection``-shaped object over a psycopg autocommit connection.

    ``raw`` is the psycopg connection (for PostgreSQL-only work, such as the outbox's
    schema); ``backend`` is ``"postgresql"``. It is safe to use from one thread at a time
    (aiosqlite's worker thread drives it).
    """

    backend: Final = "postgresql"
    isolation_level: None = None

    def __init__(self, raw: psycopg.Connection[Any], *, synchronous: int = 2) -> None:
        self.raw = raw
        self.row_factory: RowFactory = None
        self._pragmas = PragmaState(synchronous=synchronous)
        self._in_transaction = False
        self._changes = 0

    @property
    def in_transaction(self) -> bool:
        """True exactly between an explicit ``BEGIN`` and its ``COMMIT``/``ROLLBACK``."""
        return self._in_transaction

    @property
    def total_changes(self) -> int:
        """Rows inserted, updated or deleted through this object since it was opened."""
        return self._changes

    def cursor(self) -> PostgresCursor:
        """A new cursor."""
        return PostgresCursor(self)

    def execute(self, sql: str, parameters: Any = ()) -> PostgresCursor:
        """Run one statement (or, without parameters, a script) on a new cursor."""
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any]) -> PostgresCursor:
        """Run ``sql`` once per parameter set, on a new cursor."""
        return self.cursor().executemany(sql, seq_of_parameters)

    def executescript(self, sql_script: str) -> PostgresCursor:
        """Run a script of several statements (sent as written, no parameters)."""
        return self.cursor().execute(sql_script, None)

    def interrupt(self) -> None:
        """Ask the server to cancel the statement running now (callable from any thread)."""
        self.raw.cancel_safe()

    def commit(self) -> None:
        """Commit the open transaction (nothing when none is open).

        A transaction aborted by a failed statement is rolled back and
        :class:`PostgresOperationalError` raised: its writes did not happen.
        """
        self._end("COMMIT")

    def rollback(self) -> None:
        """Roll back the open transaction (nothing when none is open)."""
        self._end("ROLLBACK")

    def close(self) -> None:
        """Close the connection (an open transaction is rolled back by the server)."""
        self._in_transaction = False
        self.raw.close()

    def __enter__(self) -> PostgresConnection:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """As sqlite3: commit the open transaction, or roll it back on an exception."""
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def _status(self) -> None:
        self._in_transaction = self.raw.info.transaction_status in _IN_TRANSACTION

    def _end(self, command: str) -> None:
        status = self.raw.info.transaction_status
        if status == pq.TransactionStatus.IDLE:
            self._in_transaction = False
            return
        aborted = status == pq.TransactionStatus.INERROR
        try:
            self.raw.execute("ROLLBACK" if aborted else command)
        except psycopg.Error as exc:
            raise map_error(exc) from exc
        finally:
            self._status()
        if aborted and command == "COMMIT":
            raise PostgresOperationalError(
                "cannot commit: a statement failed earlier in this transaction, so PostgreSQL "
                "aborted it; it has been rolled back",
                "25P02",
            )

    def _run(self, cursor: PostgresCursor, sql: str, params: Any, *, many: bool) -> None:
        sql = without_index_hints(sql)
        if not many:
            statement = pragma(sql)
            if statement is not None:
                columns, answered = answer(self._pragmas, statement[0], statement[1], self._value)
                cursor._set(columns or None, answered, -1)
                return
            ending = end_statement(sql)
            if ending is not None:
                self._end(ending)
                cursor._set(None, [], -1)
                return
            if begin_statement(sql):
                sql = "BEGIN"
        try:
            with self.raw.cursor(row_factory=tuple_row) as pg:
                if many:
                    batches = list(params)
                    if not batches:
                        cursor._set(None, [], 0)
                        return
                    pg.executemany(to_psycopg(sql, isinstance(batches[0], Mapping)), batches)
                else:
                    pg.execute(*_query(sql, params))
                described = pg.description
                names = None if described is None else [c.name for c in described]
                rows = pg.fetchall() if names is not None else []
                rowcount = pg.rowcount
                changed = (pg.statusmessage or "").startswith(_CHANGES)
        except psycopg.Error as exc:
            raise map_error(exc) from exc
        finally:
            self._status()
        if changed:
            self._changes += max(rowcount, 0)
        # As sqlite3: rowcount counts the rows a change touched; -1 for anything else.
        cursor._set(names, rows, rowcount if changed else -1)

    def _value(self, sql: str) -> Any:
        try:
            cursor = self.raw.execute(sql)
            row = cursor.fetchone() if cursor.description is not None else None
        except psycopg.Error as exc:
            raise map_error(exc) from exc
        finally:
            self._status()
        return None if row is None else row[0]


def _check_url(url: str) -> dict[str, Any]:
    """The URL's options; a URL libpq cannot parse (or whose port is not a number) is refused
    before connecting."""
    try:
        options = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise InvalidSetting(f"invalid PostgreSQL URL {redact(url)}: {exc}") from exc
    port = str(options.get("port") or "")
    if port and not all(part.strip().isdigit() for part in port.split(",")):
        raise InvalidSetting(f"invalid PostgreSQL URL {redact(url)}: port {port!r} is not a number")
    return options


def connect_postgres(
    url: str, *, synchronous: int = 2, application_name: str | None = None
) -> PostgresConnection:
    """Open ``url`` (autocommit) as a :class:`PostgresConnection` with ``dict`` rows."""
    given = _check_url(url)
    kwargs: dict[str, Any] = {"autocommit": True}
    kwargs.update({key: value for key, value in _DEFAULTS.items() if key not in given})
    options = str(given.get("options") or "")
    if _IDLE_IN_TRANSACTION not in options:
        kwargs["options"] = f"{options} -c {_IDLE_IN_TRANSACTION}={_IDLE_IN_TRANSACTION_MS}".strip()
    if application_name is not None:
        kwargs["application_name"] = application_name
    try:
        raw = psycopg.connect(url, **kwargs)
    except psycopg.ProgrammingError as exc:  # a malformed URL or option
        raise InvalidSetting(f"invalid PostgreSQL URL {redact(url)}: {exc}") from exc
    except psycopg.Error as exc:
        raise map_error(exc) from exc
    # JSON columns read back as the text stored, as on SQLite (Studio decodes them itself).
    for json_type in ("json", "jsonb"):
        raw.adapters.register_loader(json_type, TextLoader)
    conn = PostgresConnection(raw, synchronous=synchronous)
    conn.row_factory = dict_row_factory
    return conn
