"""studio-state: the shared SQLite kernel of Studio.

Connections (a SQLite file with Studio's PRAGMAs, or a PostgreSQL URL behind the same
``aiosqlite.Connection`` interface), a per-package migration runner, the ``status_transitions``
audit table with a guarded transition helper, write transactions that join a caller's open
transaction (also as one trip to the connection's thread: ``run_write_transaction``), an
injectable clock and 12-hex ids.
"""

from __future__ import annotations

from .__about__ import __version__
from ._audit import TransitionFilter, read_transitions
from ._backend import Backend, backend_of, is_postgres
from ._clock import Clock, ManualClock, system_clock
from ._complete import run_to_completion
from ._connection import (
    BUSY_TIMEOUT_MS,
    DEFAULT_SYNCHRONOUS,
    SYNCHRONOUS_MODES,
    check_synchronous,
    connect,
    connect_sync,
    dict_row_factory,
    open_connection,
)
from ._db_errors import (
    DbErrorClass,
    ErrorKind,
    StorageFault,
    classify_db_error,
    is_busy_error,
    storage_fault_of,
    violates,
)
from ._exceptions import (
    ConnectionClosed,
    InvalidSetting,
    InvalidTransition,
    MigrationError,
    SchemaTooNew,
    StateError,
    SynchronousInTransaction,
)
from ._hop import run_sync
from ._ids import new_id
from ._migrations import (
    POSTGRES_MIGRATION_LOCK,
    Migration,
    applied_version,
    migrate,
    split_statements,
)
from ._node import check_node_id, default_node_id
from ._pg_errors import PostgresError, PostgresIntegrityError, PostgresOperationalError
from ._query import (
    Row,
    execute,
    execute_many,
    fetch_all,
    fetch_ids_in,
    fetch_one,
    fetch_value,
)
from ._row_lock import lock_row, lock_rows
from ._schema import ENTITY_TYPES, STATE_MIGRATIONS, ensure_schema
from ._transactions import in_owned_transaction, run_write_transaction, write_transaction
from ._transitions import (
    Transition,
    record_transition,
    record_transition_sync,
    record_transitions,
    record_transitions_sync,
    transition,
    transition_sync,
)

__all__ = [
    "BUSY_TIMEOUT_MS",
    "Backend",
    "Clock",
    "ConnectionClosed",
    "DEFAULT_SYNCHRONOUS",
    "DbErrorClass",
    "ENTITY_TYPES",
    "ErrorKind",
    "InvalidSetting",
    "InvalidTransition",
    "ManualClock",
    "Migration",
    "MigrationError",
    "POSTGRES_MIGRATION_LOCK",
    "PostgresError",
    "PostgresIntegrityError",
    "PostgresOperationalError",
    "Row",
    "STATE_MIGRATIONS",
    "SYNCHRONOUS_MODES",
    "SchemaTooNew",
    "StateError",
    "StorageFault",
    "SynchronousInTransaction",
    "Transition",
    "TransitionFilter",
    "__version__",
    "applied_version",
    "backend_of",
    "check_node_id",
    "check_synchronous",
    "classify_db_error",
    "connect",
    "connect_sync",
    "default_node_id",
    "dict_row_factory",
    "ensure_schema",
    "execute",
    "execute_many",
    "fetch_all",
    "fetch_ids_in",
    "fetch_one",
    "fetch_value",
    "in_owned_transaction",
    "is_busy_error",
    "is_postgres",
    "lock_row",
    "lock_rows",
    "migrate",
    "new_id",
    "open_connection",
    "read_transitions",
    "record_transition",
    "record_transition_sync",
    "record_transitions",
    "record_transitions_sync",
    "run_sync",
    "run_to_completion",
    "run_write_transaction",
    "split_statements",
    "storage_fault_of",
    "system_clock",
    "transition",
    "transition_sync",
    "violates",
    "write_transaction",
]
