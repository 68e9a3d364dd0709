"""The pidfd child watch: no thread per child, no file descriptor left behind on any path."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
from pathlib import Path

import pytest

from studio_launcher import DeadlineExceeded, SpawnFailed, spawn_and_wait
from studio_launcher._child import pidfd_supported

PY = sys.executable


def _fds() -> dict[str, str]:
    """This process's open file descriptors and what each points to.

    The listing's own descriptor is closed by the time its entry is read back, so it drops out
    (it took the lowest free number, which differs from one listing to the next).
    """
    open_fds: dict[str, str] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            open_fds[name] = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:
            continue
    return open_fds


async def test_concurrent_children_start_no_thread() -> None:
    assert pidfd_supported()  # this machine has pidfds: the watch must use them
    before = threading.active_count()
    peak = before

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, threading.active_count())
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        results = await asyncio.gather(
            *(spawn_and_wait(["sleep", "0.3"], f"inv{n}") for n in range(16))
        )
    finally:
        watcher.cancel()
    assert results == [(0, "")] * 16
    # asyncio's child watcher starts one waiting thread per child; the pidfd watch none.
    assert peak == before


async def test_no_file_descriptor_outlives_a_run_on_any_path(tmp_path: Path) -> None:
    await spawn_and_wait(["true"], "warm-up", log_path=tmp_path / "warm.log")
    gc.collect()  # what earlier tests left to the collector closes now, not mid-test
    before = _fds()
    for n in range(20):  # completion, with and without a log and the descendant sweep
        await spawn_and_wait(["true"], f"ok{n}")
        await spawn_and_wait(
            [PY, "-c", "import sys; print('out'); sys.stderr.write('err')"],
            f"log{n}",
            log_path=tmp_path / f"{n}.log",
            kill_descendants=True,
        )
    with pytest.raises(SpawnFailed):  # exec failure
        await spawn_and_wait([str(tmp_path / "missing")], "missing")
    with pytest.raises(DeadlineExceeded):  # deadline
        await spawn_and_wait(["sleep", "30"], "deadline", deadline_seconds=0.2)
    task = asyncio.create_task(  # cancellation
        spawn_and_wait(["sleep", "30"], "cancel", log_path=tmp_path / "c.log")
    )
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    after = _fds()
    assert dict(after.items() - before.items()) == {}  # nothing opened here is left open
