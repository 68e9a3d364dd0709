"""Processes of ended runs left on this machine (a node died with children running, and
another node settled their runs): every node's periodic sweep terminates them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SLEEPER = "import time; time.sleep(120)"


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _process(procs: list[subprocess.Popen[bytes]], invocation_id: str, db: str) -> int:
    env = {**os.environ, "LIONAGI_INVOCATION_ID": invocation_id, "LIONAGI_STUDIO_DB": db}
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env, start_new_session=True)
    procs.append(proc)
    return proc.pid


def _started(proc: subprocess.Popen[bytes]) -> bool:
    try:
        return b"LIONAGI_INVOCATION_ID=" in Path(f"/proc/{proc.pid}/environ").read_bytes()
    except OSError:
        return False


async def _invocation_of_completed_run(engine: Any, clock: Any, h: Any, tmp_path: Path) -> str:
    created = await engine.service.create(h.command_schedule(h.env_dump, str(tmp_path / "o")))
    await h.fire_due(engine, clock, created.next_fire_at)
    [run] = await h.runs_of(engine.conn, created.id)
    assert run.status == "completed"
    return str(run.invocation_id)


async def test_the_sweep_terminates_the_processes_of_ended_runs_only(
    make_engine, clock, h, tmp_path: Path, studio_db: str, spawned
) -> None:
    engine = await make_engine(clock=clock, reaper_interval_seconds=60.0)
    await engine.tick_once()  # the first sweep, with nothing to find
    ended = await _invocation_of_completed_run(engine, clock, h, tmp_path)
    flag = tmp_path / "release"
    blocked = await engine.service.create(h.command_schedule(h.blocker, str(flag), name="b"))
    await engine.tick_once()
    clock.set(blocked.next_fire_at)
    await engine.tick_once()
    [live] = await h.runs_of(engine.conn, blocked.id)
    _process(spawned, ended, studio_db)  # the orphan: spawned[0]
    same_id_other_db = _process(spawned, ended, str(tmp_path / "other.db"))
    of_a_live_run = _process(spawned, str(live.invocation_id), studio_db)
    not_a_runs = _process(spawned, "0123456789ab", studio_db)
    # Until each has exec'd (before, /proc shows the environment it forked with).
    await h.eventually(lambda: all(_started(p) for p in spawned))

    clock.advance(59.0)
    report = await engine.tick_once()
    assert report["children"] is None  # not due yet
    assert spawned[0].poll() is None
    clock.advance(1.0)
    report = await engine.tick_once()
    assert report["children"] == 1
    await h.eventually(lambda: spawned[0].poll() is not None, timeout=20)
    assert [p.poll() for p in spawned[1:]] == [None, None, None], (
        same_id_other_db,
        of_a_live_run,
        not_a_runs,
    )
    flag.touch()
    await engine.wait_idle()
