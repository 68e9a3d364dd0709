"""The outbox for producers on PostgreSQL (``pip install 'studio-outbox[postgres]'``).

Takes a psycopg 3 ``AsyncConnection``; :func:`enqueue_dispatch` joins the transaction the
producer has open on it, exactly as the SQLite functions do. Delivery on PostgreSQL is not
part of this module yet.
"""

from __future__ import annotations

from ._postgres import MIGRATIONS, STATE_MIGRATIONS, enqueue_dispatch, enqueue_many, ensure_schema

__all__ = ["MIGRATIONS", "STATE_MIGRATIONS", "enqueue_dispatch", "enqueue_many", "ensure_schema"]
