"""Studio's PostgreSQL primitives (``pip install 'studio-state[postgres]'``, psycopg 3).

:class:`LeaderElection`: leader election for schedule evaluation by a session advisory lock
on a dedicated connection named ``studio:<node_id>``; a dead leader's lock is released with
its connection and another candidate takes over within ``tick_seconds``.
:func:`leading_node`: which node holds that lock now, read on any connection.
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "studio_state.postgres needs psycopg 3: pip install 'studio-state[postgres]'"
    ) from exc

from ._node import APPLICATION_PREFIX, check_node_id, default_node_id
from ._pg_leader import SCHEDULER_LOCK_KEY, LeaderElection
from ._pg_leading import leading_node

__all__ = [
    "APPLICATION_PREFIX",
    "SCHEDULER_LOCK_KEY",
    "LeaderElection",
    "check_node_id",
    "default_node_id",
    "leading_node",
]
