"""find_processes_by_env / terminate_processes: orphans whose pid was never recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from studio_launcher import (
    find_processes_by_env,
    process_group_of,
    terminate_processes,
)
from studio_launcher.testing import kill_quietly, pid_alive, wait_for

PY = sys.executable
# A session leader that starts a grandchild (same group, inherited environment) and sleeps.
TREE = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(g.pid))
time.sleep(60)
"""


def _tagged(tmp_path: Path, tag: str, db: str) -> tuple[subprocess.Popen[bytes], Path]:
    env = dict(os.environ, LIONAGI_INVOCATION_ID=tag, LIONAGI_STUDIO_DB=db)
    pid_file = tmp_path / f"{tag}-{db.replace('/', '_')}.pid"
    leader = subprocess.Popen(
        [PY, "-c", TREE, str(pid_file)],
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    return leader, pid_file


async def test_finds_a_child_and_its_grandchild_by_their_environment(tmp_path: Path) -> None:
    leader, pid_file = _tagged(tmp_path, "0123456789ab", "/db/one")
    other, other_file = _tagged(tmp_path, "ba9876543210", "/db/one")
    elsewhere, elsewhere_file = _tagged(tmp_path, "0123456789ab", "/db/two")
    try:
        for path in (pid_file, other_file, elsewhere_file):
            assert wait_for(lambda p=path: p.exists() and p.read_text() != "", 30)
        grandchild = int(pid_file.read_text())
        found = find_processes_by_env(
            "LIONAGI_INVOCATION_ID", {"0123456789ab"}, where={"LIONAGI_STUDIO_DB": "/db/one"}
        )
        assert set(found) == {"0123456789ab"}
        assert sorted(found["0123456789ab"]) == sorted([leader.pid, grandchild])
        assert process_group_of(grandchild) == leader.pid
        started = time.monotonic()
        assert await terminate_processes(found["0123456789ab"], grace=2.0) is True
        assert time.monotonic() - started < 10
        leader.wait(timeout=10)
        assert wait_for(lambda: not pid_alive(grandchild), 10)
        # the other invocation and the same id on another database were left alone
        assert other.poll() is None and elsewhere.poll() is None
    finally:
        for proc, path in ((leader, pid_file), (other, other_file), (elsewhere, elsewhere_file)):
            proc.kill()
            proc.wait()
            if path.exists() and path.read_text():
                kill_quietly(int(path.read_text()))


def test_nothing_matches_nothing() -> None:
    assert find_processes_by_env("LIONAGI_INVOCATION_ID", set()) == {}
    assert find_processes_by_env("LIONAGI_INVOCATION_ID", {"no-such-invocation-id"}) == {}


async def test_never_signals_its_own_group_or_a_gone_pid() -> None:
    child = subprocess.Popen([PY, "-c", "pass"])
    child.wait()
    assert process_group_of(child.pid) is None
    # our own pid: its group is ours, which is never signalled
    assert await terminate_processes([os.getpid(), child.pid], grace=0.1) is True


async def test_terminates_a_descendant_that_left_the_group_and_the_tag(tmp_path: Path) -> None:
    # An orphan (as after a crash) whose child ran setsid with an empty environment: only the
    # orphan is found by its environment; the escaped child is found below it.
    pid_file = tmp_path / "escaped.pid"
    code = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={},
                     start_new_session=True)
open(sys.argv[1], "w").write(str(g.pid))
time.sleep(60)
"""
    env = dict(os.environ, LIONAGI_INVOCATION_ID="c0ffee000001", LIONAGI_STUDIO_DB="/db/three")
    leader = subprocess.Popen(
        [PY, "-c", code, str(pid_file)], stdin=subprocess.DEVNULL, env=env, start_new_session=True
    )
    escaped = 0
    try:
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text() != "", 30)
        escaped = int(pid_file.read_text())
        found = find_processes_by_env(
            "LIONAGI_INVOCATION_ID", {"c0ffee000001"}, where={"LIONAGI_STUDIO_DB": "/db/three"}
        )
        assert found == {"c0ffee000001": [leader.pid]}
        assert await terminate_processes(found["c0ffee000001"], grace=2.0) is True
        leader.wait(timeout=10)
        assert wait_for(lambda: not pid_alive(escaped), 10)
    finally:
        leader.kill()
        leader.wait()
        if escaped:
            kill_quietly(escaped)
