from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest

from studio_state import InvalidSetting
from studio_state.postgres import LeaderElection, default_node_id

TICK = 0.5


async def _wait_for(predicate: object, timeout: float) -> float:
    """Seconds until ``predicate()`` is true; fails after ``timeout``."""
    started = time.monotonic()
    while not predicate():  # type: ignore[operator]
        if time.monotonic() - started > timeout:
            pytest.fail(f"not within {timeout}s")
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def _application_names(dsn: str) -> set[str]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'studio:%'"
        )
        return {str(row[0]) for row in await cur.fetchall()}


async def test_one_leader_and_failover_within_a_tick_when_its_backend_dies(
    pg_cluster_dsn: str,
) -> None:
    first = LeaderElection(pg_cluster_dsn, node_id="node-a", tick_seconds=TICK)
    second = LeaderElection(pg_cluster_dsn, node_id="node-b", tick_seconds=TICK)
    stop = asyncio.Event()
    changes: list[tuple[str, bool]] = []
    runs = [
        asyncio.ensure_future(c.run(stop, lambda now, c=c: changes.append((c.node_id, now))))
        for c in (first, second)
    ]
    try:
        await _wait_for(lambda: first.is_leader or second.is_leader, 5)
        await asyncio.sleep(3 * TICK)
        assert first.is_leader != second.is_leader  # exactly one
        assert await _application_names(pg_cluster_dsn) == {"studio:node-a", "studio:node-b"}
        leader, follower = (first, second) if first.is_leader else (second, first)
        async with await psycopg.AsyncConnection.connect(pg_cluster_dsn, autocommit=True) as conn:
            await conn.execute("SELECT pg_terminate_backend(%s)", (leader.backend_pid,))
        took = await _wait_for(lambda: follower.is_leader, 10)
        assert took <= TICK + 1.0  # within one tick (plus generous scheduling slack)
        await _wait_for(lambda: not leader.is_leader, 2 * TICK + 1)
        await asyncio.sleep(3 * TICK)
        assert follower.is_leader and not leader.is_leader  # the old leader stays a follower
    finally:
        stop.set()
        await asyncio.gather(*runs)
    assert (leader.node_id, False) in changes and (follower.node_id, True) in changes
    assert not first.is_leader and not second.is_leader  # stopped: both gave up


_CANDIDATE = textwrap.dedent(
    """
    import asyncio, sys
    from studio_state.postgres import LeaderElection

    async def main() -> None:
        election = LeaderElection(sys.argv[1], node_id="child", tick_seconds=0.5)
        await election.run(
            asyncio.Event(), lambda now: print("leader" if now else "follower", flush=True)
        )

    asyncio.run(main())
    """
)


async def test_a_killed_leader_process_is_replaced_within_a_tick(pg_cluster_dsn: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _CANDIDATE, pg_cluster_dsn], stdout=subprocess.PIPE, text=True
    )
    local = LeaderElection(pg_cluster_dsn, node_id="local", tick_seconds=TICK)
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 30)
        assert line.strip() == "leader"
        assert not await local.tick()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        killed = time.monotonic()
        while not await local.tick():
            assert time.monotonic() - killed < 5, "no takeover"
            await asyncio.sleep(TICK)
        assert time.monotonic() - killed <= TICK + 1.0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
        await local.close()
    deadline = time.monotonic() + 10
    while await _application_names(pg_cluster_dsn) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # the server ends the closed sessions' backends
    assert await _application_names(pg_cluster_dsn) == set()


async def test_close_hands_over_at_once_and_an_unreachable_server_is_not_an_error(
    pg_cluster_dsn: str,
) -> None:
    first = LeaderElection(pg_cluster_dsn, tick_seconds=TICK)
    second = LeaderElection(pg_cluster_dsn, tick_seconds=TICK)
    assert first.node_id == default_node_id() == f"{os.uname().nodename}:{os.getpid()}"
    assert await first.tick() and not await second.tick()
    await first.close()
    assert await second.tick()
    await second.close()
    nowhere = LeaderElection(
        "postgresql://postgres@127.0.0.1:1/postgres", node_id="x", connect_timeout=2
    )
    assert not await nowhere.tick()
    assert nowhere.backend_pid is None


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"node_id": ""}, "node_id"),
        ({"node_id": "n" * 57}, "node_id"),
        ({"node_id": "caf\u00e9"}, "node_id"),
        ({"tick_seconds": 0}, "tick_seconds"),
        ({"tick_seconds": float("nan")}, "tick_seconds"),
        ({"key": 2**63}, "key"),
    ],
)
def test_bad_settings_are_refused_naming_them(arguments: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidSetting, match=named):
        LeaderElection("postgresql://postgres@127.0.0.1:1/postgres", **arguments)  # type: ignore[arg-type]
