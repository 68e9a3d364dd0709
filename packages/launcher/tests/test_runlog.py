"""Run logs: real children writing to stdout and stderr, the bounded file, readers meanwhile."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import sys
import time
from pathlib import Path

import pytest

from studio_launcher import (
    RUN_LOG_BYTES,
    DeadlineExceeded,
    InvalidAction,
    SpawnFailed,
    spawn_and_wait,
)
from studio_launcher.testing import eventually

PY = sys.executable
MARKER = re.compile(rb"\n\[\.\.\. (\d+) bytes dropped \.\.\.\]\n")

# Writes sys.argv[1] bytes of a numbered pattern to stdout (8-byte lines) in 64 KiB writes.
PATTERN = """
import sys
total = int(sys.argv[1])
data = b"".join(b"%07d\\n" % i for i in range(total // 8 + 1))[:total]
out = sys.stdout.buffer
for i in range(0, total, 65536):
    out.write(data[i:i + 65536])
out.flush()
sys.stderr.write("done")
"""


def _pattern(total: int) -> bytes:
    return b"".join(b"%07d\n" % i for i in range(total // 8 + 1))[:total]


def _check_bounded(content: bytes, data: bytes, bound: int, head: int) -> int:
    """The file is head + marker + the newest rest, within the bound; returns the drop count."""
    assert len(content) <= bound
    assert content[:head] == data[:head]
    found = MARKER.search(content, head - 1)
    assert found is not None and found.start() == head
    dropped = int(found.group(1))
    rest = content[found.end() :]
    assert rest == data[len(data) - len(rest) :]
    assert head + dropped + len(rest) == len(data)
    assert len(content) >= bound - 32  # the room is filled with recent output at the end
    return dropped


async def test_stdout_and_stderr_go_to_the_log_created_0600(tmp_path: Path) -> None:
    log = tmp_path / "runs" / "run1.log"
    code = (
        "import sys\n"
        "print('out one', flush=True)\n"
        "sys.stderr.write('err two\\n'); sys.stderr.flush()\n"
        "print('out three', flush=True)\n"
        "sys.exit(2)\n"
    )
    result = await spawn_and_wait([PY, "-c", code], "inv-log-1", log_path=log)
    assert result == (2, "err two\n")  # the stderr tail is stderr only, as before
    lines = log.read_bytes().splitlines()
    # both streams whole, each in its own order (between the two pipes: as they were read)
    assert sorted(lines) == [b"err two", b"out one", b"out three"]
    assert lines.index(b"out one") < lines.index(b"out three")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700


async def test_an_existing_log_is_replaced_and_made_private(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_bytes(b"stale " * 1000)
    log.chmod(0o644)
    await spawn_and_wait([PY, "-c", "print('fresh')"], "inv-log-2", log_path=str(log))
    assert log.read_bytes() == b"fresh\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


async def test_a_silent_run_leaves_no_log_file_and_no_stale_one(tmp_path: Path) -> None:
    # The file is created with the first output; a stale file at the path is removed at spawn
    # so a reader never takes an older run's output for this one's.
    log = tmp_path / "runs" / "silent.log"
    assert await spawn_and_wait([PY, "-c", "pass"], "inv-silent", log_path=log) == (0, "")
    assert not log.exists()
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700  # the directory is made at spawn
    log.write_bytes(b"stale")
    assert await spawn_and_wait([PY, "-c", "pass"], "inv-silent-2", log_path=log) == (0, "")
    assert not log.exists()


async def test_the_log_can_be_read_while_the_child_runs(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    go = tmp_path / "go"
    code = (
        "import os, sys, time\n"
        "sys.stdout.write('partial line without newline'); sys.stdout.flush()\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
        "sys.stderr.write(' and the rest\\n')\n"
    )
    task = asyncio.create_task(spawn_and_wait([PY, "-c", code, str(go)], "i", log_path=log))
    assert await eventually(
        lambda: log.exists() and log.read_bytes() == b"partial line without newline", 30
    )
    assert not task.done()
    go.touch()
    assert await asyncio.wait_for(task, 30) == (0, " and the rest\n")
    assert log.read_bytes() == b"partial line without newline and the rest\n"


@pytest.mark.parametrize(("bound", "head"), [(200_000, 65536), (10_000, 5000), (131_072, 65536)])
async def test_a_large_output_keeps_the_head_a_marker_and_the_newest_rest(
    tmp_path: Path, bound: int, head: int
) -> None:
    log = tmp_path / "run.log"
    total = 3_000_000
    result = await spawn_and_wait(
        [PY, "-c", PATTERN, str(total)], "i", log_path=log, log_bytes=bound
    )
    assert result == (0, "done")
    data = _pattern(total) + b"done"
    assert _check_bounded(log.read_bytes(), data, bound, head) > 0


async def test_output_within_the_bound_is_kept_whole(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    total = RUN_LOG_BYTES - 4
    assert await spawn_and_wait([PY, "-c", PATTERN, str(total)], "i", log_path=log) == (0, "done")
    assert log.read_bytes() == _pattern(total) + b"done"


async def test_100_mb_fast_without_newlines_stays_bounded_and_the_loop_stays_live(
    tmp_path: Path,
) -> None:
    log = tmp_path / "run.log"
    bound = 256 * 1024
    code = (
        "import sys\n"
        "chunk = b'x' * (1 << 20)\n"
        "for _ in range(100): sys.stdout.buffer.write(chunk)\n"
        "sys.stdout.flush()\n"
    )
    sizes: list[int] = []
    gaps: list[float] = []

    async def watch() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            with_size = log.stat().st_size if log.exists() else 0
            sizes.append(with_size)

    watcher = asyncio.create_task(watch())
    started = time.monotonic()
    try:
        result = await asyncio.wait_for(
            spawn_and_wait([PY, "-c", code], "i", log_path=log, log_bytes=bound), 120
        )
    finally:
        watcher.cancel()
    elapsed = time.monotonic() - started
    assert result == (0, "")
    assert sizes and max(sizes) <= bound
    content = log.read_bytes()
    dropped = _check_bounded(content, b"x" * (100 << 20), bound, 65536)
    assert dropped > 99 * (1 << 20)
    # a generous liveness bound: the loop kept running while the output streamed in (a reader
    # that drained the pipe to its end in one go would stall it for most of the run)
    assert max(gaps) < max(1.0, elapsed / 2)


async def test_the_log_keeps_output_of_a_run_past_its_deadline(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    code = "import sys, time; print('before', flush=True); time.sleep(60)"
    with pytest.raises(DeadlineExceeded):
        await spawn_and_wait([PY, "-c", code], "i", log_path=log, deadline_seconds=1.0)
    assert log.read_bytes() == b"before\n"


async def test_the_log_keeps_output_written_while_a_cancelled_run_ends(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    code = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        "    sys.stderr.write('got SIGTERM\\n'); sys.stderr.flush(); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('running', flush=True)\n"
        "time.sleep(60)\n"
    )
    task = asyncio.create_task(spawn_and_wait([PY, "-c", code], "i", log_path=log))
    assert await eventually(lambda: log.exists() and log.read_bytes(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log.read_bytes() == b"running\ngot SIGTERM\n"


async def test_without_a_log_path_stdout_is_still_discarded(tmp_path: Path) -> None:
    before = set(os.listdir(tmp_path))
    assert await spawn_and_wait([PY, "-c", "print('x' * 100)"], "i") == (0, "")
    assert set(os.listdir(tmp_path)) == before


async def test_a_log_that_cannot_be_created_fails_before_anything_runs(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    ran = tmp_path / "ran"
    with pytest.raises(SpawnFailed) as info:
        await spawn_and_wait(
            [PY, "-c", "import sys; open(sys.argv[1], 'w').close()", str(ran)],
            "i",
            log_path=blocker / "run.log",
        )
    assert str(blocker / "run.log") in str(info.value)
    assert not ran.exists()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"log_path": ""}, "log_path"),
        ({"log_path": "a\x00b"}, "log_path"),
        ({"log_path": 3}, "log_path"),
        ({"log_path": "x.log", "log_bytes": 1023}, "log_bytes"),
        ({"log_path": "x.log", "log_bytes": True}, "log_bytes"),
        ({"log_path": "x.log", "log_bytes": 2.5}, "log_bytes"),
        ({"log_bytes": -1}, "log_bytes"),
    ],
)
async def test_bad_log_arguments_are_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, object], field: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidAction) as info:
        await spawn_and_wait([PY, "-c", "pass"], "i", **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert os.listdir(tmp_path) == []
