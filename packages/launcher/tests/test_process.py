"""process_start_time / is_same_process / terminate_process_group on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from studio_launcher import (
    LaunchError,
    is_same_process,
    process_start_time,
    terminate_process_group,
)
from studio_launcher.testing import kill_quietly, pid_alive, proc_state, wait_for

PY = sys.executable


def _spawn_leader(code: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [PY, "-c", code, *args], stdin=subprocess.DEVNULL, start_new_session=True
    )


def test_start_time_of_a_fresh_process() -> None:
    before = time.time()
    child = _spawn_leader("import time; time.sleep(30)")
    after = time.time()
    try:
        started = process_start_time(child.pid)
        assert started is not None
        # clock-tick precision plus an integer boot time: a generous bound
        assert before - 2.0 <= started <= after + 2.0
        assert process_start_time(child.pid) == started  # stable
    finally:
        child.kill()
        child.wait()


def test_start_time_of_no_process() -> None:
    assert process_start_time(0) is None
    assert process_start_time(-5) is None
    assert process_start_time(2**22 + 12345) is None  # above the default pid_max


def test_is_same_process() -> None:
    child = _spawn_leader("import time; time.sleep(30)")
    try:
        started = process_start_time(child.pid)
        assert is_same_process(child.pid, started)
        assert started is not None
        assert is_same_process(child.pid, started + 0.5)
        assert not is_same_process(child.pid, started - 60)  # a reused pid: different start
        assert not is_same_process(child.pid, started + 1.5, tolerance=1.0)
        assert not is_same_process(child.pid, None)
    finally:
        child.kill()
        child.wait()
    assert not is_same_process(child.pid, started)


def test_a_zombie_is_not_the_same_live_process() -> None:
    child = _spawn_leader("pass")
    started = process_start_time(child.pid)
    try:
        assert wait_for(lambda: proc_state(child.pid) == "Z", 30)
        assert not is_same_process(child.pid, started)
    finally:
        child.wait()


GROUP = """
import os, signal, subprocess, sys, time
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the leader itself dies on SIGTERM
open(sys.argv[1], "w").write(str(g.pid))
time.sleep(60)
"""


@pytest.mark.parametrize("grandchild", ["default", "ignore"])
async def test_terminate_process_group(grandchild: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "g.pid"
    leader = _spawn_leader(GROUP, str(pid_file), grandchild)
    try:
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text() != "", 30)
        grandchild_pid = int(pid_file.read_text())
        assert is_same_process(leader.pid, process_start_time(leader.pid))
        started = time.monotonic()
        assert await terminate_process_group(leader.pid, grace=0.5) is True
        if grandchild == "ignore":
            assert time.monotonic() - started >= 0.4  # it waited the grace before SIGKILL
        leader.wait(timeout=10)
        assert wait_for(lambda: not pid_alive(grandchild_pid), 10)
    finally:
        leader.kill()
        leader.wait()
        if pid_file.exists() and pid_file.read_text():
            kill_quietly(int(pid_file.read_text()))


async def test_terminate_an_already_gone_group() -> None:
    child = _spawn_leader("pass")
    child.wait()
    assert await terminate_process_group(child.pid, grace=0.1) is True


@pytest.mark.parametrize("pid", [0, 1, -1])
async def test_terminate_refuses_special_pids(pid: int) -> None:
    with pytest.raises(LaunchError):
        await terminate_process_group(pid)


async def test_terminate_refuses_our_own_group() -> None:
    with pytest.raises(LaunchError, match="own group"):
        await terminate_process_group(os.getpgrp())


_OPENED: list[str] | None = None


def _record_open(event: str, args: tuple[object, ...]) -> None:
    if _OPENED is not None and event == "open" and args and isinstance(args[0], str):
        _OPENED.append(args[0])


sys.addaudithook(_record_open)


def test_boot_time_is_read_once_per_process_not_per_call() -> None:
    global _OPENED
    first = process_start_time(os.getpid())
    _OPENED = []
    try:
        again = [process_start_time(os.getpid()) for _ in range(3)]
        opened = list(_OPENED)
    finally:
        _OPENED = None
    assert again == [first] * 3
    assert f"/proc/{os.getpid()}/stat" in opened  # the hook does see the per-pid reads
    assert "/proc/stat" not in opened
