"""The session's throwaway PostgreSQL cluster and a fresh database of it for each test.

Shared by this folder's conftest (the ``postgresql`` param of ``db_target``) and the
PostgreSQL suite's (``tests/postgres``: ``pg_cluster_dsn``, ``pg_dsn``). Both load this file
under one module name, ``studio_scheduler_core_test_pg_databases`` (``load_beside`` caches it
in ``sys.modules``), so one pytest session starts one cluster however many conftests ask for
it. psycopg is imported only when a database is made: the ``scheduler-core`` matrix entry
installs no psycopg and never selects the ``postgresql`` param.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from studio_state.testing_pg import PostgresUnavailable, start_cluster

_CLUSTER = pytest.StashKey[str]()
_databases = itertools.count()


def cluster_dsn(config: pytest.Config) -> str:
    """The DSN of the session's cluster, started on first use and stopped when pytest ends.

    Fails (never skips) when PostgreSQL's server binaries are missing.
    """
    if _CLUSTER not in config.stash:
        try:
            cluster = start_cluster()
        except PostgresUnavailable as exc:
            pytest.fail(str(exc), pytrace=False)
        config.add_cleanup(cluster.stop)
        config.stash[_CLUSTER] = cluster.dsn
    return config.stash[_CLUSTER]


@contextmanager
def fresh_database(dsn: str) -> Iterator[str]:
    """A new, empty database of the cluster at ``dsn``: its URL, dropped afterwards."""
    import psycopg

    name = f"test_{next(_databases)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield dsn.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
