"""The outbox on PostgreSQL: schema, producers (psycopg sync/async, asyncpg) and delivery.

Public names are re-exported by :mod:`studio_outbox.postgres`.
"""
