"""studio-state: the shared SQLite kernel of Studio.

Connections with Studio's PRAGMAs, a per-package migration runner, the ``status_transitions``
audit table with a guarded transition helper, write transactions that join a caller's open
transaction, an injectable clock and 12-hex ids.
"""

from __future__ import annotations

from .__about__ import __version__
from ._clock import Clock, ManualClock, system_clock
from ._connection import (
    BUSY_TIMEOUT_MS,
    DEFAULT_SYNCHRONOUS,
    SYNCHRONOUS_MODES,
    check_synchronous,
    connect,
    dict_row_factory,
    open_connection,
)
from ._exceptions import (
    InvalidSetting,
    InvalidTransition,
    MigrationError,
    SchemaTooNew,
    StateError,
)
from ._ids import new_id
from ._migrations import Migration, applied_version, migrate, split_statements
from ._query import Row, execute, execute_many, fetch_all, fetch_one, fetch_value
from ._schema import ENTITY_TYPES, ensure_schema
from ._transactions import in_owned_transaction, write_transaction
from ._transitions import Transition, record_transition, record_transitions, transition

__all__ = [
    "BUSY_TIMEOUT_MS",
    "Clock",
    "DEFAULT_SYNCHRONOUS",
    "ENTITY_TYPES",
    "InvalidSetting",
    "InvalidTransition",
    "ManualClock",
    "Migration",
    "MigrationError",
    "Row",
    "SYNCHRONOUS_MODES",
    "SchemaTooNew",
    "StateError",
    "Transition",
    "__version__",
    "applied_version",
    "check_synchronous",
    "connect",
    "dict_row_factory",
    "ensure_schema",
    "execute",
    "execute_many",
    "fetch_all",
    "fetch_one",
    "fetch_value",
    "in_owned_transaction",
    "migrate",
    "new_id",
    "open_connection",
    "record_transition",
    "record_transitions",
    "split_statements",
    "system_clock",
    "transition",
    "write_transaction",
]
