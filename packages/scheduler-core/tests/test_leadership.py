"""Leadership: only the engine that leads evaluates schedules; taking over reconciles what a
previous leader left running, never this engine's own runs."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import (
    FileLockLeadership,
    FireRefused,
    SchedulerEngine,
    SchedulerSettings,
    read_node,
    read_run_status,
)
from studio_scheduler_core.abc import Leadership
from studio_state import fetch_all
from studio_state.testing import eventually


class Baton:
    """A leadership handed over by the test (the seam's contract, without a database lock)."""

    def __init__(self, node_id: str, *, leading: bool) -> None:
        self._node_id = node_id
        self.leading = leading
        self.released = False

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def is_leader(self) -> bool:
        return self.leading

    async def acquire(self) -> None:
        self.released = False

    async def tick(self) -> bool:
        return self.leading

    async def release(self) -> None:
        self.released = True
        self.leading = False


async def _runs(conn: Any, schedule_id: str) -> list[dict[str, Any]]:
    return await fetch_all(
        conn,
        "SELECT id, status, status_reason_code FROM schedule_runs WHERE schedule_id = ? "
        "ORDER BY fired_at",
        (schedule_id,),
    )


def test_the_implementations_follow_the_seam(db_path: Path) -> None:
    assert isinstance(FileLockLeadership(db_path), Leadership)
    assert isinstance(Baton("n", leading=True), Leadership)


@pytest.mark.sqlite_only("the PostgreSQL engine leads through an advisory lock, not a file lock")
async def test_on_sqlite_the_started_engine_leads_while_it_holds_the_lock(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(clock=clock)
    health = engine.health()
    assert (health["leader"], health["backend"]) == (True, "sqlite")
    assert health["node_id"] == f"{socket.gethostname()}:{os.getpid()}"
    assert isinstance(engine.leadership, FileLockLeadership)
    await engine.stop()
    assert engine.health()["leader"] is False and not engine.leadership.is_leader


async def test_a_follower_evaluates_nothing_until_it_leads(
    db_target: str, settings: SchedulerSettings, clock: Any, h: Any
) -> None:
    baton = Baton("node-b", leading=False)
    engine = SchedulerEngine(db_target, settings=settings, clock=clock, leadership=baton)
    await engine.start(loop=False)
    try:
        created = await engine.service.create(h.command_schedule(h.blocker, "/nonexistent"))
        clock.advance(61)
        report = await engine.tick_once()
        # A follower delivers, works the queue and sweeps its own machine; it evaluates nothing.
        assert report["leader"] is False
        assert set(report) == {"leader", "dispatch", "worker", "children"}
        assert await _runs(engine.conn, created.id) == []
        health = engine.health()
        assert (health["leader"], health["node_id"]) == (False, "node-b")
        assert health["last_tick_at"] == clock(), "a follower's tick is alive"

        with pytest.raises(FireRefused) as refused:
            await engine.fire_now(created.id)
        assert refused.value.reason_code == "schedule.refused.not_leader"
        assert await _runs(engine.conn, created.id) == []

        baton.leading = True
        report = await engine.tick_once()
        assert "schedules" in report and engine.health()["leader"] is True
        (run,) = await _runs(engine.conn, created.id)
        assert run["status"] == "running"
    finally:
        await engine.stop()
    assert baton.released


async def test_taking_over_reconciles_others_runs_but_never_its_own(
    db_target: str, settings: SchedulerSettings, clock: Any, h: Any, tmp_path: Path
) -> None:
    flag = tmp_path / "release"
    batons = [Baton("a", leading=True), Baton("b", leading=False)]
    a, b = (
        SchedulerEngine(db_target, settings=settings, clock=clock, leadership=baton)
        for baton in batons
    )
    await a.start(loop=False)
    await b.start(loop=False)
    try:
        theirs = await a.service.create(h.command_schedule(h.blocker, str(flag), name="a"))
        clock.advance(61)
        await a.tick_once()
        (left,) = await _runs(a.conn, theirs.id)
        assert left["status"] == "running"

        # a stops leading (still alive); b takes over and owns nothing of a's
        batons[0].leading, batons[1].leading = False, True
        assert (await a.tick_once())["leader"] is False
        mine = await b.service.create(h.command_schedule(h.blocker, str(flag), name="b"))
        await b.tick_once()
        (lost,) = await _runs(b.conn, theirs.id)
        assert (lost["status"], lost["status_reason_code"]) == (
            "failed",
            "run.failed.node_lost",
        )
        clock.advance(61)
        await b.tick_once()
        (own,) = await _runs(b.conn, mine.id)
        assert own["status"] == "running"

        batons[1].leading = False
        await b.tick_once()
        batons[1].leading = True
        await b.tick_once()  # leads again: takes over, and its own run is left alone
        (still,) = await _runs(b.conn, mine.id)
        assert still["status"] == "running"
    finally:
        flag.touch()
        for engine in (a, b):
            await engine.wait_idle()
            await engine.stop()


async def test_a_run_names_the_node_that_ran_it_and_the_node_its_url(
    db_target: str, settings: SchedulerSettings, clock: Any, h: Any, tmp_path: Path
) -> None:
    flag = tmp_path / "release"

    def engine(url: str | None) -> SchedulerEngine:
        own = SchedulerSettings(**{**settings.__dict__, "node_url": url})
        baton = Baton("node-a", leading=True)
        return SchedulerEngine(db_target, settings=own, clock=clock, leadership=baton)

    first = engine("http://10.0.0.5:8765")
    await first.start(loop=False)
    try:
        node = await read_node(first.conn, "node-a")
        assert node is not None and node.url == "http://10.0.0.5:8765"
        assert node.started_at == node.seen_at == clock()
        assert await read_node(first.conn, "node-b") is None
        created = await first.service.create(h.command_schedule(h.blocker, str(flag)))
        clock.advance(61)
        await first.tick_once()
        (run,) = await _runs(first.conn, created.id)

        async def named() -> dict[str, Any] | None:
            row = await read_run_status(first.conn, run["id"])
            return row if row is not None and row.node_id is not None else None

        assert (await eventually(named)).node_id == "node-a"
        flag.write_text("go")
    finally:
        await first.stop()

    # Started again under the same name, without a URL: the node's row follows.
    clock.advance(5)
    again = engine(None)
    await again.start(loop=False)
    try:
        node = await read_node(again.conn, "node-a")
        assert node is not None and node.url is None and node.started_at == clock()
    finally:
        await again.stop()


async def test_a_follower_claims_queued_ad_hoc_runs_but_fires_no_schedule(
    db_target: str, settings: SchedulerSettings, clock: Any, h: Any, tmp_path: Path
) -> None:
    flag = tmp_path / "release"
    flag.write_text("go")
    follower = SchedulerEngine(
        db_target, settings=settings, clock=clock, leadership=Baton("node-b", leading=False)
    )
    await follower.start(loop=False)
    try:
        created = await follower.service.create(h.command_schedule(h.blocker, str(flag)))
        action = h.command_schedule(h.blocker, str(flag))
        queued = await follower.runs.enqueue(
            {key: action[key] for key in ("action_kind", "action_command", "action_command_args")}
        )
        clock.advance(61)
        report = await follower.tick_once()
        assert report["leader"] is False and "worker" in report
        assert await _runs(follower.conn, created.id) == []

        async def ended() -> dict[str, Any] | None:
            row = await read_run_status(follower.conn, queued.id)
            return row if row is not None and row.status == "completed" else None

        assert (await eventually(ended)).node_id == "node-b"
    finally:
        await follower.stop()
