"""No process outlives its run: descendants that left the group (setsid, daemonising) too.

Every test runs real children that start real grandchildren; "gone" here means no /proc entry
at all (killed *and* reaped: no zombie left behind).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from studio_launcher import (
    DeadlineExceeded,
    enable_subreaper,
    spawn_and_wait,
    terminate_descendants,
)
from studio_launcher.testing import eventually, kill_quietly, pid_alive, proc_state, wait_for

PY = sys.executable

# The child starts a grandchild in a new session (setsid), records its pid, then does `then`.
SETSID = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", sys.argv[2]], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
open(sys.argv[1], "w").write(str(g.pid))
{then}
"""

# The child daemonises a grandchild the classic way: fork, setsid, fork, the middle one exits.
# The pid file gets "MIDDLE DAEMON".
DAEMON = """
import os, sys, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    os.write(w, (str(os.getpid()) + " ").encode())
    if os.fork() == 0:
        os.close(r)
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        {daemon}
        os._exit(0)
    os._exit(0)
os.close(w)
pid = b""
while True:
    chunk = os.read(r, 64)
    if not chunk:
        break
    pid += chunk
open(sys.argv[1], "w").write(pid.decode())
{then}
"""

WAIT_FOR_C = "while not os.path.exists(sys.argv[1] + '.c'): time.sleep(0.01)"
SLEEP = "import time; time.sleep(60)"
IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def _absent(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()]


async def _run(
    tmp_path: Path, code: str, *args: str, **kw: object
) -> tuple[tuple[int, str], list[int]]:
    pid_file = tmp_path / "pids"
    result = await spawn_and_wait(
        [PY, "-c", code, str(pid_file), *args],
        "inv-desc-000001",
        kill_descendants=True,
        **kw,  # type: ignore[arg-type]
    )
    return result, _pids(pid_file)


async def test_setsid_grandchild_is_killed_and_reaped_when_the_run_completes(
    tmp_path: Path,
) -> None:
    pids: list[int] = []
    try:
        result, pids = await _run(tmp_path, SETSID.format(then="pass"), SLEEP)
        assert result == (0, "")
        assert all(_absent(p) for p in pids)
    finally:
        for pid in pids:
            kill_quietly(pid)


async def test_daemonised_grandchild_is_killed_and_reaped_when_the_run_completes(
    tmp_path: Path,
) -> None:
    pids: list[int] = []
    try:
        result, pids = await _run(
            tmp_path, DAEMON.format(daemon="time.sleep(60)", then="sys.exit(3)")
        )
        assert result == (3, "")
        assert len(pids) == 2
        assert not pid_alive(pids[1])  # the daemon: killed before the call returned
        # and neither it nor the middle process stays a zombie of this process
        assert await eventually(lambda: all(_absent(p) for p in pids), 10)
    finally:
        for pid in pids:
            kill_quietly(pid)


async def test_a_daemons_child_with_a_cleared_environment_is_found_below_it(tmp_path: Path) -> None:
    # the daemon keeps the tag; its own child starts with an empty environment
    daemon = (
        "import subprocess\n"
        "        c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
        "env={})\n"
        "        open(sys.argv[1] + '.c', 'w').write(str(c.pid))\n"
        "        time.sleep(60)"
    )
    pids: list[int] = []
    try:
        pid_file = tmp_path / "pids"
        task = asyncio.create_task(
            spawn_and_wait(
                [PY, "-c", DAEMON.format(daemon=daemon, then=WAIT_FOR_C), str(pid_file)],
                "inv-desc-000002",
                kill_descendants=True,
            )
        )
        # the leader exits once the daemon has started its child; the spawn ends the tree
        cleared = Path(f"{pid_file}.c")
        assert await eventually(lambda: cleared.exists() and cleared.read_text(), 30)
        pids = [int(cleared.read_text())]
        assert await asyncio.wait_for(task, 30) == (0, "")
        pids += _pids(pid_file)
        assert len(pids) == 3
        assert await eventually(lambda: all(_absent(p) for p in pids), 10)
    finally:
        for pid in pids:
            kill_quietly(pid)


async def test_setsid_grandchild_is_killed_and_reaped_on_cancel(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    task = asyncio.create_task(
        spawn_and_wait(
            [PY, "-c", SETSID.format(then="time.sleep(60)"), str(pid_file), SLEEP],
            "inv-desc-000003",
            kill_descendants=True,
        )
    )
    assert await eventually(lambda: pid_file.exists() and pid_file.read_text(), 30)
    pids = _pids(pid_file)
    try:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert all(_absent(p) for p in pids)
    finally:
        for pid in pids:
            kill_quietly(pid)


async def test_setsid_grandchild_is_killed_and_reaped_at_the_deadline(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    pids: list[int] = []
    try:
        with pytest.raises(DeadlineExceeded):
            await spawn_and_wait(
                [
                    PY,
                    "-c",
                    DAEMON.format(daemon="time.sleep(60)", then="time.sleep(60)"),
                    str(pid_file),
                ],
                "inv-desc-000004",
                deadline_seconds=1.0,
                kill_descendants=True,
            )
        pids = _pids(pid_file)
        assert len(pids) == 2
        assert await eventually(lambda: all(_absent(p) for p in pids), 10)
    finally:
        for pid in pids:
            kill_quietly(pid)


async def test_an_escaped_grandchild_ignoring_sigterm_gets_sigkill_after_the_grace(
    tmp_path: Path,
) -> None:
    pids: list[int] = []
    try:
        started = time.monotonic()
        result, pids = await _run(tmp_path, SETSID.format(then="time.sleep(0.5)"), IGNORE_TERM)
        elapsed = time.monotonic() - started
        assert result == (0, "")
        assert all(_absent(p) for p in pids)
        assert 4.0 <= elapsed < 60  # SIGTERM, the 5 s grace, then SIGKILL
    finally:
        for pid in pids:
            kill_quietly(pid)


async def test_other_runs_and_other_children_keep_their_processes_and_exit_statuses(
    tmp_path: Path,
) -> None:
    enable_subreaper()
    # This process's own children, waited for by their owners: a child in this session, waited
    # for late; a session leader whose owner holds a pidfd on it until it waits (as the outbox
    # does); one that asyncio's watcher waits for. None of them may be reaped by the launcher.
    own_session = subprocess.Popen([PY, "-c", "import sys; sys.exit(7)"], start_new_session=True)
    held = os.pidfd_open(own_session.pid)
    same_session = subprocess.Popen([PY, "-c", "import sys; sys.exit(9)"])
    via_asyncio = await asyncio.create_subprocess_exec(PY, "-c", "import sys; sys.exit(5)")
    assert wait_for(
        lambda: proc_state(own_session.pid) == "Z" and proc_state(same_session.pid) == "Z",
        30,
    )
    other_file = tmp_path / "other"
    other = asyncio.create_task(
        spawn_and_wait(
            [PY, "-c", SETSID.format(then="time.sleep(60)"), str(other_file), SLEEP],
            "inv-desc-other",
            kill_descendants=True,
        )
    )
    assert await eventually(lambda: other_file.exists() and other_file.read_text())
    other_pids = _pids(other_file)
    pids: list[int] = []
    try:
        result, pids = await _run(tmp_path, DAEMON.format(daemon="time.sleep(60)", then="pass"))
        assert result == (0, "")
        # the run's own middle process is reaped after a while; the others' children stay
        assert await eventually(lambda: all(_absent(p) for p in pids), 10)
        await asyncio.sleep(0.5)
        assert all(pid_alive(p) for p in other_pids)  # another run's escapee stays
        assert own_session.wait(timeout=10) == 7
        assert same_session.wait(timeout=10) == 9
        assert await asyncio.wait_for(via_asyncio.wait(), 10) == 5
        other.cancel()
        with pytest.raises(asyncio.CancelledError):
            await other
        assert all(_absent(p) for p in other_pids)
    finally:
        os.close(held)
        other.cancel()
        for pid in pids + other_pids:
            kill_quietly(pid)


async def test_without_kill_descendants_an_escaped_grandchild_is_left_alone(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    try:
        result = await spawn_and_wait(
            [PY, "-c", SETSID.format(then="pass"), str(pid_file), SLEEP], "inv-desc-000005"
        )
        assert result == (0, "")
        assert pid_alive(_pids(pid_file)[0])
    finally:
        for pid in _pids(pid_file):
            kill_quietly(pid)


async def test_terminate_descendants_by_another_tag(tmp_path: Path) -> None:
    assert enable_subreaper() is True
    assert enable_subreaper() is True  # idempotent
    pid_file = tmp_path / "pids"
    env = dict(os.environ, LIONAGI_DISPATCH_ID="dsp-000000001")
    leader = subprocess.Popen(
        [PY, "-c", SETSID.format(then="pass"), str(pid_file), SLEEP],
        env=env,
        start_new_session=True,
    )
    assert leader.wait(timeout=30) == 0
    pids = _pids(pid_file)
    try:
        assert pid_alive(pids[0])
        assert await terminate_descendants("LIONAGI_DISPATCH_ID", "other-id", grace=1.0) is True
        assert pid_alive(pids[0])
        assert await terminate_descendants("LIONAGI_DISPATCH_ID", "dsp-000000001", grace=1.0)
        assert all(_absent(p) for p in pids)
    finally:
        for pid in pids:
            kill_quietly(pid)


def test_escapees_are_found_when_the_loop_runs_in_another_thread(tmp_path: Path) -> None:
    # The leader is forked by a worker thread; orphans still go to this process's main thread.
    import threading

    results: list[object] = []

    def worker() -> None:
        try:
            results.append(asyncio.run(_run(tmp_path, SETSID.format(then="pass"), SLEEP)))
        except BaseException as exc:  # reported below
            results.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(60)
    [outcome] = results
    assert not isinstance(outcome, BaseException), outcome
    result, pids = outcome  # type: ignore[misc]
    try:
        assert result == (0, "")
        assert all(_absent(p) for p in pids)
    finally:
        for pid in pids:
            kill_quietly(pid)


async def test_without_pidfds_a_waiting_thread_watches_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on a kernel or sandbox without pidfd_open: the probe's answer is what changes.
    from studio_launcher import _child

    monkeypatch.setattr(_child, "_supported", False)
    assert await spawn_and_wait([PY, "-c", "import sys; sys.exit(6)"], "i") == (6, "")
    pids: list[int] = []
    try:
        result, pids = await _run(tmp_path, SETSID.format(then="pass"), SLEEP)
        assert result == (0, "")
        assert all(_absent(p) for p in pids)
    finally:
        for pid in pids:
            kill_quietly(pid)
